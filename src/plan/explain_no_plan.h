// Why PlanCluster found no plan: the binding constraint, for the error it returns. The global
// batch against the micro-batch sizes, the model's states against the whole cluster's memory,
// and otherwise the search's reasons by category (memory, batch, depth: the first word of each
// infeasible evaluation's reason), with the deepest memory limit spelled out where batch limits
// hid it. Split from planner.cc so the search file keeps to the search.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/status.h"
#include "perf/predictor.h"
#include "plan/planner.h"

namespace motley::plan {

// `reasons`: per category an example reason (the longest seen); `reason_counts`: per category
// how many evaluations gave it; `layouts`: how many layouts the search considered. Always an
// error status.
Status ExplainNoPlan(const perf::Predictor& predictor, const PlannerOptions& options,
                     const std::map<std::string, std::string>& reasons,
                     const std::map<std::string, int64_t>& reason_counts, int64_t layouts);

}  // namespace motley::plan
