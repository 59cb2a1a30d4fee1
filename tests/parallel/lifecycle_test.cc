// The run life cycle (docs/formats/checkpoint.md), in both training loops: the serial loop
// (train::Train) and the parallel loop (train::TrainParallel, ranks as threads). A resume after
// raising the step count names no setting and says how the learning rate continues; a changed
// setting is named; the metrics file holds every step once after a resume, with a resume record;
// a first SIGINT saves and stops (a second aborts: a child process); a fresh run into a folder
// with checkpoints is refused unless it overwrites them; a checkpoint of another model is
// refused naming the field; --init-from starts from the weights; `eval` of a checkpoint gives
// the loop's own validation loss and writes nothing.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/file_util.h"
#include "parallel_test_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/evaluate.h"
#include "train/parallel_trainer.h"
#include "train/token_file.h"
#include "train/trainer.h"
#include "train/trainer_checkpoint.h"

namespace motley::testing {
namespace {

namespace fs = std::filesystem;

// What one run of either loop reports.
struct Outcome {
  Status status;
  std::string out;  // what it printed
  int64_t first_step = 0;
  int64_t steps = 0;
  bool stopped = false;
  std::string stop_signal;
  std::string last_checkpoint;
  std::optional<double> final_val_loss;
};

struct RunOptions {
  std::string resume, init_from;
  bool overwrite = false;
  int64_t signal_at_step = 0;
  int signal = SIGTERM;
};
RunOptions Resume(const std::string& dir) {
  RunOptions o;
  o.resume = dir;
  return o;
}
RunOptions InitFrom(const std::string& dir) {
  RunOptions o;
  o.init_from = dir;
  return o;
}

std::string ReadStream(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  return text;
}

// The parallel runs' plan: two stages, the second with TP 2.
spec::Plan TwoStagePlan() {
  return MakePlan(
      {Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1, 2})}, 4, 3)},
      "pp2 tp2");
}

Outcome RunLoop(bool parallel, const spec::RunFile& run, const RunOptions& o) {
  Outcome outcome;
  std::FILE* out = std::tmpfile();
  if (parallel) {
    train::ParallelTrainerOptions options;
    options.out = out;
    options.resume = o.resume;
    options.init_from = o.init_from;
    options.overwrite = o.overwrite;
    options.sigterm_at_step = o.signal_at_step;
    options.test_signal = o.signal;
    auto s = train::TrainParallel(run, TwoStagePlan(), options);
    outcome.status = s.status();
    if (s.ok()) {
      outcome.first_step = s->first_step;
      outcome.steps = s->steps;
      outcome.stopped = s->stopped;
      outcome.stop_signal = s->stop_signal;
      outcome.last_checkpoint = s->last_checkpoint;
    }
  } else {
    train::TrainerOptions options;
    options.out = out;
    options.resume = o.resume;
    options.init_from = o.init_from;
    options.overwrite = o.overwrite;
    options.sigterm_at_step = o.signal_at_step;
    options.test_signal = o.signal;
    auto s = train::Train(run.model, run.train, options);
    outcome.status = s.status();
    if (s.ok()) {
      outcome.first_step = s->first_step;
      outcome.steps = s->steps;
      outcome.stopped = s->stopped;
      outcome.stop_signal = s->stop_signal;
      outcome.last_checkpoint = s->last_checkpoint;
      outcome.final_val_loss = s->final_val_loss;
    }
  }
  outcome.out = ReadStream(out);
  std::fclose(out);
  return outcome;
}

class LifeCycle : public ::testing::TestWithParam<bool> {
 protected:
  bool parallel() const { return GetParam(); }
  std::string Name(const std::string& what) const {
    return what + (parallel() ? "_parallel" : "_serial");
  }
  // The tiny run with checkpoints every `every` steps into a fresh folder and a metrics file.
  spec::RunFile Run(int64_t steps, int64_t every, const std::string& name) {
    spec::RunFile run = TinyRun(steps);
    run.train.checkpoint.dir = TempPath(Name(name) + "_ckpt");
    run.train.checkpoint.every_steps = every;
    run.train.checkpoint.keep_last = 5;
    run.train.metrics_path = TempPath(Name(name) + ".jsonl");
    return run;
  }
};

