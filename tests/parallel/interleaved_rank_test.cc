// Interleaved 1F1B in the runtime (issue 12): ranks holding several model chunks (virtual stages
// chunk * p + group, spec::PipelinePlan) train with the serial single-device loop's per-step losses
// within 1e-5 relative over 20 steps, with every rank a thread over the `local` communicator and
// parallel::ParallelRank driven directly (interleaved_plans.h): v = 2 and 3, uneven chunk sizes
// with tensor parallelism, and replicas of different v. The validation forward gives the
// unpartitioned model's loss. plan_invariance_test.cc trains them through the parallel trainer;
// mpi_interleaved_test.cc runs them one rank per process.
#include <cmath>
#include <thread>

#include <gtest/gtest.h>

#include "comm/local_world.h"
#include "interleaved_plans.h"

namespace motley::testing::interleaved {
namespace {

constexpr int64_t kSteps = 20;

// Trains `plan` with one thread per rank; every rank's result.
std::vector<RankRun> TrainThreads(const spec::RunFile& run, const spec::Plan& plan) {
  auto layout = parallel::WorldLayout::Build(plan);
  EXPECT_TRUE(layout.ok()) << layout.status().message();
  if (!layout.ok()) return {};
  backend::SetBlasThreads(1);
  auto world = comm::LocalWorld::Create(layout->size());
  std::vector<Result<RankRun>> runs(static_cast<size_t>(layout->size()), Err("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < layout->size(); ++r) {
    threads.emplace_back([&, r] {
      auto comm = world->Connect(r);
      Result<RankRun>& mine = runs[static_cast<size_t>(r)];
      mine = comm.ok() ? TrainRank(run, *layout, r, **comm) : Result<RankRun>(comm.status());
      if (!mine.ok()) world->Abort(mine.status().message());
    });
  }
  for (auto& t : threads) t.join();
  std::vector<RankRun> out;
  for (const Result<RankRun>& one : runs) {
    EXPECT_TRUE(one.ok()) << plan.source << ": " << one.status().message();
    if (one.ok()) out.push_back(*one);
  }
  return out;
}

// Trains `plan` and compares every rank's steps with the serial loop, and the validation loss with
// the single-device plan's.
void ExpectSerialTrajectory(const spec::RunFile& run, const spec::Plan& plan) {
  ExpectValid(run, plan);
  const std::vector<double> serial = SerialLosses(run);
  ASSERT_EQ(serial.size(), static_cast<size_t>(run.train.steps));
  const std::vector<RankRun> ranks = TrainThreads(run, plan);
  ASSERT_FALSE(ranks.empty());
  for (const RankRun& r : ranks) EXPECT_EQ(r.losses, ranks.front().losses) << "ranks disagree";
  ExpectSerialLosses(plan.source, ranks.front().losses, serial);
  // Validation before training: the unpartitioned model on one device sees the same batch.
  spec::RunFile one_step = run;
  one_step.train.steps = 1;
  const spec::Plan single = MakePlan(
      {Pipeline({Stage(0, run.model.num_blocks, true, true, {0})}, 1, run.train.global_batch)},
      "single");
  const std::vector<RankRun> whole = TrainThreads(one_step, single);
  ASSERT_EQ(whole.size(), 1U);
  for (const RankRun& r : ranks) {
    EXPECT_NEAR(r.validation_sum, whole[0].validation_sum,
                1e-6 * std::abs(whole[0].validation_sum));
  }
}

TEST(InterleavedRankTest, TwoChunksPerDeviceGroup) {
  ExpectSerialTrajectory(TinyRun(kSteps), TwoChunks());
}
TEST(InterleavedRankTest, ThreeChunksPerDeviceGroup) {
  ExpectSerialTrajectory(SixBlockRun(kSteps), ThreeChunks());
}
TEST(InterleavedRankTest, UnevenChunksWithTensorParallelism) {
  ExpectSerialTrajectory(SixBlockRun(kSteps), UnevenChunksTp());
}
TEST(InterleavedRankTest, ReplicasOfDifferentChunkCounts) {
  ExpectSerialTrajectory(SixBlockRun(kSteps), MixedChunkCounts());
}

}  // namespace
}  // namespace motley::testing::interleaved
