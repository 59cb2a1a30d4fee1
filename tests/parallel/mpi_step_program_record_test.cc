// The recording test under mpiexec (one rank per process over the mpi communicator): each process
// wraps its world in the recording communicator, runs ParallelRank::Create and one Step of the
// plan on the CPU backend, and checks its own log against its RankStep of the step program entry
// for entry (step_program_recording.h). CTest launches each plan with its rank count
// (tests/parallel/CMakeLists.txt); a wrong count fails with a clear message.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "comm/mpi_world.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "step_program_recording.h"

namespace motley::parallel {
namespace {

using recording::Log;
using recording::RecordingCommunicator;

void ExpectRankFollowsTheProgram(const spec::Plan& plan, const std::vector<int>& world_devices) {
  const spec::RunFile run = testing::TinyRun(1);
  auto connected = comm::MpiWorld::Connect(nullptr, nullptr);
  ASSERT_TRUE(connected.ok()) << connected.status().message();
  ASSERT_EQ((*connected)->size(), static_cast<int>(world_devices.size()))
      << "run this case with mpiexec -n " << world_devices.size();
  const int r = (*connected)->rank();
  backend::SetBlasThreads(1);
  Result<WorldLayout> layout = WorldLayout::Build(plan, world_devices);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  Log log;
  RecordingCommunicator world(std::move(*connected), &log, "", true);
  backend::CpuBackend backend(1, r);
  auto rank = ParallelRank::Create(*layout, r, run.model, run.train, backend, world);
  ASSERT_TRUE(rank.ok()) << rank.status().message();
  recording::KeepSetupSplits(log);
  log.current = &log.step;
  int64_t samples = 0;
  if (!layout->rank(r).idle()) samples = layout->pipeline_of(r).samples_per_step();
  const std::vector<int32_t> tokens(static_cast<size_t>(samples * run.train.seq_len), 1);
  auto result = (*rank)->Step(1, tokens, tokens);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const sched::StepProgram program = recording::ProgramOf(plan, world_devices);
  EXPECT_FALSE(log.step.empty());
  EXPECT_EQ(recording::CompareRank(log, program, r, testing::TinyModel().num_blocks + 2), "");
}

TEST(MpiStepProgramRecordTest, ZeroOneDataAndPipelineParallel) {  // 4 ranks
  ExpectRankFollowsTheProgram(recording::Zero1(recording::TwoByTwo()), {0, 1, 2, 3});
}

TEST(MpiStepProgramRecordTest, GPipeWithAnIdleRank) {  // 5 ranks, device 5 idle
  ExpectRankFollowsTheProgram(recording::GPipe(recording::TwoByTwo()), {0, 1, 2, 3, 5});
}

TEST(MpiStepProgramRecordTest, ZeroOneUnevenChunks) {  // 3 ranks
  ExpectRankFollowsTheProgram(recording::Zero1(recording::ThreeReplicas()), {0, 1, 2});
}

TEST(MpiStepProgramRecordTest, MixedTpAcrossPipelinesOfDifferentDepth) {  // 7 ranks
  ExpectRankFollowsTheProgram(recording::MixedDepths(), {0, 1, 2, 4, 5, 6, 7});
}

TEST(MpiStepProgramRecordTest, InterleavedWithTensorParallelism) {  // 5 ranks
  ExpectRankFollowsTheProgram(recording::InterleavedTp(), {0, 1, 2, 3, 4});
}

TEST(MpiStepProgramRecordTest, TensorParallelismWithRecompute) {  // 4 ranks
  ExpectRankFollowsTheProgram(recording::TpWithRecompute(), {0, 1, 2, 3});
}

}  // namespace
}  // namespace motley::parallel

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  motley::comm::MpiWorld::Finalize();
  return result;
}
