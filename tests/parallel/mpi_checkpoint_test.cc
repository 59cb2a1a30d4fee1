// Checkpoints under mpiexec (issue 4 deliverable 5, issue 6 deliverable 5): one rank per process
// over the mpi communicator (train::TrainParallelProcess) saving by messages
// (train/parallel_checkpoint.h). CTest launches each case with its rank count
// (tests/parallel/CMakeLists.txt):
//  - SigtermOnOneRank (4 ranks, TP 2 on both stages): checkpoints every 3 steps keeping 2; a real
//    SIGTERM raised in ONE process (rank 3) at step 10 stops every rank after step 10's save;
//    rank 0 resumes the checkpoint under another plan (ranks as threads) and serially: steps
//    11-20 equal the uninterrupted serial run within 1e-5 relative.
//  - ZeroOne (4 ranks, two ZeRO-1 replicas): moments sharded across processes are gathered
//    whole for the files; the resume matches likewise.
//  - UnwritableRoot (3 ranks): rank 0 cannot begin the save; every rank returns the same error
//    (no rank waits for a message that never comes).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/mpi_world.h"
#include "parallel_test_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/parallel_trainer.h"
#include "train/trainer.h"

namespace motley::testing {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kSteps = 20;
constexpr int64_t kStopStep = 10;
constexpr double kRelTol = 1e-5;

// One folder per test case, the same on every process (MOTLEY_TEST_TMP is the build's).
std::string SharedRoot(const std::string& name) {
  return (fs::path(MOTLEY_TEST_TMP) / name).string();
}

struct Launched {
  Result<train::ParallelTrainSummary> summary = Err("not run");
  int rank = -1;
};

// Runs `run` under `plan` with one rank per process; rank 0 first clears `root` (no other rank
// touches it before the first save, which needs rank 0). With --overwrite semantics, so that a
// rank checking the folder before rank 0 cleared it (a folder left by an earlier run of the test)
// does not refuse the fresh run. Rank 0 renames the old folder away before deleting it, so the
// others see it whole or not at all (a half-deleted checkpoint, its marker file gone first, is
// one that --overwrite rightly refuses).
Launched RunUnderMpi(const spec::RunFile& run, const spec::Plan& plan,
                     const train::ParallelTrainerOptions& given) {
  Launched out;
  train::ParallelTrainerOptions options = given;
  options.overwrite = true;
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (env_rank != nullptr && std::string(env_rank) == "0" && !run.train.checkpoint.dir.empty()) {
    std::error_code ec;
    const std::string stale = run.train.checkpoint.dir + ".stale";
    fs::remove_all(stale, ec);
    fs::rename(run.train.checkpoint.dir, stale, ec);
    fs::remove_all(stale, ec);
  }
  auto connect =
      [&](const comm::Emulation& emulation) -> Result<std::unique_ptr<comm::Communicator>> {
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world,
                            comm::MpiWorld::Connect(nullptr, nullptr, options.comm, emulation));
    out.rank = world->rank();
    return world;
  };
  out.summary = train::TrainParallelProcess(run, plan, options, connect);
  return out;
}

// losses[i] is step first_step + i; each must match the uninterrupted serial run.
void ExpectUninterrupted(const std::vector<double>& losses, int64_t first_step,
                         const std::string& what) {
  static const std::vector<double> want = SerialLosses(TinyRun(kSteps));
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  ExpectLossesContinue(want, losses, first_step, what, kRelTol);
}

// Rank 0: the checkpoint at `root` resumed under `plan` as threads, and serially.
void ExpectResumesMatch(const std::string& root, const spec::Plan& plan) {
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  options.resume = root;
  auto resumed = train::TrainParallel(TinyRun(kSteps), plan, options);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->first_step, kStopStep + 1);
  ASSERT_EQ(resumed->losses.size(), static_cast<size_t>(kSteps - kStopStep));
  ExpectUninterrupted(resumed->losses, resumed->first_step, "mpiexec save -> " + plan.source);

  train::TrainerOptions serial;
  serial.out = nullptr;
  serial.resume = root;
  auto s = train::Train(TinyModel(), TinyTrain(kSteps), serial);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->first_step, kStopStep + 1);
  ExpectUninterrupted(s->losses, s->first_step, "mpiexec save -> serial");
}

