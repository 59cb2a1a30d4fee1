// The planner as the tests of this folder run it on the emulated two-speed cluster (pvr_plans.h):
// micro-batch sizes 1-4, TP 1 and 2, no recompute, no exhaustive reference. Callers change what
// their check needs (recompute choices, ZeRO-1, baselines).
#pragma once

#include "plan/planner.h"

namespace motley::testing {

inline plan::PlannerOptions TwoSpeedPlannerOptions() {
  plan::PlannerOptions options;
  options.micro_batch_sizes = {1, 2, 3, 4};
  options.recompute = {spec::Recompute::kNone};
  options.tp_degrees = {1, 2};
  options.exhaustive_max_units = 0;
  return options;
}

}  // namespace motley::testing
