// Plan invariance (docs/architecture.md §4, issue 4 acceptance): the tiny model trained 20 steps
// under very different plans, with every rank a thread over the `local` communicator, gives the
// per-step losses of the serial single-device loop within 1e-5 relative (fp32), interleaved 1F1B
// plans among them. Also: the per-step
// metrics and the Chrome trace of a run, and the skipping of a step with NaN gradients.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "interleaved_plans.h"
#include "parallel_test_util.h"
#include "train/parallel_trainer.h"

namespace motley::testing {
namespace {

constexpr int64_t kSteps = 20;
constexpr double kRelTol = 1e-5;

const std::vector<double>& Oracle() {
  static const std::vector<double> losses = SerialLosses(TinyRun(kSteps));
  return losses;
}

train::ParallelTrainerOptions Quiet() {
  train::ParallelTrainerOptions o;
  o.out = nullptr;
  return o;
}

// Trains `plan` (on `run`, default the tiny run on the CPU cluster) and compares every step's loss
// with the serial run.
void ExpectSerialTrajectory(const spec::Plan& plan, const spec::RunFile& run = TinyRun(kSteps)) {
  const std::vector<double>& serial = Oracle();
  ASSERT_EQ(serial.size(), static_cast<size_t>(kSteps));
  auto summary = train::TrainParallel(run, plan, Quiet());
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  ASSERT_EQ(summary->losses.size(), serial.size());
  double worst = 0.0;
  for (size_t k = 0; k < serial.size(); ++k) {
    const double rel = std::abs(summary->losses[k] - serial[k]) / std::abs(serial[k]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kRelTol) << plan.source << ": step " << k + 1 << " loss "
                            << summary->losses[k] << " vs serial " << serial[k];
  }
  EXPECT_TRUE(summary->skipped_steps.empty());
  // It trained: the last loss is clearly below the first.
  EXPECT_LT(summary->losses.back(), summary->losses.front() - 0.5);
  std::printf("%s: %d ranks, worst relative loss difference to serial over %lld steps: %.3g\n",
              plan.source.c_str(), summary->ranks, static_cast<long long>(kSteps), worst);
}

TEST(PlanInvarianceTest, SerialOracleTrains) {
  const std::vector<double>& serial = Oracle();
  ASSERT_EQ(serial.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(serial.front(), std::log(256.0), 0.1);
  EXPECT_LT(serial.back(), serial.front() - 0.5);
}

TEST(PlanInvarianceTest, PureDataParallelWithUnevenBatches) {
  // 6 + 4 + 2 samples in micro-batches of 3, 4 and 1.
  ExpectSerialTrajectory(MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                                   Pipeline({Stage(0, 4, true, true, {1})}, 1, 4),
                                   Pipeline({Stage(0, 4, true, true, {2})}, 2, 1)},
                                  "dp3-uneven"));
}

TEST(PlanInvarianceTest, PurePipelineWithUnevenBlocks) {
  ExpectSerialTrajectory(MakePlan({Pipeline({Stage(0, 1, true, false, {0}),
                                             Stage(1, 2, false, false, {1}),
                                             Stage(3, 1, false, true, {2})},
                                            4, 3)},
                                  "pp3-uneven-1f1b"));
}

TEST(PlanInvarianceTest, PurePipelineGPipeWithEmptyEmbeddingStage) {
  // The first stage holds only the embedding; GPipe order.
  spec::Plan plan = MakePlan({Pipeline({Stage(0, 0, true, false, {0}),
                                        Stage(0, 3, false, false, {1}),
                                        Stage(3, 1, false, true, {2})},
                                       6, 2)},
                             "pp3-gpipe");
  plan.schedule = spec::PipelineSchedule::kGPipe;
  ExpectSerialTrajectory(plan);
}

TEST(PlanInvarianceTest, TensorParallelTwo) {
  ExpectSerialTrajectory(MakePlan({Pipeline({Stage(0, 4, true, true, {0, 1})}, 2, 6)}, "tp2"));
}

TEST(PlanInvarianceTest, TensorPipelineAndDataParallel) {
  // 2 replicas x 2 stages x TP 2 = 8 ranks; uneven batches (6 + 6 in micro-batches of 3 and 2).
  ExpectSerialTrajectory(MakePlan(
      {Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2, 3})}, 2, 3),
       Pipeline({Stage(0, 3, true, false, {4, 5}), Stage(3, 1, false, true, {6, 7})}, 3, 2)},
      "tp2-pp2-dp2"));
}

