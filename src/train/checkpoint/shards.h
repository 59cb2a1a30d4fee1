// Tensor-parallel shards of whole tensors, for checkpoints: the slice helpers live in
// model/shards.h (shared with state migration between plans, parallel/migration.h); this header
// keeps their names in motley::train.
#pragma once

#include "model/shards.h"

namespace motley::train {

using model::ExtractSlice;
using model::PlaceSlice;

}  // namespace motley::train
