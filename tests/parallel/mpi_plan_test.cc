// Plan invariance under mpiexec (issue 4 acceptance): one rank per process over the mpi
// communicator (train::TrainParallelProcess, world rank r driving the plan's r-th device), the
// tiny model trained 20 steps; rank 0 compares every step's loss with the serial loop's within
// 1e-5 relative. CTest launches one plan per test with --gtest_filter and the plan's rank count
// (tests/parallel/CMakeLists.txt); a test run with the wrong count fails with a clear message.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "comm/mpi_world.h"
#include "parallel_test_util.h"
#include "train/parallel_trainer.h"

namespace motley::testing {
namespace {

constexpr int64_t kSteps = 20;
constexpr double kRelTol = 1e-5;

void ExpectSerialTrajectoryUnderMpi(const spec::Plan& plan, const spec::RunFile& run) {
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  int rank = -1;
  auto connect =
      [&](const comm::Emulation& emulation) -> Result<std::unique_ptr<comm::Communicator>> {
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world,
                            comm::MpiWorld::Connect(nullptr, nullptr, options.comm, emulation));
    rank = world->rank();
    return world;
  };
  auto summary = train::TrainParallelProcess(run, plan, options, connect);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  ASSERT_EQ(summary->losses.size(), static_cast<size_t>(kSteps));
  EXPECT_TRUE(summary->skipped_steps.empty());
  if (rank != 0) return;  // every rank holds the same losses; rank 0 checks them
  const std::vector<double> serial = SerialLosses(run);
  ASSERT_EQ(serial.size(), static_cast<size_t>(kSteps));
  double worst = 0.0;
  for (size_t k = 0; k < serial.size(); ++k) {
    const double rel = std::abs(summary->losses[k] - serial[k]) / std::abs(serial[k]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kRelTol) << plan.source << ": step " << k + 1 << " loss " << summary->losses[k]
                            << " vs serial " << serial[k];
  }
  EXPECT_LT(summary->losses.back(), summary->losses.front() - 0.5);
  std::printf("%s under mpiexec: %d processes, worst relative loss difference to serial: %.3g\n",
              plan.source.c_str(), summary->ranks, worst);
}

TEST(MpiPlanInvarianceTest, PureDataParallelWithUnevenBatches) {  // 3 ranks
  ExpectSerialTrajectoryUnderMpi(MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                                           Pipeline({Stage(0, 4, true, true, {1})}, 1, 4),
                                           Pipeline({Stage(0, 4, true, true, {2})}, 2, 1)},
                                          "dp3-uneven"),
                                 TinyRun(kSteps));
}

TEST(MpiPlanInvarianceTest, PurePipelineWithUnevenBlocks) {  // 3 ranks
  ExpectSerialTrajectoryUnderMpi(
      MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 2, false, false, {1}),
                          Stage(3, 1, false, true, {2})},
                         4, 3)},
               "pp3-uneven-1f1b"),
      TinyRun(kSteps));
}

TEST(MpiPlanInvarianceTest, TensorAndPipelineParallel) {  // 4 ranks
  ExpectSerialTrajectoryUnderMpi(
      MakePlan(
          {Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {2, 3})}, 4, 3)},
          "tp2-pp2"),
      TinyRun(kSteps));
}

TEST(MpiPlanInvarianceTest, ReplicasWithDifferentStageCounts) {  // 3 ranks
  ExpectSerialTrajectoryUnderMpi(
      MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 3, false, true, {1})}, 4, 2),
                Pipeline({Stage(0, 4, true, true, {4})}, 1, 4)},
               "mixed-stages"),
      TinyRun(kSteps));
}

TEST(MpiPlanInvarianceTest, ReplicaOnEmulatedSlowDevices) {  // 3 ranks, virtual clocks
  ExpectSerialTrajectoryUnderMpi(
      MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                Pipeline({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})}, 3, 2)},
               "emulated-slow-replica"),
      TinyEmulatedRun(kSteps));
}

// Activation recompute (issue 12): each mode, and a mix per stage, under mpiexec.
TEST(MpiPlanInvarianceTest, FullRecomputeOnAnUnevenPipeline) {  // 3 ranks
  spec::Plan plan =
      MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 2, false, false, {1}),
                          Stage(3, 1, false, true, {2})},
                         4, 3)},
               "pp3-uneven-full");
  plan.SetRecompute(spec::Recompute::kFull);
  ExpectSerialTrajectoryUnderMpi(plan, TinyRun(kSteps));
}

TEST(MpiPlanInvarianceTest, SelectiveRecomputeWithTensorAndPipelineParallel) {  // 4 ranks
  spec::Plan plan = MakePlan(
      {Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {2, 3})}, 4, 3)},
      "tp2-pp2-selective");
  plan.SetRecompute(spec::Recompute::kSelective);
  ExpectSerialTrajectoryUnderMpi(plan, TinyRun(kSteps));
}

TEST(MpiPlanInvarianceTest, RecomputeMixedPerStage) {  // 3 ranks
  spec::Plan plan =
      MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 3, false, true, {1})}, 4, 2),
                Pipeline({Stage(0, 4, true, true, {4})}, 1, 4)},
               "mixed-stages-recompute");
  plan.pipelines[0].stages[0].recompute = spec::Recompute::kSelective;
  plan.pipelines[0].stages[1].recompute = spec::Recompute::kFull;
  ExpectSerialTrajectoryUnderMpi(plan, TinyRun(kSteps));
}

}  // namespace
}  // namespace motley::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  motley::comm::MpiWorld::Finalize();
  return result;
}
