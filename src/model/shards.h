// Tensor-parallel shards of whole tensors: a shard is the slice [offset, offset + part_shape[dim])
// along dimension `dim` of a row-major tensor of `full_shape` (parameters.h, ParamInfo::shard_dim).
// Used by checkpoints (whole tensors on disk, shards in memory) and by state migration between
// plans (parallel/migration.h: a piece of one holder's shard moves into another holder's shard;
// "full" is then the holder's local tensor). Pure functions on host memory; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/tensor.h"

namespace motley::model {

// part = full[..., offset:offset+n, ...] along `dim` (shapes checked).
void ExtractSlice(std::span<const float> full, const tensor::Shape& full_shape, int dim,
                  int64_t offset, std::span<float> part, const tensor::Shape& part_shape);
// full[..., offset:offset+n, ...] = part along `dim` (shapes checked).
void PlaceSlice(std::span<float> full, const tensor::Shape& full_shape, int dim, int64_t offset,
                std::span<const float> part, const tensor::Shape& part_shape);

}  // namespace motley::model
