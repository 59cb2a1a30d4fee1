// The straggler loop under mpiexec (issue 14 acceptance, virtual clock): one rank per process over
// the mpi communicator, a world of every cluster device, the coordinator on rank 0 only (the
// trainer asks it there and broadcasts its decision), the same scenario injected into every
// process's own rank. CTest launches one case per test with its rank count
// (tests/elastic/CMakeLists.txt):
//  - six_devices (6 processes): the planner's plan leaves two devices idle; a straggler then
//    makes the loop adopt a plan that uses them, migrate and finish; losses equal the healthy run;
//  - eight_3x (8 processes, the tiny model): device 5 three times slower from step 10 to 40:
//    exactly one plan
//    adopted while slow and one after recovery, losses equal the serial loop's within 1e-5, and
//    every replica's state hash equal just before and just after each migration.
// Rank 0 checks; the references (healthy run on threads, serial loop) run there after the job.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "comm/mpi_world.h"
#include "elastic_test_util.h"
#include "train/trainer.h"

namespace motley::elastic {
namespace {

using testing::Models;
using testing::Quiet;

int LaunchedRank() {
  const char* v = std::getenv("OMPI_COMM_WORLD_RANK");
  return v != nullptr ? std::atoi(v) : 0;
}

// Trains `run` under `initial` with the scenario and the loop (on rank 0), one rank per process.
Result<train::ParallelTrainSummary> ElasticUnderMpi(const spec::RunFile& run, const Models& m,
                                                    const spec::Plan& initial,
                                                    const straggler::Scenario& scenario,
                                                    std::unique_ptr<ElasticLoop>* loop) {
  train::ParallelTrainerOptions options = Quiet(run);
  options.check_migrations = true;
  options.straggler_reports = true;  // every rank alike
  InjectScenario(scenario, run.cluster, &options);
  if (LaunchedRank() == 0) {
    *loop = std::make_unique<ElasticLoop>(run, m.predictor, initial, testing::LoopOptions(m));
    (*loop)->Attach(&options);
  }
  auto connect = [&](const comm::Emulation& e) -> Result<std::unique_ptr<comm::Communicator>> {
    return comm::MpiWorld::Connect(nullptr, nullptr, options.comm, e);
  };
  return train::TrainParallelProcess(run, initial, options, connect);
}

// Every replica's checksum before a migration equals every replica's after it.
void ExpectStateKept(const train::ParallelTrainSummary& s) {
  for (const train::MigrationRecord& rec : s.migrations) {
    ASSERT_FALSE(rec.before.empty()) << "step " << rec.step;
    ASSERT_FALSE(rec.after.empty()) << "step " << rec.step;
    for (const parallel::StateChecksum& c : rec.before) {
      EXPECT_EQ(c.hash, rec.before.front().hash) << "step " << rec.step;
    }
    for (const parallel::StateChecksum& c : rec.after) {
      EXPECT_EQ(c.hash, rec.before.front().hash) << "step " << rec.step;
    }
  }
}

TEST(MpiElasticTest, SixDevicesAPlanLeavingTwoIdleThenAStragglerUsesThem) {  // 6 processes
  constexpr int64_t kSteps = 24, kSlowFrom = 8;
  const spec::RunFile run = testing::RunOf(testing::kSix, kSteps);
  const Models m(run);
  const spec::Plan initial = testing::PlannedPlan(m);
  const std::vector<int> used = parallel::WorldLayout::Build(initial)->devices();
  ASSERT_LT(used.size(), 6U);
  std::unique_ptr<ElasticLoop> loop;
  auto elastic = ElasticUnderMpi(run, m, initial, testing::SlowDevice(0, 0.25, kSlowFrom), &loop);
  ASSERT_TRUE(elastic.ok()) << elastic.status().message();
  ASSERT_EQ(elastic->migrations.size(), 1U);  // every rank holds the same record
  EXPECT_EQ(elastic->steps, kSteps);
  ExpectStateKept(*elastic);
  if (LaunchedRank() != 0) return;
  ASSERT_EQ(loop->adopted().size(), 1U);
  bool uses_idle = false;
  for (int d : parallel::WorldLayout::Build(loop->adopted().front())->devices()) {
    uses_idle = uses_idle || std::find(used.begin(), used.end(), d) == used.end();
  }
  EXPECT_TRUE(uses_idle);
  auto healthy = train::TrainParallel(run, initial, Quiet(run));
  ASSERT_TRUE(healthy.ok()) << healthy.status().message();
  testing::ExpectSameLosses(elastic->losses, healthy->losses, "6 processes, idle ranks");
}

TEST(MpiElasticTest, EightRanksThreeTimesSlowFromTenToForty) {  // 8 processes
  constexpr int64_t kSteps = 50, kSlowFrom = 10, kSlowUntil = 40;
  const spec::RunFile run = testing::RunOf(testing::kEightTiny, kSteps);
  const Models m(run);
  const spec::Plan initial = testing::PlannedPlan(m);
  std::unique_ptr<ElasticLoop> loop;
  auto elastic = ElasticUnderMpi(run, m, initial,
                                 testing::SlowDevice(5, 1.0 / 3.0, kSlowFrom, kSlowUntil), &loop);
  ASSERT_TRUE(elastic.ok()) << elastic.status().message();
  ASSERT_EQ(elastic->migrations.size(), 2U);
  EXPECT_GT(elastic->migrations[0].step, kSlowFrom);
  EXPECT_LT(elastic->migrations[0].step, kSlowUntil);
  EXPECT_GT(elastic->migrations[1].step, kSlowUntil);
  ExpectStateKept(*elastic);
  if (LaunchedRank() != 0) return;
  // The serial oracle: the single-device loop's per-step losses (its metrics file).
  spec::TrainSpec serial = run.train;
  serial.metrics_path = (std::filesystem::temp_directory_path() /
                         ("motley_mpi_elastic_serial_" + std::to_string(::getpid()) + ".jsonl"))
                            .string();
  train::TrainerOptions serial_options;
  serial_options.out = nullptr;
  ASSERT_TRUE(train::Train(run.model, serial, serial_options).ok());
  std::vector<double> losses;
  std::ifstream in(serial.metrics_path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) losses.push_back(nlohmann::json::parse(line).at("loss"));
  }
  std::filesystem::remove(serial.metrics_path);
  testing::ExpectSameLosses(elastic->losses, losses, "8 processes, 3x from 10 to 40, vs serial");
}

}  // namespace
}  // namespace motley::elastic

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  motley::comm::MpiWorld::Finalize();
  return result;
}
