// Tests of Predictor::StepLowerBound (perf/step_bound.cc), the planner's pruning bound: never
// above Predict's step over many shapes, settings and slowdowns, and above the pipelines' bound
// where data-parallel syncs cross a slow link.
#include <gtest/gtest.h>

#include <random>

#include "perf/cluster_presets.h"
#include "perf/predictor.h"
#include "perf/step_model.h"

namespace motley::perf {
namespace {

// Two islands of 2 nodes x 8 a100 on InfiniBand, joined by a 10G WAN.
spec::ClusterSpec TwoIslands() {
  auto c = MakeCluster(
      "islands",
      {{"x", "a100-80g", 2, 8, "nvlink", "ib-hdr"}, {"y", "h100", 2, 8, "nvlink", "roce-100g"}},
      "wan-10g");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

// Every (dp, pp, tp) that divides 32 devices, with and without ZeRO-1, both schedules, ring or
// best-algorithm collectives, exact rings or their bound (exact_ring_max_ranks), shared or
// private links, and random device and link slowdowns.
TEST(StepBoundTest, NeverAbovePredict) {
  const spec::ClusterSpec cluster = TwoIslands();
  auto model = spec::ModelPreset("small");
  ASSERT_TRUE(model.ok());
  model->num_blocks = 8;
  spec::TrainSpec train;
  train.global_batch = 32;
  train.seq_len = 256;
  std::mt19937 rng(11);
  int checked = 0;
  for (int variant = 0; variant < 8; ++variant) {
    PerfSettings settings = DefaultSettings(cluster);
    settings.ring_collectives = (variant & 1) != 0;
    settings.nic_contention = (variant & 2) == 0;
    if ((variant & 4) != 0) settings.exact_ring_max_ranks = 1;
    const RooflineComputeModel rm(cluster, *model, settings);
    const Predictor predictor(cluster, *model, train, rm, settings);
    for (int dp : {1, 2, 4, 8}) {
      for (int pp : {1, 2, 4}) {
        for (int tp : {1, 2, 4}) {
          if (dp * pp * tp > 32 || train.global_batch % dp != 0) continue;
          for (bool zero1 : {false, true}) {
            if (zero1 && dp == 1) continue;
            spec::UniformPlanOptions opt;
            opt.dp = dp;
            opt.pp = pp;
            opt.tp = tp;
            opt.schedule =
                checked % 3 == 0 ? spec::PipelineSchedule::kGPipe : spec::PipelineSchedule::k1F1B;
            opt.recompute = checked % 2 == 0 ? spec::Recompute::kFull : spec::Recompute::kNone;
            opt.optimizer_sharding =
                zero1 ? spec::OptimizerSharding::kZero1 : spec::OptimizerSharding::kNone;
            auto plan = spec::UniformPlan(cluster, *model, train, opt);
            ASSERT_TRUE(plan.ok()) << plan.status().message();
            StragglerRates rates(cluster.devices().size(), 1.0);
            LinkRates links;
            if (checked % 4 == 1) {
              for (double& r : rates) r = std::uniform_real_distribution<double>(1.0, 3.0)(rng);
              for (int i = 0; i < 8; ++i) {
                links.Set(static_cast<int>(rng() % 32), static_cast<int>(rng() % 32),
                          std::uniform_real_distribution<double>(1.0, 20.0)(rng));
              }
            }
            const Prediction pred = predictor.Predict(*plan, rates, links);
            const Seconds bound = predictor.StepLowerBound(*plan, rates, links);
            // The caller's own boundary times and step program give the same bound and step.
            const Predictor::BoundaryTimes boundary = predictor.SolveBoundaryTimes(*plan, links);
            const sched::StepProgram program = predictor.StepProgramFor(*plan);
            EXPECT_EQ(predictor.StepLowerBound(*plan, rates, links, &boundary, &program), bound);
            EXPECT_EQ(predictor.Predict(*plan, rates, links, &program).iteration_s,
                      pred.iteration_s);
            EXPECT_GT(bound, 0.0);
            EXPECT_LE(bound, pred.iteration_s * (1 + 1e-9))
                << "variant " << variant << " dp " << dp << " pp " << pp << " tp " << tp
                << " zero1 " << zero1;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 150);
}

// Two pipelines of two stages, each pipeline inside one island: every layer's data-parallel
// sync crosses the WAN after the pipeline phase. The step bound counts it, the pipelines' bound
// does not; both stay at or below the prediction.
TEST(StepBoundTest, CountsTheDataParallelSyncAfterThePhase) {
  const spec::ClusterSpec cluster = TwoIslands();
  auto model = spec::ModelPreset("llama2-7b");
  ASSERT_TRUE(model.ok());
  spec::TrainSpec train;
  train.global_batch = 16;
  train.seq_len = 2048;
  const PerfSettings settings = DefaultSettings(cluster);
  const RooflineComputeModel rm(cluster, *model, settings);
  const Predictor predictor(cluster, *model, train, rm, settings);
  spec::UniformPlanOptions opt;
  opt.dp = 2;
  opt.pp = 2;
  opt.tp = 8;
  opt.recompute = spec::Recompute::kFull;
  auto plan = spec::UniformPlan(cluster, *model, train, opt);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  plan->pipelines[0].stages[1].devices = {8, 9, 10, 11, 12, 13, 14, 15};
  plan->pipelines[1].stages[0].devices = {16, 17, 18, 19, 20, 21, 22, 23};
  ASSERT_TRUE(spec::ValidatePlan(*plan, cluster, *model, train).ok());
  const Prediction pred = predictor.Predict(*plan);
  Seconds pipelines = 0;
  for (const spec::PipelinePlan& pipe : plan->pipelines) {
    std::vector<Seconds> f, b;
    for (const spec::StagePlan& st : pipe.stages) {
      const StageCost c =
          predictor.StageCostOf(st, pipe.micro_batch_size, spec::Recompute::kNone, {});
      f.push_back(c.forward_s);
      b.push_back(c.backward_s);
    }
    pipelines = std::max(pipelines, PipelinePhaseLowerBound(f, b, pipe.micro_batches));
  }
  const Seconds bound = predictor.StepLowerBound(*plan);
  EXPECT_LE(bound, pred.iteration_s * (1 + 1e-9));
  // A 10G WAN all-reduce of several GiB of gradients: seconds.
  EXPECT_GT(bound, pipelines + 1.0) << "pipelines " << pipelines << " step " << pred.iteration_s;
}

}  // namespace
}  // namespace motley::perf