TEST(PlanInvarianceTest, ReplicasWithDifferentStageCountsAndTpDegrees) {
  // Replica 0: 2 stages (TP 2, TP 1); replica 1: 3 stages (TP 1, TP 1, TP 2). Every layer's
  // holders mix TP degrees 1 and 2 (or stage splits), and the pipelines also receive from stages
  // of another TP degree.
  ExpectSerialTrajectory(MakePlan(
      {Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {2})}, 3, 2),
       Pipeline({Stage(0, 1, true, false, {4}), Stage(1, 2, false, false, {5}),
                 Stage(3, 1, false, true, {6, 7})},
                3, 2)},
      "mixed-stages-and-tp"));
}

TEST(PlanInvarianceTest, ReplicasWithDifferentStageCountsNoTp) {
  ExpectSerialTrajectory(MakePlan(
      {Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 3, false, true, {1})}, 4, 2),
       Pipeline({Stage(0, 4, true, true, {4})}, 1, 4)},
      "mixed-stages"));
}

TEST(PlanInvarianceTest, ZeroOneWithUnevenReplicasAndTp) {
  // optimizer_sharding 'zero1': the AdamW moments of every uniform layer group are sharded (here
  // blocks 0-1 across 3 replicas, the head across 2 TP-2 stages); mixed groups (block 2, TP 1 vs
  // 2) keep the replicated optimizer.
  spec::Plan plan = MakePlan(
      {Pipeline({Stage(0, 4, true, true, {0})}, 2, 2),
       Pipeline({Stage(0, 2, true, false, {1}), Stage(2, 2, false, true, {2, 3})}, 2, 2),
       Pipeline({Stage(0, 3, true, false, {4}), Stage(3, 1, false, true, {5, 6})}, 2, 2)},
      "zero1-mixed");
  plan.optimizer_sharding = spec::OptimizerSharding::kZero1;
  ExpectSerialTrajectory(plan);
}

TEST(PlanInvarianceTest, ZeroOnePureDataParallelOnEmulatedDevices) {
  spec::Plan plan = MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                              Pipeline({Stage(0, 4, true, true, {2})}, 3, 2)},
                             "zero1-dp2-emulated");
  plan.optimizer_sharding = spec::OptimizerSharding::kZero1;
  ExpectSerialTrajectory(plan, TinyEmulatedRun(kSteps));
}

TEST(PlanInvarianceTest, ReplicaOnEmulatedSlowDevices) {
  // A fast emulated device holds a whole replica; two emulated devices 4x slower hold a 2-stage
  // replica; every rank runs the EmulatedBackend on its own virtual clock, the communicator
  // charges the cluster's links. The numbers are the CPU's, so the trajectory is the serial one.
  ExpectSerialTrajectory(MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                                   Pipeline({Stage(0, 2, true, false, {2}),
                                             Stage(2, 2, false, true, {3})},
                                            3, 2)},
                                  "emulated-slow-replica"),
                         TinyEmulatedRun(kSteps));
}

// Interleaved 1F1B through the parallel trainer (interleaved_plans.h): v = 2 on the tiny model;
// v = 3, uneven chunks with TP, and replicas of different v on its 6-block variant, each against
// that model's serial run.
TEST(PlanInvarianceTest, InterleavedOneFOneB) {
  ExpectSerialTrajectory(interleaved::TwoChunks());
  const spec::RunFile six = interleaved::SixBlockRun(kSteps);
  const std::vector<double> serial = SerialLosses(six);
  for (const spec::Plan& plan : {interleaved::ThreeChunks(), interleaved::UnevenChunksTp(),
                                 interleaved::MixedChunkCounts()}) {
    auto summary = train::TrainParallel(six, plan, Quiet());
    ASSERT_TRUE(summary.ok()) << plan.source << ": " << summary.status().message();
    EXPECT_TRUE(summary->skipped_steps.empty());
    interleaved::ExpectSerialLosses(plan.source, summary->losses, serial);
  }
}

