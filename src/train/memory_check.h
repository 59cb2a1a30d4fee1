// Memory checks before set-up (issue 17): the bytes a stage will certainly allocate, against the
// memory of the device that runs it and of the host, so that a model, batch or plan too large
// fails with an error naming the device and the bytes before anything is allocated, instead of
// an allocation failure (a MOTLEY_CHECK, bad_alloc or the kernel's OOM killer) part-way through.
//
// The count is a lower bound, exact in what it counts: the parameter state the stage allocates
// (model::StageParamInfos: values and gradients, plus the two AdamW moments unless ZeRO-1 shards
// them), one micro-batch's residual stream ((num_blocks + 1) x (B, T, C) f32, model/stage.h), and
// on the last stage the logits and their gradient (2 x (B, T, V) f32). Every other activation
// (attention probabilities, SwiGLU intermediates, further in-flight micro-batches) comes on top;
// an emulated device's backend enforces the rest at allocation (backend/emulated), a CUDA device
// reports an out-of-memory Status (backend/cuda). So the check never refuses a stage that fits.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "model/parameters.h"
#include "spec/model_spec.h"

namespace motley::train {

struct StageMemory {
  int64_t parameter_bytes = 0;   // values, gradients and (when allocated) AdamW moments
  int64_t activation_bytes = 0;  // one micro-batch's residual stream and logits (see above)
  int64_t total() const { return parameter_bytes + activation_bytes; }
};

// The lower bound above for `layout` at micro-batch size `batch` and sequence length `seq_len`
// (inputs validated: spec/limits.h keeps every product inside int64; checked anyway).
Result<StageMemory> StageMemoryAtLeast(const spec::ModelSpec& model,
                                       const model::StageLayout& layout, int64_t batch,
                                       int64_t seq_len);

// Physical memory of this host in bytes (sysconf), 0 when unknown.
int64_t HostMemoryBytes();

// kResourceExhausted when `need` > `capacity_bytes`: "<who>: needs at least N bytes (X GiB: ...)
// but has M bytes (Y GiB)". `who` names the device or the host.
Status CheckFits(std::string_view who, const StageMemory& need, int64_t extra_host_bytes,
                 double capacity_bytes);

}  // namespace motley::train
