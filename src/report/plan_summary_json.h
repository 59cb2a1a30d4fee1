// The outcome of `motley plan` as one JSON object (`motley plan --summary FILE`), for scripts and
// benchmarks that compare plans across clusters (bench/plan_set.py): the chosen plan with its one
// tokens/s, MFU over the devices used and over all, the devices it leaves idle and why, the
// traffic of its step that crosses islands, every baseline and reference with its ratio, the
// ranked table and the planning cost. The fields are
// documented in docs/formats/plan-summary.md. Pure function; thread-safe.
#pragma once

#include <string>

#include "core/status.h"
#include "perf/predictor.h"
#include "plan/planner.h"

namespace motley::report {

// How long the planner took, as measured by its caller (0 = not measured).
struct PlanningCost {
  double wall_s = 0;
  double cpu_s = 0;  // process CPU time over all threads
};

// `written` is the plan `motley plan` wrote (the chosen one, or a --baseline); the summary
// describes the report's chosen plan and names the written one. `predictor` is the one the
// report was planned with. Errors only when the chosen plan's step program cannot be built.
Result<std::string> PlanSummaryJson(const perf::Predictor& predictor,
                                    const plan::PlanReport& report, const plan::Candidate& written,
                                    const PlanningCost& cost);

}  // namespace motley::report
