// The shared helpers of the parallel trainer's parts (parallel_run_context.h).
#include "train/parallel_run_context.h"

#include <algorithm>

namespace motley::train::internal {

void PackTimes(const StageTimes& t, bool skipped, double start_s, double end_s, bool stop,
               const Probe& probe, double* out) {
  const double values[kStepFields] = {t.forward_s,     t.backward_s,        t.p2p_s,
                                      t.tp_comm_s,     t.dp_sync_s,         t.optimizer_s,
                                      t.step_s,        skipped ? 1.0 : 0.0, start_s,
                                      end_s,           stop ? 1.0 : 0.0,    probe.measured_s,
                                      probe.expected_s};
  std::copy(values, values + kStepFields, out);
}

void PackLinks(const comm::LinkTraffic& traffic, int world_size, double* out) {
  for (int q = 0; q < world_size; ++q) {
    const auto i = static_cast<size_t>(q);
    const bool known = i < traffic.bytes.size();
    out[q] = known ? traffic.bytes[i] : 0.0;
    out[world_size + q] = known ? static_cast<double>(traffic.transfers[i]) : 0.0;
    out[2 * world_size + q] = known ? traffic.seconds[i] : 0.0;
  }
}

const char* ClockName(const RunContext& ctx) {
  if (!ctx.emulated) return "host";
  return ctx.clock_mode == VirtualClock::Mode::kVirtual ? "virtual" : "wall";
}

bool Traced(const ParallelTrainerOptions& o, int64_t step) {
  if (o.trace_path.empty()) return false;
  if (o.trace_steps.empty()) return step == 1;
  return std::find(o.trace_steps.begin(), o.trace_steps.end(), step) != o.trace_steps.end();
}

double StepTime(const RunContext& ctx, const tensor::Tensor& all, double wall_s,
                double* virtual_s) {
  const double* v = all.data<double>();
  const int64_t n = all.numel() / ctx.gather_stride;
  double first_start = v[kStartField];
  double last_end = v[kEndField];
  for (int64_t q = 1; q < n; ++q) {
    first_start = std::min(first_start, v[q * ctx.gather_stride + kStartField]);
    last_end = std::max(last_end, v[q * ctx.gather_stride + kEndField]);
  }
  *virtual_s = last_end - first_start;
  const bool on_virtual = ctx.emulated && ctx.clock_mode == VirtualClock::Mode::kVirtual;
  return on_virtual ? *virtual_s : wall_s;
}

}  // namespace motley::train::internal
