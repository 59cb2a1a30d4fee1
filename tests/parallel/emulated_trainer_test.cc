// The parallel trainer on emulated devices (docs/architecture.md §6, issue 4): every rank an
// EmulatedBackend on its own virtual clock, transfers charged over the cluster's link classes.
//  - the acceptance check on the shipped example (examples/runs/hetero-4.yaml: 2 devices at 3x
//    and 2 at 1x): the balanced plan takes less virtual time per step than the uniform split,
//    and virtual times are exact (a second run repeats them bit for bit);
//  - per-step metrics on the virtual clock, the wall clock mode, and the errors (a device past
//    its memory capacity, --clock on a cluster with nothing emulated).
// Virtual times only: no wall-clock assertion anywhere.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "motley_source_dir.h"
#include "parallel_test_util.h"
#include "train/parallel_trainer.h"

namespace motley::testing {
namespace {

const std::filesystem::path kExamples = std::filesystem::path(MOTLEY_SOURCE_DIR) / "examples";

train::ParallelTrainerOptions Quiet() {
  train::ParallelTrainerOptions o;
  o.out = nullptr;
  return o;
}

spec::RunFile ExampleRun(int64_t steps) {
  auto run = spec::LoadRunFile((kExamples / "runs/hetero-4.yaml").string());
  EXPECT_TRUE(run.ok()) << run.status().message();
  if (!run.ok()) return {};
  run->train.steps = steps;
  return *run;
}

spec::Plan ExamplePlan(const std::string& name) {
  auto plan = spec::LoadPlan((kExamples / "plans" / name).string());
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? *plan : spec::Plan{};
}

TEST(EmulatedTrainerTest, BalancedPlanBeatsTheUniformSplitOnTheVirtualClock) {
  constexpr int64_t kSteps = 2;
  const spec::RunFile run = ExampleRun(kSteps);
  ASSERT_EQ(run.cluster.DevicesPerType(), (std::vector<int>{2, 2}));
  ASSERT_DOUBLE_EQ(run.cluster.device_types[0].emulated->flops_per_s,
                   3.0 * run.cluster.device_types[1].emulated->flops_per_s);
  auto balanced = train::TrainParallel(run, ExamplePlan("hetero-4-balanced.json"), Quiet());
  ASSERT_TRUE(balanced.ok()) << balanced.status().message();
  auto uniform = train::TrainParallel(run, ExamplePlan("hetero-4-uniform.json"), Quiet());
  ASSERT_TRUE(uniform.ok()) << uniform.status().message();
  EXPECT_EQ(balanced->clock, "virtual");
  EXPECT_EQ(uniform->clock, "virtual");
  ASSERT_EQ(balanced->step_times_s.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(uniform->step_times_s.size(), static_cast<size_t>(kSteps));
  for (size_t k = 0; k < static_cast<size_t>(kSteps); ++k) {
    EXPECT_GT(balanced->step_times_s[k], 0.0);
    EXPECT_LT(balanced->step_times_s[k], uniform->step_times_s[k]) << "step " << k + 1;
    // Same math under both plans.
    EXPECT_NEAR(balanced->losses[k], uniform->losses[k], 1e-5 * uniform->losses[k]);
  }
  EXPECT_GT(balanced->tokens_per_s, uniform->tokens_per_s);
  std::printf("virtual step time: balanced %.6f s, uniform %.6f s (%.2fx); tokens/s %.0f vs %.0f\n",
              balanced->step_times_s[1], uniform->step_times_s[1],
              uniform->step_times_s[1] / balanced->step_times_s[1], balanced->tokens_per_s,
              uniform->tokens_per_s);

  // Exact and repeatable: nothing in the virtual time depends on the host's speed or scheduling.
  auto again = train::TrainParallel(run, ExamplePlan("hetero-4-balanced.json"), Quiet());
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->step_times_s, balanced->step_times_s);
}

TEST(EmulatedTrainerTest, MetricsReportTheVirtualStepTime) {
  const spec::Plan plan =
      MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 3, 2),
                Pipeline({Stage(0, 4, true, true, {2, 3})}, 2, 3)},
               "emulated-metrics");
  train::ParallelTrainerOptions options = Quiet();
  options.metrics_path = TempPath("emulated_metrics.jsonl");
  options.trace_path = TempPath("emulated_trace.json");
  auto summary = train::TrainParallel(TinyEmulatedRun(3), plan, options);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  const auto lines = ReadJsonLines(options.metrics_path);
  ASSERT_EQ(lines.size(), 3U);
  for (size_t k = 0; k < lines.size(); ++k) {
    const auto& j = lines[k];
    EXPECT_EQ(j.at("clock"), "virtual");
    const double step = j.at("step_time_s").get<double>();
    EXPECT_EQ(step, j.at("virtual_step_time_s").get<double>());
    EXPECT_EQ(step, summary->step_times_s[k]);
    EXPECT_DOUBLE_EQ(j.at("tokens_per_s").get<double>(), 12.0 * 16.0 / step);
    for (const auto& r : j.at("ranks")) {
      // Rank times are virtual: every rank's step lies inside the step's makespan, and the
      // compute of a rank is charged (positive) time.
      EXPECT_GT(r.at("forward_s").get<double>(), 0.0);
      EXPECT_GT(r.at("backward_s").get<double>(), 0.0);
      EXPECT_LE(r.at("step_s").get<double>(), step);
    }
    // The slow devices (2, 3) run TP 2 and all-reduce over the charged links.
    EXPECT_GT(j.at("ranks")[2].at("tp_comm_s").get<double>(), 0.0);
  }
  // A 4x slower device doing the whole model (half of it per TP rank) with 2 of 3 micro-batches
  // vs. the fast pipeline: the slow replica's compute dominates its forward time.
  EXPECT_GT(lines[1].at("ranks")[2].at("forward_s").get<double>(),
            lines[1].at("ranks")[1].at("forward_s").get<double>());
}