TEST_P(LifeCycle, ResumeAfterRaisingStepsNamesNoSettingAndStatesTheSchedule) {
  spec::RunFile run = Run(6, 3, "raise");
  fs::remove_all(run.train.checkpoint.dir);
  ASSERT_TRUE(RunLoop(parallel(), run, {}).status.ok());
  run.train.steps = 10;
  Outcome resumed = RunLoop(parallel(), run, Resume(run.train.checkpoint.dir));
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
  EXPECT_EQ(resumed.first_step, 7);
  EXPECT_NE(resumed.out.find("resumed from " + run.train.checkpoint.dir + "/step-00000006"),
            std::string::npos)
      << resumed.out;
  EXPECT_EQ(resumed.out.find("note:"), std::string::npos) << resumed.out;
  EXPECT_EQ(resumed.out.find("differ"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("learning rate: this run's schedule applies from step 7 (3 warm-up "
                             "steps, then cosine from lr 0.003 to min_lr 0.0003 at step 10; the "
                             "checkpoint's run had 3 warm-up steps, then cosine from lr 0.003 to "
                             "min_lr 0.0003 at step 6)"),
            std::string::npos)
      << resumed.out;

  // The same settings and length: the schedule continues unchanged; a changed setting is named.
  run.train.steps = 12;
  run.train.optimizer.lr = 1e-3F;
  Outcome changed = RunLoop(parallel(), run, Resume(run.train.checkpoint.dir));
  ASSERT_TRUE(changed.status.ok()) << changed.status.message();
  EXPECT_NE(changed.out.find("note: train.optimizer.lr: 0.003 in the checkpoint's run, 0.001 now"),
            std::string::npos)
      << changed.out;
}

TEST_P(LifeCycle, MetricsAfterAResumeHoldEveryStepOnce) {
  spec::RunFile run = Run(8, 4, "metrics");
  fs::remove_all(run.train.checkpoint.dir);
  ASSERT_TRUE(RunLoop(parallel(), run, {}).status.ok());
  // A crash after step 8 before its checkpoint: the metrics hold steps 5-8 that are lost.
  fs::remove_all(run.train.checkpoint.dir + "/step-00000008");
  ASSERT_TRUE(WriteFileAtomic(run.train.checkpoint.dir + "/latest", "step-00000004\n").ok());
  run.train.steps = 10;
  Outcome resumed = RunLoop(parallel(), run, Resume(run.train.checkpoint.dir));
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
  std::vector<int64_t> steps;
  int resumes = 0;
  for (const nlohmann::json& j : ReadJsonLines(run.train.metrics_path)) {
    EXPECT_TRUE(j.contains("timestamp") && j.contains("elapsed_s")) << j.dump();
    if (j.contains("event")) {
      ++resumes;
      EXPECT_EQ(j["event"], "resume");
      EXPECT_EQ(j["step"], 4);
      EXPECT_EQ(j["from"], run.train.checkpoint.dir + "/step-00000004");
      EXPECT_EQ(steps.size(), 4U);
      continue;
    }
    steps.push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(resumes, 1);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
}

TEST_P(LifeCycle, AFirstSigintSavesAndStops) {
  spec::RunFile run = Run(8, 0, "sigint");
  fs::remove_all(run.train.checkpoint.dir);
  RunOptions signal;
  signal.signal_at_step = 3;
  signal.signal = SIGINT;
  Outcome o = RunLoop(parallel(), run, signal);
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.stop_signal, "SIGINT");
  EXPECT_EQ(o.steps, 3);
  EXPECT_EQ(o.last_checkpoint, run.train.checkpoint.dir + "/step-00000003");
  EXPECT_NE(o.out.find("step 3: SIGINT: stopped after saving"), std::string::npos) << o.out;
  EXPECT_EQ(*train::LatestStep(run.train.checkpoint.dir), 3);
  EXPECT_TRUE(train::CheckpointReader::OpenFor(run.train.checkpoint.dir, run.model).ok());
}

TEST_P(LifeCycle, AFreshRunIntoAFolderWithCheckpointsIsRefusedUnlessItOverwrites) {
  spec::RunFile run = Run(4, 2, "fresh");
  fs::remove_all(run.train.checkpoint.dir);
  ASSERT_TRUE(RunLoop(parallel(), run, {}).status.ok());
  run.train.steps = 3;
  Outcome refused = RunLoop(parallel(), run, {});
  ASSERT_FALSE(refused.status.ok());
  EXPECT_EQ(refused.status.code(), StatusCode::kFailedPrecondition);
  for (const char* part :
       {"already holds checkpoints (newest: step-00000004)", "--resume", "--overwrite"}) {
    EXPECT_NE(refused.status.message().find(part), std::string::npos) << refused.status.message();
  }
  EXPECT_EQ(*train::LatestStep(run.train.checkpoint.dir), 4);  // untouched
  RunOptions overwrite;
  overwrite.overwrite = true;
  Outcome over = RunLoop(parallel(), run, overwrite);
  ASSERT_TRUE(over.status.ok()) << over.status.message();
  EXPECT_NE(over.out.find("--overwrite: removed 2 checkpoint folder(s)"), std::string::npos)
      << over.out;
  EXPECT_EQ(*train::LatestStep(run.train.checkpoint.dir), 3);
  EXPECT_FALSE(fs::exists(run.train.checkpoint.dir + "/step-00000004"));
}

TEST_P(LifeCycle, ACheckpointOfAnotherModelIsRefusedNamingTheField) {
  spec::RunFile run = Run(3, 0, "model");
  fs::remove_all(run.train.checkpoint.dir);
  ASSERT_TRUE(RunLoop(parallel(), run, {}).status.ok());
  spec::RunFile other = run;
  other.model.rope_theta = 500000.0F;
  other.train.steps = 5;
  for (const bool init : {false, true}) {
    RunOptions o;
    (init ? o.init_from : o.resume) = run.train.checkpoint.dir;
    if (init) other.train.checkpoint.dir = TempPath(Name("model_other"));
    Outcome r = RunLoop(parallel(), other, o);
    ASSERT_FALSE(r.status.ok()) << (init ? "init-from" : "resume");
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status.message().find("model.rope_theta: 10000 in the checkpoint, 500000 in the "
                                      "run's model"),
              std::string::npos)
        << r.status.message();
  }
}

