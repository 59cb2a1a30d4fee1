// Oracle test (docs/architecture.md §3 rule 4): on 30 small random heterogeneous clusters (two or
// three device types, 3 to 5 devices; the first 5 of them in the sanitizer build) the planner's
// top candidate is within 1% of the exhaustive optimum's predicted iteration time on every
// instance and equal to it on at least two thirds (issue 13's bar), over the same dimensions: TP
// degree per type, stage order, block split, micro-batch size and split, recompute, ZeRO-1 or
// not, interleaving degree (plan/interleave.h; one instance whose optimum interleaves).
#include "plan/exhaustive.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "core/sanitized_build.h"
#include "plan/test_util.h"

namespace motley::plan {
namespace {

// One line per device type and node, for failure messages.
std::string Describe(const spec::ClusterSpec& c) {
  std::string out;
  for (const spec::DeviceType& t : c.device_types) {
    out += t.name + ": " + std::to_string(t.peak_bf16_flops / 1e12) + " TFLOP/s, " +
           std::to_string(t.memory_bytes / 1e9) + " GB, " +
           std::to_string(t.memory_bandwidth / 1e12) + " TB/s\n";
  }
  for (const spec::NodeSpec& n : c.nodes) {
    out += n.name + ": " + std::to_string(n.device_count) + " x " + n.device_type + "\n";
  }
  return out + "inter-island " + std::to_string(c.link_classes[1].bandwidth / 1e9) + " GB/s\n";
}

std::unique_ptr<testing::World> RandomWorld(uint32_t seed) {
  std::mt19937 rng(seed);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto w = std::make_unique<testing::World>();
  spec::ClusterSpec& c = w->cluster;
  c.name = "random-" + std::to_string(seed);
  const int num_types = 2 + static_cast<int>(rng() % 2);
  for (int t = 0; t < num_types; ++t) {
    spec::DeviceType type;
    type.name = "t" + std::to_string(t);
    type.vendor = t % 2 == 0 ? "cuda" : "rocm";
    type.peak_bf16_flops = uni(50e12, 400e12);
    type.peak_fp32_flops = type.peak_bf16_flops / 10;
    type.memory_bytes = uni(1.0e9, 4.0e9);
    type.memory_bandwidth = uni(0.5e12, 3e12);
    c.device_types.push_back(type);
  }
  c.link_classes = {{"fast", 2e-6, 100e9, 0.8}, {"net", 10e-6, uni(1e9, 25e9), 0.9}};
  // 3 to 5 devices in all, nodes of 1 or 2 devices, types in turn.
  const int total = 3 + static_cast<int>(rng() % 3);
  int placed = 0;
  for (int n = 0; placed < total; ++n) {
    spec::NodeSpec node;
    node.name = "n" + std::to_string(n);
    node.device_type = "t" + std::to_string(n % num_types);
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

// The 30 instances in three shards of 10 seeds, so that ctest runs them side by side (the oracle
// scores both optimizer shardings of every plan of two or more pipelines: all 30 take 261 s of
// CPU in the main build, 133 s before); each shard meets the bar on its own.
class ExhaustiveShardTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ExhaustiveShardTest, PlannerFindsTheExhaustiveOptimum) {
  // The sanitizer build checks memory safety on 4 seeds of the first shard whose searches are
  // short: the oracle runs ~130x slower there. In the main build seeds 1, 4, 5 and 10 take 0.9 s
  // together, 2 and 3 take 2-3 s each, and 8 alone 38 s (measured with both shardings scored);
  // in ASan seeds 1-5 took 698 s.
  constexpr uint32_t kPerShard = 10;
  const uint32_t shard = GetParam();
  if (kSanitizedBuild && shard > 0) GTEST_SKIP() << "the sanitizer build runs the first shard";
  std::vector<uint32_t> seeds;
  if (kSanitizedBuild) {
    seeds = {1, 4, 5, 10};
  } else {
    for (uint32_t seed = shard * kPerShard + 1; seed <= (shard + 1) * kPerShard; ++seed) {
      seeds.push_back(seed);
    }
  }
  int compared = 0;
  int equal = 0;
  int interleaved = 0;  // instances whose optimum interleaves (plan/interleave.h)
  int unsharded = 0;    // instances whose optimum has several pipelines and no ZeRO-1
  for (const uint32_t seed : seeds) {
    auto w = RandomWorld(seed);
    PlannerOptions options;
    options.micro_batch_sizes = {1, 2};
    options.recompute = {spec::Recompute::kNone, spec::Recompute::kSelective,
                         spec::Recompute::kFull};
    options.tp_degrees = {1, 2};
    options.baselines = false;
    auto ex = ExhaustiveSearch(*w->predictor, options, 6, 2000000);
    auto planned = PlanCluster(*w->predictor, options);
    ASSERT_EQ(ex.ok(), planned.ok()) << "seed " << seed << ": "
                                     << (ex.ok() ? planned.status().message() : ex.status().message());
    if (!ex.ok()) continue;
    ++compared;
    const double best = planned->ranked.front().prediction.iteration_s;
    const double ratio = best / ex->prediction.iteration_s;
    if (std::abs(ratio - 1.0) <= 1e-9) ++equal;
    if (ex->plan.pipelines.size() > 1 &&
        ex->plan.optimizer_sharding == spec::OptimizerSharding::kNone) {
      ++unsharded;
    }
    for (const spec::PipelinePlan& pipe : ex->plan.pipelines) {
      if (pipe.chunks > 1) {
        ++interleaved;
        break;
      }
    }
    // Never faster than the optimum (the oracle covers the planner's space), within 1% of it.
    EXPECT_GE(ratio, 1.0 - 1e-9) << "seed " << seed << ": the planner beat the exhaustive search";
    EXPECT_LE(ratio, 1.01) << "seed " << seed << ": planner " << planned->ranked.front().description
                           << " " << best << " s, exhaustive " << ex->prediction.iteration_s
                           << " s over " << ex->plans_scored << " plans\n"
                           << Describe(w->cluster) << spec::PlanToJson(ex->plan);
    EXPECT_TRUE(spec::ValidatePlan(planned->best.plan, w->cluster, w->model, w->train).ok());
  }
  EXPECT_GE(compared, static_cast<int>(seeds.size()) * 5 / 6);
  EXPECT_GE(3 * equal, 2 * compared) << equal << " of " << compared << " equal the optimum";
  std::printf(
      "seeds %u-%u (%zu): planner equals the exhaustive optimum on %d of %d instances (%d optima "
      "interleaved, %d without ZeRO-1)\n",
      seeds.front(), seeds.back(), seeds.size(), equal, compared, interleaved, unsharded);
}

INSTANTIATE_TEST_SUITE_P(Seeds, ExhaustiveShardTest, ::testing::Values(0u, 1u, 2u));

// Interleaving in the oracle comparison. The random instances above never interleave at their
// optimum (5 blocks leave at most 2 groups of 2 or more); here three A100-40G over NVLink must
// pipeline a 12-block Llama-2-13B slice without ZeRO-1 (its states take about 66 GB), with two
// micro-batches per stage: the bubble is large and messages are cheap, so the optimum interleaves,
// and the planner must find it.
TEST(ExhaustiveTest, PlannerFindsAnInterleavedOptimum) {
  auto w = testing::MakeWorld({{"n", "a100-40g", 1, 3, "nvlink", "ib-hdr"}}, "ib-hdr", "llama2-13b",
                              6, 2048);
  w->model.num_blocks = 12;
  w->Finish();
  PlannerOptions options;
  options.micro_batch_sizes = {1};
  options.recompute = {spec::Recompute::kNone};
  options.tp_degrees = {1};
  options.shardings = {spec::OptimizerSharding::kNone};
  options.baselines = false;
  auto ex = ExhaustiveSearch(*w->predictor, options, 6, 2000000);
  auto planned = PlanCluster(*w->predictor, options);
  ASSERT_TRUE(ex.ok()) << ex.status().message();
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  int chunks = 1;
  for (const spec::PipelinePlan& pipe : ex->plan.pipelines) chunks = std::max(chunks, pipe.chunks);
  std::printf("exhaustive optimum over %lld plans: %.4f s, %d chunks; planner: %s, %.4f s\n",
              static_cast<long long>(ex->plans_scored), ex->prediction.iteration_s, chunks,
              planned->ranked.front().description.c_str(),
              planned->ranked.front().prediction.iteration_s);
  EXPECT_GT(chunks, 1) << spec::PlanToJson(ex->plan);
  EXPECT_NEAR(planned->ranked.front().prediction.iteration_s / ex->prediction.iteration_s, 1.0,
              1e-9)
      << spec::PlanToJson(ex->plan);
}

}  // namespace
}  // namespace motley::plan
