// Oracle test (docs/architecture.md §3 rule 4): on small random heterogeneous clusters the
// planner's top candidate has the predicted iteration time of the exhaustive optimum, for several
// seeds.
#include "plan/exhaustive.h"

#include <gtest/gtest.h>

#include <random>

#include "plan/test_util.h"

namespace motley::plan {
namespace {

std::unique_ptr<testing::World> RandomWorld(uint32_t seed) {
  std::mt19937 rng(seed);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto w = std::make_unique<testing::World>();
  spec::ClusterSpec& c = w->cluster;
  c.name = "random-" + std::to_string(seed);
  for (int t = 0; t < 2; ++t) {
    spec::DeviceType type;
    type.name = "t" + std::to_string(t);
    type.vendor = t == 0 ? "cuda" : "rocm";
    type.peak_bf16_flops = uni(50e12, 400e12);
    type.peak_fp32_flops = type.peak_bf16_flops / 10;
    type.memory_bytes = uni(1.0e9, 4.0e9);
    type.memory_bandwidth = uni(0.5e12, 3e12);
    c.device_types.push_back(type);
  }
  c.link_classes = {{"fast", 2e-6, 100e9, 0.8}, {"net", 10e-6, uni(1e9, 25e9), 0.9}};
  // 3 or 4 devices in all, nodes of 1 or 2 devices.
  const int total = 3 + static_cast<int>(rng() % 2);
  int placed = 0;
  for (int n = 0; placed < total; ++n) {
    spec::NodeSpec node;
    node.name = "n" + std::to_string(n);
    node.device_type = "t" + std::to_string(n % 2);
    node.device_count = std::min(total - placed, 1 + static_cast<int>(rng() % 2));
    node.intra_link = node.device_count > 1 ? "fast" : "";
    placed += node.device_count;
    c.nodes.push_back(node);
  }
  c.inter_island_link = "net";
  MOTLEY_CHECK(c.Finalize("random", "cluster").ok(), "finalize");
  // GPT-2 small's shapes, 5 blocks: about 1.8 GB of states, so memory binds on some seeds.
  auto m = spec::ModelPreset("gpt2-124m");
  MOTLEY_CHECK(m.ok(), "preset");
  w->model = *m;
  w->model.num_blocks = 5;
  w->train.global_batch = 4 + 2 * static_cast<int64_t>(rng() % 3);
  w->train.seq_len = 512;
  w->Finish();
  return w;
}

TEST(ExhaustiveTest, PlannerFindsTheExhaustiveOptimum) {
  int compared = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    auto w = RandomWorld(seed);
    PlannerOptions options;
    options.micro_batch_sizes = {1, 2};
    options.recompute = {spec::Recompute::kNone, spec::Recompute::kFull};
    options.tp_degrees = {1, 2};
    options.baselines = false;
    auto ex = ExhaustiveSearch(*w->predictor, options, 6);
    auto planned = PlanCluster(*w->predictor, options);
    ASSERT_EQ(ex.ok(), planned.ok()) << "seed " << seed << ": "
                                     << (ex.ok() ? planned.status().message() : ex.status().message());
    if (!ex.ok()) continue;
    ++compared;
    const double best = planned->ranked.front().prediction.iteration_s;
    EXPECT_NEAR(best / ex->prediction.iteration_s, 1.0, 1e-9)
        << "seed " << seed << ": planner " << planned->ranked.front().description << " "
        << best << " s, exhaustive " << ex->prediction.iteration_s << " s over "
        << ex->plans_scored << " plans\n"
        << spec::PlanToJson(ex->plan);
    EXPECT_TRUE(spec::ValidatePlan(planned->best.plan, w->cluster, w->model, w->train).ok());
  }
  EXPECT_GE(compared, 9);
}

}  // namespace
}  // namespace motley::plan
