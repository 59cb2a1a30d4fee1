// The small messages of every training step besides activations and gradients, in one place for
// the runtime that sends them (parallel/parallel_rank.cc, train/parallel_rank_loop.cc,
// train/plan_switch.cc) and the predictor that times them (perf/predict_step.cc), so that the two
// cannot drift apart (they did: the predictor timed a 10-double metrics gather after the runtime
// had grown it to 13).
#pragma once

#include <cstdint>

namespace motley::sched {

// World all-reduce after the data-parallel sync, f64: the loss sum and this rank's share of the
// squared gradient norm.
inline constexpr int64_t kLossNormDoubles = 2;
// Per-rank step metrics all-gathered over the world after the optimizer, f64 (the fields are
// listed in train/parallel_run_context.h). With link reporting (straggler reports on an emulated
// cluster) each rank appends kLinkTrafficDoublesPerRank doubles per world rank.
inline constexpr int64_t kStepMetricsDoubles = 13;
inline constexpr int64_t kLinkTrafficDoublesPerRank = 3;
// Doubles each rank contributes to the metrics all-gather of a world of `world_size` ranks.
inline constexpr int64_t StepMetricsDoublesPerRank(bool link_reports, int64_t world_size) {
  return kStepMetricsDoubles + (link_reports ? kLinkTrafficDoublesPerRank * world_size : 0);
}
// The plan agreement before each step: rank 0 broadcasts the length of its plan-switch decision
// as one f64 (0: no switch; the plan text follows only on a switch).
inline constexpr int64_t kPlanAgreementDoubles = 1;

}  // namespace motley::sched
