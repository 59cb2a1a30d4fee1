// See shards.h.
#include "model/shards.h"

#include <algorithm>

#include "core/check.h"

namespace motley::model {

namespace {

// Calls copy(full_index, part_index, count) for each contiguous run of the slice.
template <typename F>
void ForEachRun(const tensor::Shape& full_shape, int dim, int64_t offset,
                const tensor::Shape& part_shape, F copy) {
  MOTLEY_CHECK(full_shape.rank() == part_shape.rank() && dim >= 0 && dim < full_shape.rank(),
               "slice: rank or dim mismatch");
  for (int i = 0; i < full_shape.rank(); ++i) {
    MOTLEY_CHECK(i == dim || full_shape[i] == part_shape[i], "slice: shapes differ off dim");
  }
  MOTLEY_CHECK(offset >= 0 && offset + part_shape[dim] <= full_shape[dim], "slice out of range");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= full_shape[i];
  for (int i = dim + 1; i < full_shape.rank(); ++i) inner *= full_shape[i];
  const int64_t run = part_shape[dim] * inner;
  for (int64_t o = 0; o < outer; ++o) {
    copy((o * full_shape[dim] + offset) * inner, o * run, run);
  }
}

}  // namespace

void ExtractSlice(std::span<const float> full, const tensor::Shape& full_shape, int dim,
                  int64_t offset, std::span<float> part, const tensor::Shape& part_shape) {
  MOTLEY_CHECK(full.size() == static_cast<size_t>(full_shape.numel()) &&
                   part.size() == static_cast<size_t>(part_shape.numel()),
               "ExtractSlice: buffer sizes");
  ForEachRun(full_shape, dim, offset, part_shape, [&](int64_t f, int64_t p, int64_t n) {
    std::copy_n(full.begin() + f, n, part.begin() + p);
  });
}

void PlaceSlice(std::span<float> full, const tensor::Shape& full_shape, int dim, int64_t offset,
                std::span<const float> part, const tensor::Shape& part_shape) {
  MOTLEY_CHECK(full.size() == static_cast<size_t>(full_shape.numel()) &&
                   part.size() == static_cast<size_t>(part_shape.numel()),
               "PlaceSlice: buffer sizes");
  ForEachRun(full_shape, dim, offset, part_shape, [&](int64_t f, int64_t p, int64_t n) {
    std::copy_n(part.begin() + p, n, full.begin() + f);
  });
}

}  // namespace motley::model
