// Interleaved 1F1B under mpiexec (issue 12): the plans of interleaved_plans.h with one rank per
// process over the mpi communicator, each process driving parallel::ParallelRank directly, give the
// serial loop's per-step losses within 1e-5 relative over 20 steps (each process runs the serial
// oracle itself). CTest launches each plan with its rank count (tests/parallel/CMakeLists.txt).
#include <gtest/gtest.h>

#include "comm/mpi_world.h"
#include "interleaved_plans.h"

namespace motley::testing::interleaved {
namespace {

constexpr int64_t kSteps = 20;

void ExpectRankFollowsSerial(const spec::RunFile& run, const spec::Plan& plan) {
  ExpectValid(run, plan);
  auto layout = parallel::WorldLayout::Build(plan);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  auto world = comm::MpiWorld::Connect(nullptr, nullptr);
  ASSERT_TRUE(world.ok()) << world.status().message();
  ASSERT_EQ((*world)->size(), layout->size()) << "run this case with mpiexec -n " << layout->size();
  backend::SetBlasThreads(1);
  const Result<RankRun> mine = TrainRank(run, *layout, (*world)->rank(), **world);
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  ExpectSerialLosses(plan.source, mine->losses, SerialLosses(run));
}

TEST(MpiInterleavedTest, TwoChunksPerDeviceGroup) {  // 2 ranks
  ExpectRankFollowsSerial(TinyRun(kSteps), TwoChunks());
}
TEST(MpiInterleavedTest, UnevenChunksWithTensorParallelism) {  // 3 ranks
  ExpectRankFollowsSerial(SixBlockRun(kSteps), UnevenChunksTp());
}
TEST(MpiInterleavedTest, ReplicasOfDifferentChunkCounts) {  // 6 ranks
  ExpectRankFollowsSerial(SixBlockRun(kSteps), MixedChunkCounts());
}

}  // namespace
}  // namespace motley::testing::interleaved

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  motley::comm::MpiWorld::Finalize();
  return result;
}
