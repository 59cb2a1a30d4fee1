// Optimizer sharding as a planner dimension (issue 13), chosen with the interleaving degree after
// a plan's block and micro-batch splits. The search splits with ZeRO-1 on wherever a plan has more
// than one pipeline: it needs the least memory, so the most layouts fit. Neither sharding is
// always faster: with ZeRO-1 each rank updates 1/d of each layer, but every stage all-gathers its
// parameters after the world's loss-norm barrier, all at once, where nothing overlaps it; without
// it each stage all-reduces its gradients as soon as its last backward ends (overlapping the drain
// of the stages still running) and every rank updates its whole layers. So each plan the planner
// finishes (polished plans of small instances, finalists at scale, the uniform baseline) is also
// predicted without ZeRO-1, at every interleaving degree, and the fastest that fits memory is
// kept. The exhaustive oracle enumerates both shardings too (plan/exhaustive.h).
//
// Pure functions over plans; the predictor must outlive the call. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perf/predictor.h"
#include "spec/plan.h"

namespace motley::plan {

// The optimizer shardings a plan of `pipelines` pipelines may take under a planner's list
// (PlannerOptions::shardings): the list where there is more than one pipeline and it is not empty,
// {kNone} otherwise. Its front is the sharding the search splits with.
std::vector<spec::OptimizerSharding> ShardingsFor(
    const std::vector<spec::OptimizerSharding>& shardings, int64_t pipelines);

// `*plan` (one chunk per group) as it is and at each other sharding of ShardingsFor(shardings,
// its pipelines); each of them then through InterleaveIfFaster (plan/interleave.h) at `chunks`.
// Keeps the fastest prediction that fits memory and is faster than `*prediction` (the prediction
// of `*plan`); returns whether it changed the plan.
bool ShardingAndChunksIfFaster(const perf::Predictor& predictor,
                               const std::vector<spec::OptimizerSharding>& shardings,
                               const std::vector<int>& chunks, const perf::StragglerRates& rates,
                               const perf::LinkRates& links, spec::Plan* plan,
                               perf::Prediction* prediction);

// For descriptions: ", no ZeRO-1" for a plan of several pipelines without optimizer sharding,
// then InterleaveNote's ", interleaved v=..." where it interleaves; "" otherwise.
std::string ShardingAndChunksNote(const spec::Plan& plan);

}  // namespace motley::plan
