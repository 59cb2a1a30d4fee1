// See memory_check.h.
#include "train/memory_check.h"

#include <unistd.h>

#include <optional>

#include <fmt/core.h>

#include "core/checked_math.h"
#include "core/units.h"

namespace motley::train {

Result<StageMemory> StageMemoryAtLeast(const spec::ModelSpec& model,
                                       const model::StageLayout& layout, int64_t batch,
                                       int64_t seq_len) {
  auto overflow = [&] {
    return Err(StatusCode::kInvalidArgument,
               "model '{}': a stage of {} blocks at micro-batch {} x {} tokens holds more than "
               "2^63 bytes",
               model.name, layout.num_blocks, batch, seq_len);
  };
  const int64_t f32 = 4;
  const int64_t copies = layout.allocate_moments ? 4 : 2;  // value, grad [, m, v]
  int64_t params = 0;
  for (const model::ParamInfo& info : model::StageParamInfos(model, layout)) {
    const std::optional<int64_t> sum = CheckedAdd(params, info.shape.numel());
    if (!sum) return overflow();
    params = *sum;
  }
  StageMemory m;
  const std::optional<int64_t> state = CheckedProduct({params, copies, f32});
  const std::optional<int64_t> tokens = CheckedMul(batch, seq_len);
  if (!state || !tokens) return overflow();
  m.parameter_bytes = *state;
  const std::optional<int64_t> resid =
      CheckedProduct({layout.num_blocks + 1, *tokens, model.hidden, f32});
  const std::optional<int64_t> logits =
      layout.has_head ? CheckedProduct({2, *tokens, model.vocab_size, f32}) : int64_t{0};
  if (!resid || !logits) return overflow();
  const std::optional<int64_t> act = CheckedAdd(*resid, *logits);
  if (!act || !CheckedAdd(m.parameter_bytes, *act)) return overflow();
  m.activation_bytes = *act;
  return m;
}

int64_t HostMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<int64_t>(pages) * static_cast<int64_t>(page);
}

Status CheckFits(std::string_view who, const StageMemory& need, int64_t extra_host_bytes,
                 double capacity_bytes) {
  const double total = static_cast<double>(need.total()) + static_cast<double>(extra_host_bytes);
  if (capacity_bytes <= 0 || total <= capacity_bytes) return Status::Ok();
  std::string extra;
  if (extra_host_bytes > 0) {
    extra = fmt::format(", {:.3g} GiB of host batch buffers",
                        static_cast<double>(extra_host_bytes) / kGiB);
  }
  return Err(StatusCode::kResourceExhausted,
             "{}: needs at least {:.0f} bytes ({:.3g} GiB: {:.3g} GiB of parameters, gradients "
             "and optimizer moments, {:.3g} GiB of one micro-batch's activations{}) but has "
             "{:.0f} bytes ({:.3g} GiB); use a smaller model or batch, more micro-batches, or a "
             "plan over more devices",
             who, total, total / kGiB, static_cast<double>(need.parameter_bytes) / kGiB,
             static_cast<double>(need.activation_bytes) / kGiB, extra, capacity_bytes,
             capacity_bytes / kGiB);
}

}  // namespace motley::train