TEST(ParallelTrainerTest, WritesPerRankAndPerStageMetricsAndATrace) {
  const spec::Plan plan = MakePlan(
      {Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2})}, 3, 2),
       Pipeline({Stage(0, 4, true, true, {4})}, 2, 3)},
      "metrics-plan");
  train::ParallelTrainerOptions options = Quiet();
  options.metrics_path = TempPath("metrics.jsonl");
  options.trace_path = TempPath("trace.json");
  options.trace_steps = {2, 3};
  auto summary = train::TrainParallel(TinyRun(4), plan, options);
  ASSERT_TRUE(summary.ok()) << summary.status().message();

  const auto lines = ReadJsonLines(options.metrics_path);
  ASSERT_EQ(lines.size(), 4U);
  for (size_t k = 0; k < lines.size(); ++k) {
    const auto& j = lines[k];
    EXPECT_EQ(j.at("step"), static_cast<int64_t>(k + 1));
    EXPECT_DOUBLE_EQ(j.at("loss").get<double>(), summary->losses[k]);
    EXPECT_EQ(j.at("tokens"), 12 * 16);
    EXPECT_FALSE(j.at("skipped").get<bool>());
    EXPECT_GT(j.at("mfu").get<double>(), 0.0);
    ASSERT_EQ(j.at("ranks").size(), 4U);
    for (const auto& r : j.at("ranks")) {
      EXPECT_GT(r.at("forward_s").get<double>(), 0.0);
      EXPECT_GT(r.at("backward_s").get<double>(), 0.0);
      EXPECT_GE(r.at("step_s").get<double>(), r.at("forward_s").get<double>());
    }
    // Only the TP ranks 0 and 1 of stage 0 of pipeline 0 all-reduce inside their blocks.
    EXPECT_GT(j.at("ranks")[0].at("tp_comm_s").get<double>(), 0.0);
    EXPECT_EQ(j.at("ranks")[2].at("tp_comm_s").get<double>(), 0.0);
    ASSERT_EQ(j.at("stages").size(), 3U);
    EXPECT_EQ(j.at("stages")[1].at("first_block"), 2);
    EXPECT_EQ(j.at("stages")[2].at("micro_batches"), 2);
  }

  std::ifstream in(options.trace_path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::set<int> tids;
  std::set<std::string> names;
  int complete = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++complete;
    tids.insert(e.at("tid").get<int>());
    names.insert(e.at("name").get<std::string>());
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
  }
  EXPECT_EQ(tids, (std::set<int>{0, 1, 2, 3}));
  for (const char* n : {"F0", "B0", "F2", "DP", "OPT", "SF0", "RF0"}) {
    EXPECT_TRUE(names.count(n) == 1) << "no trace event named " << n;
  }
  // Two traced steps of: stage 0 ranks (3 F, 3 B, DP, OPT + transfer batches), ...: at least
  // every compute action of every rank.
  EXPECT_GE(complete, 2 * (2 * (6 + 2) + (6 + 2) + (4 + 2)));
}

TEST(ParallelTrainerTest, NonFiniteGradientStepIsSkippedAndReported) {
  const spec::Plan plan = MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                                    Pipeline({Stage(0, 2, true, false, {1}),
                                              Stage(2, 2, false, true, {2})},
                                             3, 2)},
                                   "nan-plan");
  train::ParallelTrainerOptions options = Quiet();
  options.metrics_path = TempPath("nan.jsonl");
  options.poison_gradient_step = 3;
  options.poison_rank = 2;
  auto summary = train::TrainParallel(TinyRun(6), plan, options);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(summary->skipped_steps, std::vector<int64_t>{3});
  const auto lines = ReadJsonLines(options.metrics_path);
  ASSERT_EQ(lines.size(), 6U);
  EXPECT_TRUE(lines[2].at("skipped").get<bool>());
  EXPECT_FALSE(lines[3].at("skipped").get<bool>());
  // The loss of the poisoned step is still the clean forward's; the NaN sits in the gradient.
  const std::vector<double>& serial = Oracle();
  for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(summary->losses[k], serial[k], kRelTol * serial[k]);
  // Every later step trains on from the parameters of step 2 and stays finite: no NaN leaked
  // into any replica's weights.
  for (size_t k = 3; k < 6; ++k) EXPECT_TRUE(std::isfinite(summary->losses[k]));
  EXPECT_NE(summary->losses[3], serial[3]);  // step 3's update really was left out
  EXPECT_LT(summary->losses[5], summary->losses[0]);
}

}  // namespace
}  // namespace motley::testing
