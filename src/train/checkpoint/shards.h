// Tensor-parallel shards of whole tensors, for checkpoints: a shard is the slice
// [offset, offset + part_shape[dim]) along dimension `dim` of a row-major tensor of `full_shape`
// (model/parameters.h, ParamInfo::shard_dim). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/tensor.h"

namespace motley::train {

// part = full[..., offset:offset+n, ...] along `dim` (shapes checked).
void ExtractSlice(std::span<const float> full, const tensor::Shape& full_shape, int dim,
                  int64_t offset, std::span<float> part, const tensor::Shape& part_shape);
// full[..., offset:offset+n, ...] = part along `dim` (shapes checked).
void PlaceSlice(std::span<float> full, const tensor::Shape& full_shape, int dim, int64_t offset,
                std::span<const float> part, const tensor::Shape& part_shape);

}  // namespace motley::train
