// The emulated two-speed cluster and the 19 plans (two with activation recompute) that the virtual-clock tests of this folder
// run (plan_vs_runtime_test.cc: step times; memory_vs_runtime_test.cc: peak memory per rank).
#pragma once

#include <vector>

#include "../parallel/parallel_test_util.h"
#include "spec/plan.h"

namespace motley::testing {

// Two speeds (fast 4x slow) in two nodes of one island; the island's link (eth) is slow.
inline const char* kTwoSpeedYaml = R"(
name: two-speed-slow-link
device_types:
  - {name: fast, vendor: cpu, peak_flops: 40 GFLOPS, memory: 1 GiB, memory_bandwidth: 20 GB/s,
     emulated: {flops: 40 GFLOPS, memory_bandwidth: 20 GB/s}}
  - {name: slow, vendor: cpu, peak_flops: 10 GFLOPS, memory: 1 GiB, memory_bandwidth: 5 GB/s,
     emulated: {flops: 10 GFLOPS, memory_bandwidth: 5 GB/s}}
link_classes:
  - {name: shm, latency: 2 us, bandwidth: 10 GB/s}
  - {name: eth, latency: 50 us, bandwidth: 0.2 GB/s}
nodes:
  - {name: fast-node, device_type: fast, device_count: 4, intra_link: shm, nics: [eth]}
  - {name: slow-node, device_type: slow, device_count: 4, intra_link: shm, nics: [eth]}
islands:
  - {name: all, nodes: [fast-node, slow-node], link: eth}
)";

inline spec::Plan Zero1(spec::Plan plan) {
  plan.optimizer_sharding = spec::OptimizerSharding::kZero1;
  return plan;
}
inline spec::Plan GPipe(spec::Plan plan) {
  plan.schedule = spec::PipelineSchedule::kGPipe;
  return plan;
}
// Recompute per stage (model/stage.h keeps less per micro-batch, one workspace for the stage):
// full, selective and none over two replicas of different depths and TP degrees.
inline spec::Plan RecomputePerStage() {
  spec::Plan plan =
      MakePlan({Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {4})}, 3, 2),
                Pipeline({Stage(0, 1, true, false, {2}), Stage(1, 2, false, false, {5}),
                          Stage(3, 1, false, true, {6, 7})},
                         3, 2)},
               "recompute full / selective / none per stage");
  plan.pipelines[0].stages[0].recompute = spec::Recompute::kFull;
  plan.pipelines[0].stages[1].recompute = spec::Recompute::kSelective;
  plan.pipelines[1].stages[0].recompute = spec::Recompute::kSelective;
  plan.pipelines[1].stages[2].recompute = spec::Recompute::kFull;
  return plan;
}
inline spec::Plan GPipeFullRecompute() {
  spec::Plan plan = GPipe(MakePlan(
      {Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 4, 3)},
      "gpipe, full recompute"));
  plan.SetRecompute(spec::Recompute::kFull);
  return plan;
}

