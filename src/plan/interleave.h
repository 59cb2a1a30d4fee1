// Interleaving as a planner dimension (issue 12): turns a plan of one model chunk per device group
// into interleaved 1F1B with v chunks per group (Narayanan et al. 2021), and keeps it where the
// predictor finds it faster and within memory. The planner, its baselines and the exhaustive
// oracle all interleave through InterleavedWhereAllowed, so they search the same space.
//
// The chunk rule: device group i's n_i blocks (its blocks in the one-chunk plan) go to its v
// chunks as evenly as possible, earlier chunks taking the remainder; chunk c of group i is virtual
// stage c * p + i (spec::PipelinePlan), the embedding stays on virtual stage 0 and the head on the
// last. So a group holds the same number of blocks at every v, and the search over one-chunk block
// splits is also the search over interleaved ones of this rule.
//
// Pure functions over plans; the predictor must outlive the call. Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "perf/predictor.h"
#include "spec/plan.h"

namespace motley::plan {

// Whether pipeline `pipe` (one chunk per group) can run with `chunks` chunks per group: at least
// 2 groups, at least `chunks` blocks in every group, and a micro-batch count interleaved 1F1B
// runs (spec::InterleavedMicroBatchesOk).
bool CanInterleave(const spec::PipelinePlan& pipe, int chunks);

// `pipe` (one chunk per group) with `chunks` chunks per group by the chunk rule above. Requires
// CanInterleave(pipe, chunks).
spec::PipelinePlan InterleavePipeline(const spec::PipelinePlan& pipe, int chunks);

// `plan` (1F1B, one chunk per group) with every pipeline that CanInterleave at `chunks`
// interleaved; the others keep one chunk. Returns false, leaving `out` untouched, when no pipeline
// can (or the schedule is not 1F1B).
bool InterleavedWhereAllowed(const spec::Plan& plan, int chunks, spec::Plan* out);

// `plan` (one chunk per group) with its micro-batches moved so that more pipelines run a count
// interleaved 1F1B at `chunks` accepts: a pipeline that could interleave but for its count keeps
// the largest multiple of its p below it, and the micro-batches freed go, by the smallest step
// that keeps a count accepted, to the pipeline whose estimated phase grows least (per
// micro-batch time from `pipeline_time_s`, one per pipeline, scaled by perf::EqualStagePhaseSlots:
// fill (p - 1) / v interleaved, p - 1 otherwise); what no accepted step fits goes to one pipeline,
// which keeps one chunk. The total and every m >= p are kept.
spec::Plan MicroBatchesForInterleaving(const spec::Plan& plan,
                                       const std::vector<double>& pipeline_time_s, int chunks);

// For each v of `chunks`, predicts InterleavedWhereAllowed(*plan, v), and the same after
// MicroBatchesForInterleaving (when that moves anything), and keeps the fastest that fits memory
// and is faster than `*prediction` (the prediction of `*plan`). Returns the v kept (1 when none).
// `*plan` must have one chunk per group. Both plans lie in the space the exhaustive oracle
// enumerates (any micro-batch split, then InterleavedWhereAllowed).
int InterleaveIfFaster(const perf::Predictor& predictor, const std::vector<int>& chunks,
                       const perf::StragglerRates& rates, const perf::LinkRates& links,
                       spec::Plan* plan, perf::Prediction* prediction);

// For descriptions: "" when every pipeline has one chunk, else ", interleaved v=V", or
// ", interleaved v=V0/V1/..." by pipeline when they differ.
std::string InterleaveNote(const spec::Plan& plan);

}  // namespace motley::plan