TEST(MpiCheckpointTest, SigtermOnOneRank) {  // 4 ranks
  const std::string root = SharedRoot("sigterm_one_rank");
  spec::RunFile run = TinyRun(kSteps);
  run.train.checkpoint.dir = root;
  run.train.checkpoint.every_steps = 3;
  run.train.checkpoint.keep_last = 2;
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  options.sigterm_at_step = kStopStep;
  options.sigterm_rank = 3;  // a real SIGTERM in one process; the others learn it at step 10
  const spec::Plan tp2_pp2 = MakePlan(
      {Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {2, 3})}, 4, 3)},
      "tp2-pp2");
  Launched l = RunUnderMpi(run, tp2_pp2, options);
  ASSERT_TRUE(l.summary.ok()) << l.summary.status().message();
  const train::ParallelTrainSummary& s = *l.summary;
  EXPECT_TRUE(s.stopped) << "rank " << l.rank;
  EXPECT_EQ(s.steps, kStopStep) << "rank " << l.rank;
  EXPECT_EQ(s.last_checkpoint, (fs::path(root) / train::CheckpointDirName(kStopStep)).string())
      << "rank " << l.rank;
  if (l.rank != 0) return;
  ExpectUninterrupted(s.losses, 1, "tp2-pp2 under mpiexec before the stop");
  // every 3 steps -> 3, 6, 9, then 10 on SIGTERM; only the last 2 are kept, no .tmp left.
  EXPECT_FALSE(fs::exists(fs::path(root) / train::CheckpointDirName(3)));
  EXPECT_FALSE(fs::exists(fs::path(root) / train::CheckpointDirName(6)));
  EXPECT_TRUE(fs::exists(fs::path(root) / train::CheckpointDirName(9)));
  EXPECT_FALSE(fs::exists(fs::path(root) / (train::CheckpointDirName(kStopStep) + ".tmp")));
  auto reader = train::CheckpointReader::Open(root);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  EXPECT_EQ(reader->metadata().step, kStopStep);
  EXPECT_TRUE(reader->has_optimizer_state());
  // Whole tensors: q_proj (NH*HS, C) = (32, 32), though each process held half of it.
  auto q = reader->ReadTensor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->size(), 32U * 32U);
  ExpectResumesMatch(
      root, MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 2, false, false, {1}),
                                Stage(3, 1, false, true, {2})},
                               4, 3)},
                     "pp3 uneven (threads)"));
}

TEST(MpiCheckpointTest, ZeroOne) {  // 4 ranks
  const std::string root = SharedRoot("zero1");
  spec::RunFile run = TinyRun(kSteps);
  run.train.checkpoint.dir = root;
  run.train.checkpoint.every_steps = kStopStep;
  spec::Plan zero1 =
      MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 2, 3),
                Pipeline({Stage(0, 1, true, false, {2}), Stage(1, 3, false, true, {3})}, 3, 2)},
               "zero1 dp2 of pp2");
  zero1.optimizer_sharding = spec::OptimizerSharding::kZero1;
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  options.sigterm_at_step = kStopStep;  // rank 0's process this time
  Launched l = RunUnderMpi(run, zero1, options);
  ASSERT_TRUE(l.summary.ok()) << l.summary.status().message();
  EXPECT_TRUE(l.summary->stopped);
  EXPECT_EQ(l.summary->steps, kStopStep);
  if (l.rank != 0) return;
  ExpectResumesMatch(
      root, MakePlan({Pipeline({Stage(0, 4, true, true, {0, 1})}, 4, 3)}, "tp2 (threads)"));
}

TEST(MpiCheckpointTest, UnwritableRoot) {  // 3 ranks
  spec::RunFile run = TinyRun(6);
  run.train.checkpoint.dir = "/dev/null/motley_checkpoints";  // below a file: cannot be created
  run.train.checkpoint.every_steps = 3;
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  options.comm.deadline_floor_s = 60.0;  // a hang would show as a timeout, not as this error
  Launched l = RunUnderMpi(
      run,
      MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1, 2})}, 4, 3)},
               "pp2 with tp2"),
      options);
  ASSERT_FALSE(l.summary.ok()) << "rank " << l.rank;
  const std::string& message = l.summary.status().message();
  EXPECT_NE(message.find("checkpoint of step 3"), std::string::npos) << message;
  EXPECT_NE(message.find("/dev/null/motley_checkpoints"), std::string::npos) << message;
  EXPECT_EQ(message.find("timed out"), std::string::npos) << message;
  if (l.rank == 0) std::printf("every rank fails alike; rank 0: %s\n", message.c_str());
}

}  // namespace
}  // namespace motley::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  motley::comm::MpiWorld::Finalize();
  return result;
}