inline std::vector<spec::Plan> Plans() {
  // Devices 0-3 fast (one node), 4-7 slow (another node, across the slow link). Global batch 12.
  return {
      MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 6, 2)}, "single fast"),
      MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 4, 2),
                Pipeline({Stage(0, 4, true, true, {4})}, 2, 2)},
               "dp2 fast+slow uneven batch"),
      MakePlan({Pipeline({Stage(0, 3, true, false, {0}), Stage(3, 1, false, true, {4})}, 6, 2)},
               "pp2 fast->slow 3+1 over eth"),
      MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 2, false, false, {1}),
                          Stage(3, 1, false, true, {2})},
                         4, 3)},
               "pp3 fast 1+2+1 m4 b3"),
      MakePlan({Pipeline({Stage(0, 4, true, true, {4, 5})}, 3, 4)}, "tp2 slow"),
      MakePlan({Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {4, 5})}, 4,
                         3)},
               "pp2 x tp2 fast->slow"),
      MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 4, 2),
                Pipeline({Stage(0, 2, true, false, {4}), Stage(2, 2, false, true, {5})}, 2, 2)},
               "mixed: 1 stage fast + pp2 slow"),
      MakePlan({Pipeline({Stage(0, 3, true, false, {0}), Stage(3, 1, false, true, {4})}, 3, 2),
                Pipeline({Stage(0, 3, true, false, {1}), Stage(3, 1, false, true, {5})}, 3, 2)},
               "2 x pp2 fast->slow, dp over eth"),
      MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 3, 2),
                Pipeline({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})}, 3, 2)},
               "2 x pp2 fast, dp in node"),
      Zero1(MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 3, 2),
                      Pipeline({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})}, 3, 2)},
                     "zero1: 2 x pp2 fast, dp in node")),
      Zero1(MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 4, 2),
                      Pipeline({Stage(0, 4, true, true, {4})}, 2, 2)},
                     "zero1: dp2 fast+slow over eth")),
      Zero1(MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 2),
                      Pipeline({Stage(0, 4, true, true, {1})}, 2, 2),
                      Pipeline({Stage(0, 4, true, true, {2})}, 2, 2)},
                     "zero1: dp3 fast, uneven chunks")),
      GPipe(MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 2, false, false, {1}),
                                Stage(3, 1, false, true, {2})},
                               4, 3)},
                     "gpipe: pp3 fast 1+2+1")),
      GPipe(MakePlan({Pipeline({Stage(0, 3, true, false, {0}), Stage(3, 1, false, true, {4})}, 3, 2),
                      Pipeline({Stage(0, 3, true, false, {1}), Stage(3, 1, false, true, {5})}, 3, 2)},
                     "gpipe: 2 x pp2 fast->slow")),
      MakePlan({Pipeline({Stage(0, 4, true, true, {0, 1})}, 4, 2),
                Pipeline({Stage(0, 4, true, true, {4})}, 2, 2)},
               "mixed tp: tp2 fast + tp1 slow"),
      MakePlan({Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {4})}, 2, 2),
                Pipeline({Stage(0, 1, true, false, {2}), Stage(1, 3, false, true, {5, 6})}, 2, 2),
                Pipeline({Stage(0, 4, true, true, {3})}, 2, 2)},
               "three replicas, tp 2->1, 1->2, 1"),
      Zero1(MakePlan({Pipeline({Stage(0, 4, true, true, {0, 1})}, 4, 2),
                      Pipeline({Stage(0, 4, true, true, {4})}, 2, 2)},
                     "zero1 + mixed tp (mixed groups replicated)")),
      RecomputePerStage(),
      GPipeFullRecompute(),
  };
}

// Interleaved 1F1B plans on the same cluster.
inline std::vector<spec::Plan> InterleavedPlans() {
  std::vector<spec::Plan> plans = {
      MakePlan({InterleavedPipeline({{0}, {4}}, {1, 1, 1, 1}, 6, 2)},
               "interleaved: p2 v2 fast<->slow over eth"),
      MakePlan({InterleavedPipeline({{0, 1}, {4}}, {1, 1, 1, 1}, 4, 3)},
               "interleaved: p2 v2 tp2 fast + slow"),
      MakePlan({InterleavedPipeline({{0}, {1}}, {1, 1, 1, 1}, 4, 2),
                Pipeline({Stage(0, 4, true, true, {4})}, 2, 2)},
               "interleaved: p2 v2 fast + 1 stage slow, recompute"),
      MakePlan({InterleavedPipeline({{0}, {5}}, {1, 1, 1, 1}, 2, 3),
                InterleavedPipeline({{4}, {1}}, {1, 1, 1, 1}, 2, 3)},
               "interleaved: 2 x p2 v2 crossing eth"),
  };
  plans[2].pipelines[0].stages[3].recompute = spec::Recompute::kFull;  // the last chunk
  plans[2].pipelines[0].stages[1].recompute = spec::Recompute::kSelective;
  spec::Plan zero1 = Zero1(plans[3]);
  zero1.source = "interleaved: 2 x p2 v2 crossing eth, ZeRO-1";
  plans.push_back(zero1);
  return plans;
}

}  // namespace motley::testing
