// Re-planning entry point (docs/architecture.md §9): given current straggler rates and the running
// plan, proposes the plan that minimises horizon_steps * predicted iteration time + the time to
// move model state, so that plans which move little state win unless a bigger move pays for itself
// within the horizon. Candidates: the current plan, the current layout with blocks and
// micro-batches re-split for the new rates (moves the least), and the planner's ranked plans.
//
// Ownership: the predictor must outlive the call. Thread safety: reentrant.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "perf/predictor.h"
#include "plan/planner.h"
#include "spec/plan.h"

namespace motley::plan {

struct ReplanOptions {
  PlannerOptions planner;       // planner.rates and .link_rates: the current straggler rates
  int64_t horizon_steps = 200;  // steps the new plan is expected to run before the next change
};

struct ReplanChoice {
  Candidate candidate;
  Bytes moved_bytes = 0;       // parameters + optimizer states that change owner, all devices
  Seconds migration_s = 0;     // slowest device's transfer time for its incoming state
  double score_s = 0;          // horizon * iteration + migration
};

struct ReplanResult {
  ReplanChoice chosen;
  ReplanChoice current;        // the running plan under the current rates
  ReplanChoice rebalanced;     // same layout, re-split
  std::vector<ReplanChoice> fresh;  // the planner's top plans
};

// State (weights, master weights, Adam moments) that the devices of `next` must receive because
// they did not hold it under `current` (a changed TP degree moves the whole stage), and the time
// for the device receiving the most, at its node's NIC bandwidth (or intra link when all comes
// from its own node).
void MovedState(const perf::Predictor& predictor, const spec::Plan& current, const spec::Plan& next,
                Bytes* moved_bytes, Seconds* migration_s);

Result<ReplanResult> Replan(const perf::Predictor& predictor, const spec::Plan& current,
                            const ReplanOptions& options);

}  // namespace motley::plan
