// `motley train`: trains on one device (src/train/trainer.h) with a run file, or with the embedded
// default run (the small model on the shipped corpus) when none is given. With `--plan PLAN.json`
// it runs the plan with every rank a thread (src/train/parallel_trainer.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli/commands.h"
#include "spec/plan.h"
#include "spec/run_file.h"
#include "train/parallel_trainer.h"
#include "train/trainer.h"

namespace motley::cli {
namespace {

struct TrainArgs {
  std::string run_path;
  int64_t steps = 0;
  std::string metrics_path;
  int threads = 0;
  int64_t micro_batches = 1;
  std::string plan_path;
  std::string trace_path;
  std::vector<int64_t> trace_steps;
};

// `motley train RUN.yaml --plan PLAN.json`: the plan is checked before any rank starts.
int RunParallelTrain(const TrainArgs& args, const CLI::App& cmd, const spec::RunFile& run,
                     const std::string& source) {
  if (cmd.count("--micro-batches") > 0) {
    fmt::print(stderr, "motley train: --micro-batches does not apply with --plan (the plan sets "
                       "each pipeline's micro-batches)\n");
    return 1;
  }
  Result<spec::Plan> plan = spec::LoadPlan(args.plan_path);
  if (!plan.ok()) {
    fmt::print(stderr, "motley train: {}\n", plan.status().message());
    return 1;
  }
  fmt::print("motley train: {} with plan {}\n", source, args.plan_path);
  std::fflush(stdout);
  train::ParallelTrainerOptions options;
  options.trace_path = args.trace_path;
  options.trace_steps = args.trace_steps;
  auto summary = train::TrainParallel(run, *plan, options);
  if (!summary.ok()) {
    fmt::print(stderr, "motley train: {}: {}\n", source, summary.status().message());
    return 1;
  }
  if (!run.train.metrics_path.empty()) fmt::print("metrics: {}\n", run.train.metrics_path);
  if (!args.trace_path.empty()) fmt::print("trace: {}\n", args.trace_path);
  return 0;
}

int RunTrain(const TrainArgs& args, const CLI::App& cmd) {
  Result<spec::RunFile> run = args.run_path.empty() ? Result<spec::RunFile>(spec::DefaultRunFile())
                                                    : spec::LoadRunFile(args.run_path);
  if (!run.ok()) {
    fmt::print(stderr, "motley train: {}\n", run.status().message());
    return 1;
  }
  spec::TrainSpec& train = run->train;
  if (cmd.count("--steps") > 0) train.steps = args.steps;
  if (cmd.count("--metrics") > 0) train.metrics_path = args.metrics_path;
  if (cmd.count("--threads") > 0) train.threads = args.threads;
  const std::string source = args.run_path.empty() ? "default run" : args.run_path;
  if (!args.plan_path.empty()) return RunParallelTrain(args, cmd, *run, source);
  fmt::print("motley train: {}\n", source);
  if (run->cluster.num_devices() > 1) {
    fmt::print(
        "note: training on one CPU device; the run's cluster has {} devices, which this "
        "single-device loop does not use\n",
        run->cluster.num_devices());
  }
  std::fflush(stdout);
  train::TrainerOptions options;
  options.micro_batches = args.micro_batches;
  auto summary = train::Train(run->model, train, options);
  if (!summary.ok()) {
    fmt::print(stderr, "motley train: {}: {}\n", source, summary.status().message());
    return 1;
  }
  if (!train.metrics_path.empty()) fmt::print("metrics: {}\n", train.metrics_path);
  return 0;
}

}  // namespace

void AddTrainCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train on one device (the CPU). Without RUN.yaml: the embedded default run, the 'small' "
      "model on the shipped King James Bible corpus.");
  cmd->add_option("run", args->run_path, "Run file (YAML, docs/formats/run-file.md)")
      ->type_name("RUN.yaml");
  cmd->add_option("--steps", args->steps, "Override train.steps")->check(CLI::PositiveNumber);
  cmd->add_option("--metrics", args->metrics_path,
                  "Write per-step metrics as JSONL to FILE (docs/formats/metrics.md)");
  cmd->add_option("--threads", args->threads, "Override train.threads (CPU threads)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--micro-batches", args->micro_batches,
                  "Split each global batch into M equal micro-batches (same math, less memory)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--plan", args->plan_path,
                  "Run this parallel plan (docs/formats/plan.md), every rank a thread")
      ->type_name("PLAN.json");
  cmd->add_option("--trace", args->trace_path,
                  "With --plan: write a Chrome trace (Perfetto JSON) of every rank's actions")
      ->type_name("FILE");
  cmd->add_option("--trace-steps", args->trace_steps,
                  "Comma-separated steps to trace (default: step 1)")
      ->delimiter(',')
      ->type_name("STEP,...");
  cmd->callback([args, cmd, &exit_code] { exit_code = RunTrain(*args, *cmd); });
}

}  // namespace motley::cli
