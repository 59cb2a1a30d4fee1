// Plan switches under mpiexec (issue 6 part 1 acceptance): one rank per process over the mpi
// communicator (train::TrainParallelProcess), the tiny model trained 20 steps with a switch of
// plan at a step boundary; the parameters and AdamW moments move between processes over MPI
// point-to-point. Rank 0 checks the losses against the serial loop (1e-5 relative) and the
// per-replica state checksums before and after each migration. CTest launches one case per test
// with --gtest_filter and its rank count (tests/parallel/CMakeLists.txt).
#include <gtest/gtest.h>

#include "comm/mpi_world.h"
#include "plan_switch_test_util.h"

namespace motley::testing {
namespace {

void ExpectSwitchedRunUnderMpi(const SwitchCase& c) {
  const spec::RunFile run = TinyRun(kSwitchSteps);
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  options.plan_switches = c.switches;
  options.check_migrations = true;
  int rank = -1;
  auto connect =
      [&](const comm::Emulation& emulation) -> Result<std::unique_ptr<comm::Communicator>> {
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world,
                            comm::MpiWorld::Connect(nullptr, nullptr, options.comm, emulation));
    rank = world->rank();
    return world;
  };
  auto summary = train::TrainParallelProcess(run, c.start, options, connect);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  ASSERT_EQ(summary->migrations.size(), c.switches.size());
  if (rank != 0) return;  // every rank holds the same record; rank 0 checks it
  ExpectSwitchedRunMatches(c, *summary, SerialLosses(run));
}

TEST(MpiPlanSwitchTest, DataParallelToUnevenPipelineAndBack) {  // 3 ranks
  SwitchCase c = DpToPpUneven();
  c.switches.push_back({15, c.start});
  ExpectSwitchedRunUnderMpi(c);
}

TEST(MpiPlanSwitchTest, TensorParallelDegreesChange) {  // 4 ranks
  ExpectSwitchedRunUnderMpi(TpChange());
}

TEST(MpiPlanSwitchTest, ADroppedDeviceIdlesAndRejoins) {  // 4 ranks
  ExpectSwitchedRunUnderMpi(DropAndRejoin());
}

}  // namespace
}  // namespace motley::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  motley::comm::MpiWorld::Finalize();
  return result;
}
