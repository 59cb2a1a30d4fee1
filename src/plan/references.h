// The references a chosen plan is measured against, beyond the baselines (docs/architecture.md §8,
// "Planner references"), and why each device it leaves out is idle:
//  - the homogeneous sum (HETHUB's bound): for every device type, the best plan of that type
//    alone at its share of the global batch, B_t = max(1, round(B * N_t / N)) sequences (N_t the
//    type's devices, N the cluster's; the type's planner then picks micro-batch sizes dividing
//    B_t), timed by the simulator like the chosen plan; the sum of their tokens/s
//    (B_t * T / step time). Separate jobs of each type on their share of the work: a mixed plan
//    below 1.0 of it pays for mixing (slower links between types, the slowest stage setting the
//    pace); above 1.0 is H2's superlinear case (devices that cannot hold the model alone add
//    throughput as stages of a mixed pipeline);
//  - MFU over every device of the cluster beside MFU over the devices the plan uses, both at the
//    plan's reported tokens/s;
//  - for each type with devices left out: memory, when one block with full recompute at the
//    type's largest TP degree does not fit its memory; else the fastest candidate the planner
//    scored (ranked or baseline) that uses more devices of the type, with its tokens/s against
//    the chosen plan's; else that no candidate the planner kept uses them.
// Ownership: references the predictor (which must outlive the calls). Thread safety: reentrant.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "perf/predictor.h"
#include "plan/planner.h"

namespace motley::plan {

// The homogeneous sum's terms, one per device type the cluster has (in type order). Plans each
// type alone with `options` (baselines and the exhaustive reference off). A type whose planner
// finds no plan gets tokens_per_s 0 and the planner's first error line.
std::vector<TypeShare> HomogeneousShares(const perf::Predictor& predictor,
                                         const PlannerOptions& options);
double SumTokensPerSecond(const std::vector<TypeShare>& shares);

// B_t: the share of the global batch of a type with `type_devices` of `all_devices`.
int64_t BatchShare(int64_t global_batch, int type_devices, int all_devices);

// The chosen plan's MFU over `devices` at `tokens_per_s` (the report's figure for it).
double MfuAt(const perf::Predictor& predictor, double tokens_per_s,
             const std::vector<int>& devices);

// Devices `chosen` leaves out, by type, each with its reason (see above). `others`: every other
// candidate the planner scored (ranked candidates and baselines found).
std::vector<LeftOutDevices> ExplainLeftOut(const perf::Predictor& predictor,
                                           const PlannerOptions& options, const Candidate& chosen,
                                           const std::vector<const Candidate*>& others,
                                           int64_t tokens_per_step);

}  // namespace motley::plan
