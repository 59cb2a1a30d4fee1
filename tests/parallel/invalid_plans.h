// The invalid-plan set shared by the runtime's launch-path test (invalid_plan_test.cc) and the
// every-command agreement test (plan_agreement_test.cc): a valid base plan for the tiny model on
// the two-node CPU cluster of parallel_test_util.h, and cases that each break it in one place,
// with the substrings their error must contain. Test-only; header-only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "parallel_test_util.h"

namespace motley::testing {

// A valid 2-replica plan on devices 0..5 (of kClusterYaml) that each case breaks in one place.
// Its stages recompute nothing, selectively and fully: every mode is accepted.
inline spec::Plan ValidPlan() {
  spec::Plan plan =
      MakePlan({Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2})}, 3, 2),
                Pipeline({Stage(0, 1, true, false, {4}), Stage(1, 3, false, true, {5})}, 2, 3)},
               "bad.json");
  plan.pipelines[0].stages[1].recompute = spec::Recompute::kSelective;
  plan.pipelines[1].stages[0].recompute = spec::Recompute::kFull;
  return plan;
}

// kClusterYaml with node n1 (devices 4-7) emulated: ValidPlan's second replica runs there.
inline std::string MixedEmulationClusterYaml() {
  return R"(
name: half-emulated
device_types:
  - {name: cpu, vendor: cpu, peak_flops: 50 GFLOPS, memory: 1 GiB, memory_bandwidth: 10 GB/s}
  - {name: emu, vendor: cpu, peak_flops: 50 GFLOPS, memory: 1 GiB, memory_bandwidth: 10 GB/s,
     emulated: {flops: 50 GFLOPS, memory_bandwidth: 10 GB/s}}
link_classes:
  - {name: shm, latency: 1 us, bandwidth: 10 GB/s}
  - {name: eth, latency: 20 us, bandwidth: 1 GB/s}
nodes:
  - {name: n0, device_type: cpu, device_count: 4, intra_link: shm, nics: [eth]}
  - {name: n1, device_type: emu, device_count: 4, intra_link: shm, nics: [eth]}
islands:
  - {name: all, nodes: [n0, n1], link: eth}
)";
}

// ValidPlan's second replica (devices 4 | 5, 2 micro-batches) as interleaved 1F1B with 2 chunks:
// virtual stages 0-3 hold one block each, on devices 4, 5, 4, 5.
inline void InterleaveSecondPipeline(spec::Plan& plan) {
  spec::PipelinePlan& pipe = plan.pipelines[1];
  pipe.chunks = 2;
  pipe.stages = {Stage(0, 1, true, false, {4}), Stage(1, 1, false, false, {5}),
                 Stage(2, 1, false, false, {4}), Stage(3, 1, false, true, {5})};
}

struct InvalidPlanCase {
  std::string name;
  std::function<void(spec::Plan&)> breaks;
  std::vector<std::string> expected;        // substrings of the error
  std::string cluster_yaml = kClusterYaml;  // the cluster the plan is checked against
};

// The invalid-plan set: each case breaks ValidPlan (or its cluster) in one place.
inline std::vector<InvalidPlanCase> InvalidPlanCases() {
  using P = spec::Plan;
  return {
      {"gap between stages",
       [](P& p) { p.pipelines[0].stages[1].first_block = 3; },
       {"pipelines[0].stages[1].first_block"}},
      {"blocks past the model",
       [](P& p) { p.pipelines[1].stages[1].num_blocks = 4; },
       {"pipelines[1].stages[1].num_blocks"}},
      {"blocks missing at the end",
       [](P& p) { p.pipelines[1].stages[1].num_blocks = 2; },
       {"pipelines[1].stages"}},
      {"embedding on a later stage",
       [](P& p) { p.pipelines[0].stages[1].has_embedding = true; },
       {"pipelines[0].stages[1].has_embedding"}},
      {"no embedding on the first stage",
       [](P& p) { p.pipelines[1].stages[0].has_embedding = false; },
       {"pipelines[1].stages[0].has_embedding"}},
      {"head on an early stage",
       [](P& p) { p.pipelines[1].stages[0].has_head = true; },
       {"pipelines[1].stages[0].has_head"}},
      {"no head on the last stage",
       [](P& p) { p.pipelines[0].stages[1].has_head = false; },
       {"pipelines[0].stages[1].has_head"}},
      {"unknown device",
       [](P& p) { p.pipelines[1].stages[1].devices = {42}; },
       {"pipelines[1].stages[1].devices", "42"}},
      {"device used twice",
       [](P& p) { p.pipelines[1].stages[1].devices = {2}; },
       {"pipelines[1].stages[1].devices", "device 2"}},
      {"tp_degree differs from devices",
       [](P& p) { p.pipelines[0].stages[0].tp_degree = 1; },
       {"pipelines[0].stages[0].tp_degree"}},
      {"tp_degree does not divide the heads",
       [](P& p) {
         p.pipelines[0].stages[0].devices = {0, 1, 3};
         p.pipelines[0].stages[0].tp_degree = 3;
       },
       {"pipelines[0].stages[0].tp_degree", "does not divide"}},
      {"TP group across nodes",
       [](P& p) {
         p.pipelines[1].stages[1].devices = {3, 6};
         p.pipelines[1].stages[1].tp_degree = 2;
       },
       {"pipelines[1].stages[1].devices", "node"}},
      {"fewer micro-batches than stages",
       [](P& p) { p.pipelines[0].micro_batches = 1; },
       {"pipelines[0].micro_batches"}},
      {"zero micro-batch size",
       [](P& p) { p.pipelines[1].micro_batch_size = 0; },
       {"pipelines[1].micro_batch_size"}},
      {"batches do not sum to the global batch",
       [](P& p) { p.pipelines[1].micro_batch_size = 2; },
       {"pipelines", "global"}},
      {"stage without devices",
       [](P& p) { p.pipelines[1].stages[0].devices.clear(); },
       {"pipelines[1].stages[0].devices"}},
      {"pipeline without stages",
       [](P& p) { p.pipelines[1].stages.clear(); },
       {"pipelines[1].stages"}},
      {"no pipelines", [](P& p) { p.pipelines.clear(); }, {"pipelines"}},
      {"interleaved pipeline on GPipe",
       [](P& p) {
         InterleaveSecondPipeline(p);
         p.schedule = spec::PipelineSchedule::kGPipe;
       },
       {"pipelines[1].chunks", "need schedule 1f1b"}},
      {"virtual stage off its device group",
       [](P& p) {
         InterleaveSecondPipeline(p);
         p.pipelines[1].stages[3].devices = {6};
       },
       {"pipelines[1].stages[3].devices", "device group 1"}},
      {"emulated and real devices mixed",
       [](P&) {},
       {"pipelines[1].stages[0].devices", "all emulated or all real"},
       MixedEmulationClusterYaml()},
  };
}

}  // namespace motley::testing
