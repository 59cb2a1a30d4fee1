// Planner tests: valid plans that beat the uniform baseline on a heterogeneous cluster, NIC-aware
// placement on two islands joined by a slow link, references and baselines present, and
// infeasible requests explained by their binding constraint.
#include "plan/planner.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/sanitized_build.h"
#include "plan/evaluate.h"
#include "plan/test_util.h"
#include "sim/simulator.h"
#include "spec/plan_topology.h"

namespace motley::plan {
namespace {

using testing::MakeWorld;

// 16 H100 on InfiniBand and 16 A100-40G on RoCE, joined by 25G Ethernet; Llama-2-7B, 64
// sequences of 2,048 tokens: above the small-instance size, so the finalists are polished.
std::unique_ptr<testing::World> TwoIslandWorld() {
  return MakeWorld(
      {{"h", "h100", 2, 8, "nvlink", "ib-hdr"}, {"a", "a100-40g", 2, 8, "nvlink", "roce-100g"}},
      "eth-25g", "llama2-7b", 64, 2048);
}

// The search alone: no baselines, no exhaustive reference, no finalist polish.
PlannerOptions UnpolishedSearch() {
  PlannerOptions options;
  options.baselines = false;
  options.exhaustive_max_units = 0;
  options.finalist_polish_moves = 0;
  return options;
}

TEST(PlannerTest, HeterogeneousClusterBeatsUniformAndValidates) {
  // 8 devices: a node of 4 h100 and a node of 4 a100-40g.
  auto w = MakeWorld({{"h", "h100", 1, 4, "nvlink", "ib-hdr"}, {"a", "a100-40g", 1, 4, "nvlink", "ib-hdr"}},
                     "ib-hdr", "llama2-7b", 32, 2048);
  PlannerOptions options;
  if (kSanitizedBuild) {
    // The full search (4 micro-batch sizes x 3 recompute modes over every TP degree of both
    // types) ran past this test's 300 s in the Debug ASan/UBSan build (2.3-6.5 s in the main
    // build). There the same code paths run over one micro-batch size and no recompute; the main
    // build searches everything.
    options.micro_batch_sizes = {1};
    options.recompute = {spec::Recompute::kNone};
  }
  auto report = PlanCluster(*w->predictor, options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  for (const Candidate& c : report->ranked) {
    EXPECT_TRUE(spec::ValidatePlan(c.plan, w->cluster, w->model, w->train).ok())
        << spec::ValidatePlan(c.plan, w->cluster, w->model, w->train).message();
    EXPECT_TRUE(c.prediction.fits_memory);
  }
  ASSERT_EQ(report->baselines.size(), 3u);
  const Baseline& uniform = report->baselines[0];
  ASSERT_TRUE(uniform.found) << uniform.why_not;
  const double tps = report->best.TokensPerSecond(report->tokens_per_step);
  EXPECT_GT(tps, uniform.candidate.TokensPerSecond(report->tokens_per_step));
  EXPECT_GT(uniform.candidate.simulated_s, 0);
  EXPECT_GE(report->ranked.front().prediction.tokens_per_s,
            report->baselines[1].candidate.prediction.tokens_per_s);
  // The compute bound is never exceeded; the best plan is simulated.
  EXPECT_LT(tps, report->compute_bound_tokens_per_s);
  EXPECT_GT(report->best.simulated_s, 0);
  EXPECT_GT(report->homogeneous_sum_tokens_per_s, 0);
  EXPECT_FALSE(SummarizeReport(*report).empty());
}

TEST(PlannerTest, KeepsDataParallelTrafficInsideIslands) {
  // Two islands of 2 nodes x 8 a100 joined by a 10G WAN; llama2-13b needs 2 stages at TP 8.
  auto w = MakeWorld({{"x", "a100-80g", 2, 8, "nvlink", "ib-hdr"}, {"y", "a100-80g", 2, 8, "nvlink", "ib-hdr"}},
                     "wan-10g", "llama2-13b", 64, 4096);
  PlannerOptions options;
  options.baselines = false;
  auto report = PlanCluster(*w->predictor, options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  const spec::Plan& best = report->best.plan;
  // Every data-parallel group (stages holding the same blocks) lies inside one island.
  for (const spec::LayerGroup& g : spec::DataParallelGroups(best, w->model.num_blocks)) {
    std::set<int> islands;
    for (int d : g.devices) islands.insert(w->cluster.device(d).island);
    EXPECT_LE(islands.size(), 1u) << best.comment << " (layer " << g.layer << ")";
  }
  // And it beats the placement that puts each pipeline in one island (DP over the WAN).
  spec::UniformPlanOptions u;
  u.dp = 4;
  u.pp = 2;
  u.tp = 4;
  auto flat = spec::UniformPlan(w->cluster, w->model, w->train, u);
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  EXPECT_LT(report->best.prediction.iteration_s, w->predictor->Predict(*flat).iteration_s);
}

// The whole report, baselines and references included, is the same on one thread and on three
// (the confirmations and the uniform baseline's shapes run side by side there, and so do the
// candidates of the homogeneous sum's per-type searches).
TEST(PlannerTest, TheReportDoesNotDependOnTheThreadCount) {
  auto w = TwoIslandWorld();
  PlannerOptions options;
  options.threads = 1;
  auto one = PlanCluster(*w->predictor, options);
  options.threads = 3;
  auto three = PlanCluster(*w->predictor, options);
  ASSERT_TRUE(one.ok()) << one.status().message();
  ASSERT_TRUE(three.ok()) << three.status().message();
  EXPECT_EQ(three->best.description, one->best.description);
  EXPECT_EQ(three->best.simulated_s, one->best.simulated_s);
  ASSERT_EQ(three->ranked.size(), one->ranked.size());
  for (size_t i = 0; i < one->ranked.size(); ++i) {
    EXPECT_EQ(three->ranked[i].description, one->ranked[i].description) << "rank " << i;
    EXPECT_EQ(three->ranked[i].simulated_s, one->ranked[i].simulated_s) << "rank " << i;
  }
  ASSERT_EQ(three->baselines.size(), one->baselines.size());
  for (size_t i = 0; i < one->baselines.size(); ++i) {
    const Baseline& a = one->baselines[i];
    const Baseline& b = three->baselines[i];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.found, a.found) << a.name;
    EXPECT_EQ(b.why_not, a.why_not) << a.name;
    EXPECT_EQ(b.candidate.description, a.candidate.description) << a.name;
    EXPECT_EQ(b.candidate.prediction.iteration_s, a.candidate.prediction.iteration_s) << a.name;
    EXPECT_EQ(b.candidate.simulated_s, a.candidate.simulated_s) << a.name;
  }
  EXPECT_TRUE(one->baselines.front().found) << one->baselines.front().why_not;
  ASSERT_EQ(three->homogeneous_shares.size(), one->homogeneous_shares.size());
  ASSERT_EQ(one->homogeneous_shares.size(), 2u);
  for (size_t i = 0; i < one->homogeneous_shares.size(); ++i) {
    EXPECT_EQ(three->homogeneous_shares[i].type, one->homogeneous_shares[i].type);
    EXPECT_EQ(three->homogeneous_shares[i].tokens_per_s, one->homogeneous_shares[i].tokens_per_s);
    EXPECT_EQ(three->homogeneous_shares[i].what, one->homogeneous_shares[i].what);
  }
  EXPECT_GT(one->homogeneous_sum_tokens_per_s, 0);
  EXPECT_EQ(three->homogeneous_sum_tokens_per_s, one->homogeneous_sum_tokens_per_s);
  EXPECT_EQ(three->exhaustive_tokens_per_s, one->exhaustive_tokens_per_s);
  ASSERT_EQ(three->left_out.size(), one->left_out.size());
  for (size_t i = 0; i < one->left_out.size(); ++i) {
    EXPECT_EQ(three->left_out[i].devices, one->left_out[i].devices);
    EXPECT_EQ(three->left_out[i].reason, one->left_out[i].reason);
  }
}

TEST(PlannerTest, ModelTooLargeIsExplained) {
  auto w = MakeWorld({{"a", "a100-40g", 1, 2, "nvlink", "ib-hdr"}}, "ib-hdr", "llama2-70b", 8, 4096);
  auto report = PlanCluster(*w->predictor, PlannerOptions{});
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("the model does not fit"), std::string::npos)
      << report.status().message();
  EXPECT_NE(report.status().message().find("GiB"), std::string::npos);
}

TEST(PlannerTest, IndivisibleBatchIsExplained) {
  auto w = MakeWorld({{"a", "a100-80g", 1, 8, "nvlink", "ib-hdr"}}, "ib-hdr", "llama2-7b", 7, 2048);
  PlannerOptions options;
  options.micro_batch_sizes = {2, 4};
  auto report = PlanCluster(*w->predictor, options);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("global_batch 7 is not divisible"), std::string::npos)
      << report.status().message();
}

TEST(PlannerTest, BatchTooSmallForTheStagesMemoryNeedsIsExplained) {
  // llama2-13b on 8 a100-40g: no TP group of a node holds the model alone, so at least 2 stages
  // are needed, but a global batch of 1 gives one micro-batch.
  auto w = MakeWorld({{"a", "a100-40g", 1, 8, "nvlink", "ib-hdr"}}, "ib-hdr", "llama2-13b", 1, 4096);
  PlannerOptions options;
  options.tp_degrees = {1};
  auto report = PlanCluster(*w->predictor, options);
  ASSERT_FALSE(report.ok());
  const std::string& msg = report.status().message();
  EXPECT_NE(msg.find("batch ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("memory ("), std::string::npos) << msg;
}

// Above the small-instance size the search polishes nothing; the candidates that go on to the
// simulator are polished afterwards (PlannerOptions::finalist_polish_moves, moves by distinct
// block split): a polished candidate is faster than it was, by prediction and by simulation, the
// others are unchanged, the ranking stays sorted by the predicted step, pipelines that shared a
// block split still share it, the choice is no slower, and on this cluster the polish finds a
// faster plan than the search alone.
TEST(PlannerTest, FinalistsArePolishedAtScaleKeepingIdenticalPipelinesIdentical) {
  auto w = TwoIslandWorld();
  PlannerOptions options = UnpolishedSearch();
  auto plain = PlanCluster(*w->predictor, options);
  options.finalist_polish_moves = 6;
  auto polished = PlanCluster(*w->predictor, options);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_TRUE(polished.ok()) << polished.status().message();
  const std::string suffix = ", polished";
  int improved = 0;
  for (size_t i = 0; i < polished->ranked.size(); ++i) {
    const Candidate& c = polished->ranked[i];
    if (i > 0) {
      EXPECT_LE(polished->ranked[i - 1].prediction.iteration_s, c.prediction.iteration_s) << i;
    }
    EXPECT_TRUE(spec::ValidatePlan(c.plan, w->cluster, w->model, w->train).ok()) << c.description;
    const bool was_polished =
        c.description.size() > suffix.size() &&
        c.description.compare(c.description.size() - suffix.size(), suffix.size(), suffix) == 0;
    const std::string base = was_polished
                                 ? c.description.substr(0, c.description.size() - suffix.size())
                                 : c.description;
    const auto before = std::find_if(plain->ranked.begin(), plain->ranked.end(),
                                     [&](const Candidate& p) { return p.description == base; });
    ASSERT_NE(before, plain->ranked.end()) << c.description;
    if (was_polished) {
      EXPECT_LT(c.prediction.iteration_s, before->prediction.iteration_s) << c.description;
      const sim::Simulator simulator(*w->predictor);
      auto now = simulator.Run(c.plan, {});
      auto was = simulator.Run(before->plan, {});
      ASSERT_TRUE(now.ok() && was.ok());
      EXPECT_LT(now->iteration_s, was->iteration_s) << c.description;
      ++improved;
    } else {
      EXPECT_EQ(c.prediction.iteration_s, before->prediction.iteration_s) << c.description;
    }
    // Pipelines that shared a block split before the polish still share one.
    for (size_t a = 0; a < c.plan.pipelines.size(); ++a) {
      for (size_t b = a + 1; b < c.plan.pipelines.size(); ++b) {
        const auto blocks = [](const spec::PipelinePlan& p) {
          std::vector<int64_t> n;
          for (const spec::StagePlan& st : p.stages) n.push_back(st.num_blocks);
          return n;
        };
        if (blocks(before->plan.pipelines[a]) == blocks(before->plan.pipelines[b])) {
          EXPECT_EQ(blocks(c.plan.pipelines[a]), blocks(c.plan.pipelines[b]))
              << c.description << ": pipelines " << a << " and " << b;
        }
      }
    }
  }
  EXPECT_GT(improved, 0) << "no finalist was improved by the polish";
  EXPECT_LE(polished->best.simulated_s, plain->best.simulated_s);
  std::printf("%d of %zu finalists polished; chosen %.6f s -> %.6f s simulated\n", improved,
              std::min<size_t>(polished->ranked.size(), 6), plain->best.simulated_s,
              polished->best.simulated_s);
}

// Polish predicts a round's moves a batch of one per thread at a time and judges them in move
// order: on eight threads it makes the same moves as on one, first improvement (per split) and
// best improvement (every pipeline) alike, on candidates it improves. (Taking the best of each
// batch instead of its first improving move changes the plans here.)
TEST(PlannerTest, PolishMakesTheSameMovesOnAnyThreadCount) {
  // What the polish moves: per pipeline, its micro-batches and its stages' block counts.
  auto Shape = [](const spec::Plan& plan) {
    std::string out;
    for (const spec::PipelinePlan& pipe : plan.pipelines) {
      out += std::to_string(pipe.micro_batches) + ":";
      for (const spec::StagePlan& st : pipe.stages) out += " " + std::to_string(st.num_blocks);
      out += "; ";
    }
    return out;
  };
  auto w = TwoIslandWorld();
  auto plain = PlanCluster(*w->predictor, UnpolishedSearch());
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  const std::vector<Unit> no_units;
  const LayoutEvaluator evaluator(*w->predictor, no_units, {});
  int improved = 0;
  for (size_t i = 0; i < plain->ranked.size(); ++i) {
    for (const LayoutEvaluator::Moves moves :
         {LayoutEvaluator::Moves::kPerSplit, LayoutEvaluator::Moves::kEveryPipeline}) {
      const Candidate& c = plain->ranked[i];
      spec::Plan one_plan = c.plan;
      perf::Prediction one_pred = c.prediction;
      evaluator.Polish(&one_plan, &one_pred, 6, moves, 1);
      spec::Plan three_plan = c.plan;
      perf::Prediction three_pred = c.prediction;
      evaluator.Polish(&three_plan, &three_pred, 6, moves, 8);
      EXPECT_EQ(Shape(three_plan), Shape(one_plan)) << c.description;
      EXPECT_EQ(three_pred.iteration_s, one_pred.iteration_s) << c.description;
      if (one_pred.iteration_s < c.prediction.iteration_s) ++improved;
    }
  }
  EXPECT_GT(improved, 0) << "the polish improved no candidate, so the test compares nothing";
}

}  // namespace
}  // namespace motley::plan
