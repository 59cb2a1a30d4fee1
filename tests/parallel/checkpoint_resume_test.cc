// Checkpoint acceptance (issue 4): a run saved at step 10 under plan A and resumed under a
// different plan B gives the losses of steps 11-20 of an uninterrupted run within 1e-5 relative
// (fp32); likewise serial save -> parallel resume and parallel save -> serial resume. The saves
// are triggered by a real SIGTERM (raised by the trainers' test hook and caught by their handler),
// and `every_steps` / `keep_last` are checked on the folders left behind. Ranks are threads.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "parallel_test_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/parallel_trainer.h"
#include "train/trainer.h"

namespace motley::testing {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kSteps = 20;
constexpr int64_t kSaveStep = 10;
constexpr double kRelTol = 1e-5;

const std::vector<double>& Uninterrupted() {
  static const std::vector<double> losses = SerialLosses(TinyRun(kSteps));
  return losses;
}

// Plan A: two stages, the second with TP 2, four micro-batches of 3.
spec::Plan PlanA() {
  return MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 3, false, true, {1, 2})},
                            4, 3)},
                  "A: pp2 with tp2 on stage 1");
}

// Plan B: two replicas of different layouts: one stage with TP 2 (6 samples), and two stages
// split 2 + 2 without TP (6 samples in micro-batches of 2).
spec::Plan PlanB() {
  return MakePlan({Pipeline({Stage(0, 4, true, true, {0, 1})}, 2, 3),
                   Pipeline({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})}, 3, 2)},
                  "B: dp2 of tp2 and pp2");
}

// Plan C: three uneven stages.
spec::Plan PlanC() {
  return MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 2, false, false, {1}),
                             Stage(3, 1, false, true, {2})},
                            4, 3)},
                  "C: pp3 uneven");
}

train::ParallelTrainerOptions Quiet() {
  train::ParallelTrainerOptions o;
  o.out = nullptr;
  return o;
}

// losses[i] is step first_step + i; each must match the uninterrupted run.
void ExpectUninterrupted(const std::vector<double>& losses, int64_t first_step,
                         const std::string& what) {
  const std::vector<double>& want = Uninterrupted();
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  ExpectLossesContinue(want, losses, first_step, what, kRelTol);
}

// Plan A, checkpoints every 3 steps keeping 2, SIGTERM at step 10: stops after saving step 10.
std::string SaveUnderPlanA() {
  const std::string dir = TempPath("ckpt_plan_a");
  spec::RunFile run = TinyRun(kSteps);
  run.train.checkpoint.dir = dir;
  run.train.checkpoint.every_steps = 3;
  run.train.checkpoint.keep_last = 2;
  train::ParallelTrainerOptions options = Quiet();
  options.sigterm_at_step = kSaveStep;
  auto summary = train::TrainParallel(run, PlanA(), options);
  EXPECT_TRUE(summary.ok()) << summary.status().message();
  if (!summary.ok()) return dir;
  EXPECT_TRUE(summary->stopped);
  EXPECT_EQ(summary->steps, kSaveStep);
  EXPECT_EQ(summary->last_checkpoint,
            (fs::path(dir) / train::CheckpointDirName(kSaveStep)).string());
  ExpectUninterrupted(summary->losses, 1, "plan A before the stop");
  // every 3 steps -> 3, 6, 9, then 10 on SIGTERM; only the last 2 are kept.
  EXPECT_FALSE(fs::exists(fs::path(dir) / train::CheckpointDirName(3)));
  EXPECT_FALSE(fs::exists(fs::path(dir) / train::CheckpointDirName(6)));
  EXPECT_TRUE(fs::exists(fs::path(dir) / train::CheckpointDirName(9)));
  EXPECT_TRUE(fs::exists(fs::path(dir) / train::CheckpointDirName(kSaveStep)));
  return dir;
}

TEST(CheckpointResumeTest, SaveUnderPlanAResumeUnderPlanB) {
  const std::string dir = SaveUnderPlanA();
  auto latest = train::FindLatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status().message();
  auto reader = train::CheckpointReader::Open(*latest);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  EXPECT_EQ(reader->metadata().step, kSaveStep);
  EXPECT_EQ(reader->metadata().consumed_samples, kSaveStep * 12);
  EXPECT_TRUE(reader->has_optimizer_state());
  EXPECT_FALSE(reader->metadata().plan.is_null());

  train::ParallelTrainerOptions options = Quiet();
  options.resume = dir;  // the ROOT: its latest checkpoint
  auto resumed = train::TrainParallel(TinyRun(kSteps), PlanB(), options);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->first_step, kSaveStep + 1);
  ASSERT_EQ(resumed->losses.size(), static_cast<size_t>(kSteps - kSaveStep));
  ExpectUninterrupted(resumed->losses, resumed->first_step, "plan A -> plan B");

  // The same checkpoint also resumes serially.
  train::TrainerOptions serial;
  serial.out = nullptr;
  serial.resume = dir;
  auto s = train::Train(TinyModel(), TinyTrain(kSteps), serial);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->first_step, kSaveStep + 1);
  ASSERT_EQ(s->losses.size(), static_cast<size_t>(kSteps - kSaveStep));
  ExpectUninterrupted(s->losses, s->first_step, "plan A -> serial");
}

