// Exhaustive planner: the oracle for the pruned one on small instances (docs/architecture.md §3
// rule 4). Enumerates, for every TP degree per device type: every subset of the TP groups, every
// partition of it into pipelines, every stage order of each pipeline, every block split (>= 1 block
// per stage), every micro-batch size and recompute choice of the options, and every split of the
// micro-batches over the pipelines (>= stages each), and each interleaving degree of the options
// where plan/interleave.h allows it; every sharding of PlannerOptions::shardings when there is more
// than one pipeline (plan/sharding.h).
// Each plan is scored by the predictor; the fastest that fits memory wins. Exponential: meant
// for at most ~6 TP groups and models of a few blocks.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "perf/predictor.h"
#include "plan/planner.h"

namespace motley::plan {

struct ExhaustiveResult {
  spec::Plan plan;
  perf::Prediction prediction;
  int64_t plans_scored = 0;  // predictions made, sharding and interleaved variants included
};

// Error when nothing fits, the instance has more than `max_units` TP groups at TP 1, or more
// than `max_plans` one-chunk plans would be enumerated (each is scored, and so is each of its
// sharding and interleaved variants: up to 2 (1 + |interleave_chunks|) predictions per plan).
Result<ExhaustiveResult> ExhaustiveSearch(const perf::Predictor& predictor,
                                          const PlannerOptions& options, int max_units = 6,
                                          int64_t max_plans = 200000);

}  // namespace motley::plan
