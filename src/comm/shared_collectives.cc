// See shared_collectives.h.
#include "comm/shared_collectives.h"

#include <algorithm>
#include <cstring>

#include "comm/reduce_kernels.h"

namespace motley::comm {
namespace {

// Bytes per block of a reduction: the accumulator block and one source block stay in L1/L2
// while every source is folded in and the result is copied out.
constexpr size_t kBlockBytes = size_t{32} << 10;

size_t ChunksOf(size_t bytes) {
  return (bytes + kSharedChunkBytes - 1) / kSharedChunkBytes;
}

std::vector<size_t> ByteOffsets(const std::vector<int64_t>& counts, size_t es) {
  std::vector<size_t> off(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i)
    off[i + 1] = off[i] + static_cast<size_t>(counts[i]) * es;
  return off;
}

// dst (count elements) = src[0] op src[1] op ... op src[n-1], block by block. dst may alias src[0]
// (AllReduce in place); it never aliases another source. After each block, copies it to `copies`.
void ReduceRange(char* dst, const std::vector<const char*>& src, const std::vector<char*>& copies,
                 size_t count, tensor::DType dtype, ReduceOp op) {
  const size_t es = tensor::DTypeSize(dtype);
  if (src.size() == 2 && copies.size() == 1 && dst == src[0] && copies[0] == src[1]) {
    // Two ranks, in place: one fused pass writes the result into both tensors.
    ReduceElementsBoth(dst, copies[0], count, dtype, op);
    return;
  }
  const size_t block = std::max<size_t>(1, kBlockBytes / es);
  for (size_t lo = 0; lo < count; lo += block) {
    const size_t m = std::min(block, count - lo);
    char* d = dst + lo * es;
    if (src[0] + lo * es != d) std::memcpy(d, src[0] + lo * es, m * es);
    for (size_t k = 1; k < src.size(); ++k) ReduceElements(d, src[k] + lo * es, m, dtype, op);
    for (char* c : copies) std::memcpy(c + lo * es, d, m * es);
  }
}

}  // namespace

void SharedAllReduceWork(const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next,
                         int64_t numel, tensor::DType dtype, ReduceOp op) {
  const size_t es = tensor::DTypeSize(dtype);
  const size_t total = static_cast<size_t>(numel) * es;
  const size_t chunks = ChunksOf(total);
  std::vector<const char*> src(all.size());
  std::vector<char*> copies(all.size() - 1);
  for (uint64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
    const size_t lo = c * kSharedChunkBytes;
    const size_t bytes = std::min(kSharedChunkBytes, total - lo);
    for (size_t k = 0; k < all.size(); ++k) src[k] = static_cast<const char*>(all[k].out) + lo;
    for (size_t k = 1; k < all.size(); ++k) copies[k - 1] = static_cast<char*>(all[k].out) + lo;
    ReduceRange(static_cast<char*>(all[0].out) + lo, src, copies, bytes / es, dtype, op);
  }
}

void SharedReduceScatterWork(const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next,
                             const std::vector<int64_t>& counts, tensor::DType dtype, ReduceOp op) {
  const size_t es = tensor::DTypeSize(dtype);
  const auto off = ByteOffsets(counts, es);
  std::vector<size_t> first(all.size() + 1, 0);  // first chunk of each rank's output
  for (size_t k = 0; k < all.size(); ++k) first[k + 1] = first[k] + ChunksOf(off[k + 1] - off[k]);
  std::vector<const char*> src(all.size());
  for (uint64_t c = next.fetch_add(1); c < first.back(); c = next.fetch_add(1)) {
    const size_t k =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), c) - first.begin()) - 1;
    const size_t lo = (c - first[k]) * kSharedChunkBytes;
    const size_t bytes = std::min(kSharedChunkBytes, off[k + 1] - off[k] - lo);
    for (size_t j = 0; j < all.size(); ++j) {
      src[j] = static_cast<const char*>(all[j].in) + off[k] + lo;
    }
    ReduceRange(static_cast<char*>(all[k].out) + lo, src, {}, bytes / es, dtype, op);
  }
}

void SharedAllGatherWork(const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next,
                         const std::vector<int64_t>& counts, size_t element_size) {
  const size_t n = all.size();
  const auto off = ByteOffsets(counts, element_size);
  // Work items: (source k, destination d) pairs, in chunks of the source's input.
  std::vector<size_t> first(n + 1, 0);
  for (size_t k = 0; k < n; ++k) first[k + 1] = first[k] + ChunksOf(off[k + 1] - off[k]);
  const size_t per_dst = first.back();
  for (uint64_t c = next.fetch_add(1); c < per_dst * n; c = next.fetch_add(1)) {
    const size_t d = c / per_dst, cc = c % per_dst;
    const size_t k =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), cc) - first.begin()) - 1;
    const size_t lo = (cc - first[k]) * kSharedChunkBytes;
    const size_t bytes = std::min(kSharedChunkBytes, off[k + 1] - off[k] - lo);
    char* dst = static_cast<char*>(all[d].out) + off[k] + lo;
    const char* from = static_cast<const char*>(all[k].in) + lo;
    // A rank's input may be its own slice of its output (in-place gather): nothing to copy.
    if (dst != from) std::memmove(dst, from, bytes);
  }
}

void SharedBroadcastWork(const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next,
                         int root, size_t bytes) {
  const size_t n = all.size();
  const size_t per_dst = ChunksOf(bytes);
  const char* from = static_cast<const char*>(all[static_cast<size_t>(root)].in);
  for (uint64_t c = next.fetch_add(1); c < per_dst * n; c = next.fetch_add(1)) {
    const size_t d = c / per_dst;
    if (d == static_cast<size_t>(root)) continue;
    const size_t lo = (c % per_dst) * kSharedChunkBytes;
    std::memcpy(static_cast<char*>(all[d].out) + lo, from + lo,
                std::min(kSharedChunkBytes, bytes - lo));
  }
}

}  // namespace motley::comm