TEST(EmulatedTrainerTest, WallClockModeTrainsTheSameMath) {
  const spec::Plan plan = MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 1, 6),
                                    Pipeline({Stage(0, 4, true, true, {1})}, 2, 3)},
                                   "emulated-wall");
  auto on_virtual = train::TrainParallel(TinyEmulatedRun(2), plan, Quiet());
  ASSERT_TRUE(on_virtual.ok()) << on_virtual.status().message();
  train::ParallelTrainerOptions options = Quiet();
  options.clock = train::ClockChoice::kWall;
  auto on_wall = train::TrainParallel(TinyEmulatedRun(2), plan, options);
  ASSERT_TRUE(on_wall.ok()) << on_wall.status().message();
  EXPECT_EQ(on_wall->clock, "wall");
  EXPECT_EQ(on_wall->losses, on_virtual->losses);
}

TEST(EmulatedTrainerTest, DevicePastItsMemoryCapacityIsAClearError) {
  spec::RunFile run = TinyRunOn(EmulatedClusterYaml("1 MiB"), 2);
  const spec::Plan plan = MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                                    Pipeline({Stage(0, 4, true, true, {2})}, 2, 3)},
                                   "oom-plan");
  auto summary = train::TrainParallel(run, plan, Quiet());
  ASSERT_FALSE(summary.ok());
  const std::string& m = summary.status().message();
  EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
  EXPECT_NE(m.find("device 2"), std::string::npos) << m;
  EXPECT_NE(m.find("slow"), std::string::npos) << m;
}

TEST(EmulatedTrainerTest, ClockOptionNeedsAnEmulatedCluster) {
  train::ParallelTrainerOptions options = Quiet();
  options.clock = train::ClockChoice::kVirtual;
  auto summary = train::TrainParallel(
      TinyRun(1), MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 1, 12)}, "one"), options);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find("--clock"), std::string::npos);
  EXPECT_FALSE(train::ParseClockChoice("sundial").ok());
  EXPECT_EQ(*train::ParseClockChoice("wall"), train::ClockChoice::kWall);
}

}  // namespace
}  // namespace motley::testing