// ZeRO-1 on both sides: two replicas split 2 + 2 and 1 + 3 (every layer group uniform, so every
// tensor's moments are sharded) save at step 10 (the moments are gathered whole for the files)
// and resume under the same plan with ZeRO-1 again (the loaded moments are sharded at the next
// step) and under plan C without it.
TEST(CheckpointResumeTest, ZeroOneSaveAndResume) {
  const std::string dir = TempPath("ckpt_zero1");
  spec::RunFile run = TinyRun(kSteps);
  run.train.checkpoint.dir = dir;
  run.train.checkpoint.every_steps = kSaveStep;
  spec::Plan b =
      MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 2, 3),
                Pipeline({Stage(0, 1, true, false, {2}), Stage(1, 3, false, true, {3})}, 3, 2)},
               "zero1 dp2 of pp2");
  b.optimizer_sharding = spec::OptimizerSharding::kZero1;
  train::ParallelTrainerOptions options = Quiet();
  options.sigterm_at_step = kSaveStep;
  auto first = train::TrainParallel(run, b, options);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->steps, kSaveStep);
  ExpectUninterrupted(first->losses, 1, "zero1 before the stop");

  for (const bool zero1 : {true, false}) {
    train::ParallelTrainerOptions resume = Quiet();
    resume.resume = dir;
    spec::Plan next = zero1 ? b : PlanC();
    auto resumed = train::TrainParallel(TinyRun(kSteps), next, resume);
    ASSERT_TRUE(resumed.ok()) << resumed.status().message();
    EXPECT_EQ(resumed->first_step, kSaveStep + 1);
    ExpectUninterrupted(resumed->losses, resumed->first_step,
                        zero1 ? "zero1 -> zero1" : "zero1 -> plan C");
  }
}

// Interleaved 1F1B: a device group's writer saves all its chunks' tensors (one file pair per
// group). Two chunks per group, group 0 a TP-2 group, beside a plain replica, under ZeRO-1, save
// at step 10 and resume under the same plan and under plan C; both continue the uninterrupted run.
TEST(CheckpointResumeTest, InterleavedSaveAndResume) {
  const std::string dir = TempPath("ckpt_interleaved");
  spec::RunFile run = TinyRun(kSteps);
  run.train.checkpoint.dir = dir;
  run.train.checkpoint.every_steps = kSaveStep;
  spec::Plan v2 =
      MakePlan({Pipeline({Stage(0, 1, true, false, {0, 1}), Stage(1, 1, false, false, {2}),
                          Stage(2, 1, false, false, {0, 1}), Stage(3, 1, false, true, {2})},
                         2, 3),
                Pipeline({Stage(0, 2, true, false, {3}), Stage(2, 2, false, true, {4})}, 3, 2)},
               "interleaved v2 with tp2 + pp2, zero1");
  v2.pipelines[0].chunks = 2;
  v2.optimizer_sharding = spec::OptimizerSharding::kZero1;
  train::ParallelTrainerOptions options = Quiet();
  options.sigterm_at_step = kSaveStep;
  auto first = train::TrainParallel(run, v2, options);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->steps, kSaveStep);
  ExpectUninterrupted(first->losses, 1, "interleaved before the stop");
  auto latest = train::FindLatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status().message();
  EXPECT_TRUE(fs::exists(fs::path(*latest) / "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(*latest) / "model-00002-of-00002.safetensors"));

  for (const spec::Plan& next : {v2, PlanC()}) {
    train::ParallelTrainerOptions resume = Quiet();
    resume.resume = dir;
    auto resumed = train::TrainParallel(TinyRun(kSteps), next, resume);
    ASSERT_TRUE(resumed.ok()) << resumed.status().message();
    EXPECT_EQ(resumed->first_step, kSaveStep + 1);
    ExpectUninterrupted(resumed->losses, resumed->first_step, "interleaved -> " + next.source);
  }
}

TEST(CheckpointResumeTest, SerialSaveOnSigtermResumeUnderPlanC) {
  const std::string dir = TempPath("ckpt_serial");
  spec::TrainSpec train = TinyTrain(kSteps);
  train.checkpoint.dir = dir;
  train.checkpoint.every_steps = 0;  // only at the end and on SIGTERM
  train::TrainerOptions options;
  options.out = nullptr;
  options.sigterm_at_step = kSaveStep;
  auto saved = train::Train(TinyModel(), train, options);
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  EXPECT_TRUE(saved->stopped);
  EXPECT_EQ(saved->steps, kSaveStep);
  ExpectUninterrupted(saved->losses, 1, "serial before the stop");
  const std::string folder = (fs::path(dir) / train::CheckpointDirName(kSaveStep)).string();
  EXPECT_EQ(saved->last_checkpoint, folder);

  train::ParallelTrainerOptions popts = Quiet();
  popts.resume = folder;
  auto resumed = train::TrainParallel(TinyRun(kSteps), PlanC(), popts);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->first_step, kSaveStep + 1);
  ASSERT_EQ(resumed->losses.size(), static_cast<size_t>(kSteps - kSaveStep));
  ExpectUninterrupted(resumed->losses, resumed->first_step, "serial -> plan C");
}

TEST(CheckpointResumeTest, ResumeErrors) {
  // A missing folder, and a checkpoint that already reached train.steps.
  train::TrainerOptions options;
  options.out = nullptr;
  options.resume = TempPath("no_such_checkpoint");
  auto missing = train::Train(TinyModel(), TinyTrain(kSteps), options);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_such_checkpoint"), std::string::npos);

  const std::string dir = TempPath("ckpt_short");
  spec::TrainSpec train = TinyTrain(2);
  train.checkpoint.dir = dir;
  options.resume.clear();
  ASSERT_TRUE(train::Train(TinyModel(), train, options).ok());
  options.resume = dir;
  auto done = train::Train(TinyModel(), train, options);
  ASSERT_FALSE(done.ok());
  EXPECT_NE(done.status().message().find("nothing left to train"), std::string::npos)
      << done.status().message();
}

}  // namespace
}  // namespace motley::testing