// With a learning rate of 0 the weights never move: the run that starts from a checkpoint's
// weights saves the same weights, from step 1 with a fresh optimizer.
TEST_P(LifeCycle, InitFromStartsFromTheWeights) {
  spec::RunFile source = Run(3, 0, "init_source");
  fs::remove_all(source.train.checkpoint.dir);
  ASSERT_TRUE(RunLoop(parallel(), source, {}).status.ok());
  spec::RunFile run = Run(2, 0, "init");
  fs::remove_all(run.train.checkpoint.dir);
  run.train.optimizer.lr = 0.0F;
  run.train.optimizer.min_lr = 0.0F;
  run.train.optimizer.weight_decay = 0.0F;
  Outcome o = RunLoop(parallel(), run, InitFrom(source.train.checkpoint.dir));
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  EXPECT_EQ(o.first_step, 1);
  EXPECT_NE(o.out.find("initialised from checkpoint " + source.train.checkpoint.dir +
                       "/step-00000003 (step 3)"),
            std::string::npos)
      << o.out;
  auto a = train::CheckpointReader::OpenFor(source.train.checkpoint.dir, run.model);
  auto b = train::CheckpointReader::OpenFor(run.train.checkpoint.dir, run.model);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->metadata().step, 2);
  for (const std::string& name : a->TensorNames()) {
    EXPECT_EQ(*a->ReadTensor(name), *b->ReadTensor(name)) << name;
  }
  RunOptions both_options = Resume(run.train.checkpoint.dir);
  both_options.init_from = source.train.checkpoint.dir;
  Outcome both = RunLoop(parallel(), run, both_options);
  ASSERT_FALSE(both.status.ok());
  EXPECT_NE(both.status.message().find("exclude each other"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(BothLoops, LifeCycle, ::testing::Values(false, true),
                         [](const auto& param) { return param.param ? "Parallel" : "Serial"; });

// A second SIGINT while the stop is under way ends the process at once (in a child process).
TEST(StopSignals, ASecondSigintAborts) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    train::StopSignalGuard guard;
    std::raise(SIGINT);
    if (!train::StopRequested()) ::_exit(2);
    std::raise(SIGTERM);  // a repeated SIGTERM is ignored
    std::raise(SIGINT);   // ends the process by SIGINT
    ::_exit(3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

// `motley eval`'s measurement of the final checkpoint is the loop's own validation loss (the same
// batches), and it writes nothing.
TEST(Eval, TheCheckpointGivesTheLoopsValidationLossAndNothingIsWritten) {
  spec::RunFile run = TinyRun(4);
  run.train.val_every = 4;
  run.train.val_batches = 3;
  run.train.checkpoint.dir = TempPath("eval_ckpt");
  fs::remove_all(run.train.checkpoint.dir);
  Outcome o = RunLoop(false, run, {});
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  ASSERT_TRUE(o.final_val_loss.has_value());
  auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(run.train.checkpoint.dir)) {
      names.push_back(e.path().string() + " " +
                      std::to_string(e.is_regular_file() ? e.file_size() : 0) + " " +
                      std::to_string(e.last_write_time().time_since_epoch().count()));
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto before = listing();
  train::EvalOptions options;
  options.checkpoint = run.train.checkpoint.dir;
  auto r = train::EvaluateCheckpoint(run.model, run.train, options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->batches, 3);
  EXPECT_EQ(r->tokens, 3 * run.train.global_batch * run.train.seq_len);
  EXPECT_NEAR(r->loss, *o.final_val_loss, 1e-12 * *o.final_val_loss);
  EXPECT_NEAR(r->perplexity, std::exp(r->loss), 1e-9);
  EXPECT_EQ(listing(), before);

  // A token file instead: its own batches.
  const std::string data = TempPath("eval_tokens.bin");
  std::vector<int32_t> ids;
  for (int i = 0; i < 500; ++i) ids.push_back((i * 37) % 256);
  ASSERT_TRUE(train::WriteTokenFile(data, train::TokenFormat::kU16, ids).ok());
  options.data_path = data;
  options.data_format = "u16";
  options.batches = 2;
  auto on_file = train::EvaluateCheckpoint(run.model, run.train, options);
  ASSERT_TRUE(on_file.ok()) << on_file.status().message();
  EXPECT_NE(on_file->loss, r->loss);
  EXPECT_NE(on_file->data_source.find(data), std::string::npos);
  options.data_path = TempPath("no_such_tokens.bin");
  EXPECT_FALSE(train::EvaluateCheckpoint(run.model, run.train, options).ok());
}

}  // namespace
}  // namespace motley::testing
