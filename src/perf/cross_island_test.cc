// CountCrossIslandTraffic on two one-node islands of 2 devices: pipelines that cross between the
// islands send every activation and input gradient across and keep their data-parallel groups
// inside each island; pipelines inside one island each send nothing across, and their layer
// all-reduces span both islands. Bytes are the modelled (bf16) ones, not the runtime's f32.
#include "perf/cross_island.h"

#include <gtest/gtest.h>

#include "perf/compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "spec/model_spec.h"
#include "spec/plan.h"

namespace motley::perf {
namespace {

constexpr const char* kCluster = R"(
name: two-islands
device_types: [{preset: a100-80g, name: a100}]
link_classes: [{preset: nvlink}, {preset: eth-25g}]
nodes:
  - {name: n0, device_type: a100, device_count: 2, intra_link: nvlink}
  - {name: n1, device_type: a100, device_count: 2, intra_link: nvlink}
inter_island_link: eth-25g
)";

spec::Plan TwoPipelines(std::vector<int> stage0, std::vector<int> stage1) {
  spec::Plan plan;
  plan.optimizer_sharding = spec::OptimizerSharding::kNone;
  for (size_t k = 0; k < 2; ++k) {
    spec::PipelinePlan pipe;
    pipe.micro_batches = 3;
    pipe.micro_batch_size = 1;
    spec::StagePlan a;
    a.first_block = 0;
    a.num_blocks = 1;
    a.has_embedding = true;
    a.devices = {stage0[k]};
    spec::StagePlan b;
    b.first_block = 1;
    b.num_blocks = 1;
    b.has_head = true;
    b.devices = {stage1[k]};
    pipe.stages = {a, b};
    plan.pipelines.push_back(pipe);
  }
  return plan;
}

TEST(CrossIslandTest, CountsPipelineMessagesAndCollectivesThatSpanIslands) {
  auto cluster = spec::ParseClusterSpec(kCluster, "two-islands");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  ASSERT_EQ(cluster->islands.size(), 2u);
  auto model = spec::ModelPreset("tiny");
  ASSERT_TRUE(model.ok());
  const int64_t seq = 16;
  spec::TrainSpec train;
  train.seq_len = seq;
  train.global_batch = 6;
  const PerfSettings settings = DefaultSettings(*cluster, train);
  const RooflineComputeModel compute(*cluster, *model, settings);
  const Predictor predictor(*cluster, *model, train, compute, settings);
  // Bytes as modelled: an A100 cluster trains in bf16 (2-byte activations and gradients), half
  // the runtime's f32 step program.
  ASSERT_EQ(ActivationElementBytes(settings), 2.0);
  ASSERT_EQ(GradientElementBytes(settings), 2.0);
  const int64_t message = 1 * seq * model->hidden * 2;

  // Stage 0 on island n0 (devices 0, 1), stage 1 on n1 (2, 3): 3 micro-batches, one activation
  // and one gradient each, per pipeline, all across; the layer groups stay in one island.
  const spec::Plan across_plan = TwoPipelines({0, 1}, {2, 3});
  auto across = sched::BuildStepProgram(across_plan, *model, seq);
  ASSERT_TRUE(across.ok()) << across.status().message();
  const CrossIslandTraffic a = CountCrossIslandTraffic(*across, across_plan, predictor);
  EXPECT_EQ(a.pipeline_messages, 2 * 3 * 2);
  EXPECT_EQ(a.pipeline_bytes, 2 * 3 * 2 * message);
  EXPECT_EQ(a.collectives.count("all-reduce"), 0u);
  EXPECT_EQ(a.collectives.at("loss-norm"), 1);  // the world's collectives span both

  // Each pipeline inside one island: nothing crosses by p2p; every layer all-reduce spans both.
  const spec::Plan inside_plan = TwoPipelines({0, 2}, {1, 3});
  auto inside = sched::BuildStepProgram(inside_plan, *model, seq);
  ASSERT_TRUE(inside.ok()) << inside.status().message();
  const CrossIslandTraffic b = CountCrossIslandTraffic(*inside, inside_plan, predictor);
  EXPECT_EQ(b.pipeline_messages, 0);
  EXPECT_EQ(b.pipeline_bytes, 0);
  int64_t layer_groups = 0;
  for (const sched::Collective& c : inside->collectives) {
    layer_groups += c.kind == sched::StepOpKind::kLayerAllReduce ? 1 : 0;
  }
  EXPECT_GT(layer_groups, 0);
  EXPECT_EQ(b.collectives.at("all-reduce"), layer_groups);
  int64_t gradient_bytes = 0;  // every layer group's buffer, bf16 gradients
  for (const sched::Collective& c : inside->collectives) {
    if (c.kind == sched::StepOpKind::kLayerAllReduce) gradient_bytes += 2 * c.elements;
  }
  EXPECT_EQ(b.collective_buffer_bytes.at("all-reduce"), gradient_bytes);
}

}  // namespace
}  // namespace motley::perf
