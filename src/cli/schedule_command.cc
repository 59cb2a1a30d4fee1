// `motley schedule`: prints the per-stage action lists of one pipeline's schedule (src/sched:
// 1F1B, GPipe, interleaved 1F1B), as the runtime and the simulator both interpret them, after
// checking them for completeness and deadlock freedom; with `RUN.yaml --plan PLAN.json --step`, the
// whole step program of a plan (sched/step_program.h, docs/formats/step-program.md) after checking
// it.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "cli/cli_help.h"
#include "cli/commands.h"
#include "cli/fail.h"
#include "cli/validators.h"
#include "sched/schedule.h"
#include "sched/step_program.h"
#include "spec/run_file.h"

namespace motley::cli {
namespace {

struct ScheduleArgs {
  int stages = 0;  // 0: not given
  int64_t micro_batches = 0;
  std::string kind = "1f1b";
  int chunks = 0;  // --chunks V (interleaved only); 0: not given
  // --step: the whole step program of a plan on a run's cluster and model.
  bool step = false;
  std::string run_path;
  std::string plan_path;
  bool link_reports = false;
  int64_t max_actions = 0;
};

int RunStepProgram(const ScheduleArgs& args) {
  if (args.run_path.empty() || args.plan_path.empty()) {
    return Fail("schedule", Err(StatusCode::kInvalidArgument,
                                "--step needs a run file and --plan PLAN.json (motley schedule "
                                "RUN.yaml --plan PLAN.json --step)"));
  }
  if (args.stages != 0 || args.micro_batches != 0) {
    return Fail("schedule", Err(StatusCode::kInvalidArgument,
                                "--step takes its pipelines from --plan; drop --stages and "
                                "--micro-batches"));
  }
  auto run = spec::LoadRunFile(args.run_path);
  if (!run.ok()) return Fail("schedule", run.status());
  auto plan = spec::LoadPlan(args.plan_path);
  if (!plan.ok()) return Fail("schedule", plan.status());
  Status valid = spec::ValidatePlan(*plan, run->cluster, run->model, run->train);
  if (!valid.ok()) return Fail("schedule", valid.WithContext(args.plan_path));
  sched::StepProgramOptions options;
  options.link_reports = args.link_reports;
  auto program = sched::BuildStepProgram(*plan, run->model, run->train.seq_len, options);
  Status checked = program.ok() ? sched::CheckStepProgram(*program) : program.status();
  if (!checked.ok()) return Fail("schedule", checked.WithContext(args.plan_path));
  int64_t layer_collectives = 0;
  for (const sched::Collective& c : program->collectives) layer_collectives += c.layer >= 0;
  fmt::print("step program of {} ({} schedule{}): {} ranks, {} collectives ({} of layers)\n",
             args.plan_path, spec::PipelineScheduleName(plan->schedule),
             program->zero1 ? ", ZeRO-1" : "", program->ranks.size(), program->collectives.size(),
             layer_collectives);
  fmt::print("{}", sched::StepProgramToString(*program, args.max_actions));
  return 0;
}

// Actions the printout may hold: P * M forward-backward pairs per schedule. 2^24 is ~1 GB of
// action lists, and a printout of ~100 MB.
constexpr int64_t kMaxScheduleActions = int64_t{1} << 24;

int RunSchedule(const ScheduleArgs& args) {
  if (args.step) return RunStepProgram(args);
  if (!args.run_path.empty() || !args.plan_path.empty() || args.link_reports ||
      args.max_actions != 0) {
    return Fail("schedule", Err(StatusCode::kInvalidArgument,
                                "a run file, --plan, --link-reports and --max-actions go with "
                                "--step"));
  }
  if (args.stages == 0 || args.micro_batches == 0) {
    return Fail("schedule", Err(StatusCode::kInvalidArgument,
                                "give --stages and --micro-batches (one pipeline), or RUN.yaml "
                                "--plan PLAN.json --step (a plan's whole step)"));
  }
  if (static_cast<int64_t>(args.stages) * args.micro_batches > kMaxScheduleActions) {
    return Fail("schedule", Err(StatusCode::kInvalidArgument,
                                "--stages {} * --micro-batches {} is more than {} micro-batch "
                                "passes to print",
                                args.stages, args.micro_batches, kMaxScheduleActions));
  }
  const bool interleaved = args.kind == "interleaved";
  if (interleaved && args.chunks == 0) {
    return Fail("schedule", Err(StatusCode::kInvalidArgument,
                                "--kind interleaved needs --chunks V (model chunks per device, at "
                                "least 2)"));
  }
  if (!interleaved && args.chunks != 0) {
    return Fail("schedule",
                Err(StatusCode::kInvalidArgument, "--chunks goes with --kind interleaved"));
  }
  if (static_cast<int64_t>(args.stages) * args.micro_batches * std::max(args.chunks, 1) >
      kMaxScheduleActions) {
    return Fail("schedule", Err(StatusCode::kInvalidArgument,
                                "--stages {} * --micro-batches {} * --chunks {} is more than {} "
                                "micro-batch passes to print",
                                args.stages, args.micro_batches, args.chunks, kMaxScheduleActions));
  }
  const spec::PipelineSchedule kind =
      args.kind == "gpipe" ? spec::PipelineSchedule::kGPipe : spec::PipelineSchedule::k1F1B;
  sched::ScheduleOptions options;
  options.chunks = interleaved ? args.chunks : 1;
  auto schedule = sched::BuildSchedule(kind, args.stages, args.micro_batches, options);
  Status status = schedule.ok() ? sched::CheckSchedule(*schedule) : schedule.status();
  if (!status.ok()) {
    return Fail("schedule", status);
  }
  if (interleaved) {
    fmt::print(
        "interleaved 1f1b schedule, {} device(s) x {} model chunks ({} virtual stages), "
        "{} micro-batch(es)\n",
        args.stages, args.chunks, schedule->num_virtual_stages(), args.micro_batches);
  } else {
    fmt::print("{} schedule, {} stage(s), {} micro-batch(es)\n", spec::PipelineScheduleName(kind),
               args.stages, args.micro_batches);
  }
  fmt::print("{}", sched::ScheduleToString(*schedule));
  std::string in_flight;
  for (int i = 0; i < args.stages; ++i) {
    in_flight += fmt::format("{}{}", i == 0 ? "" : " ", sched::InFlightMicroBatches(*schedule, i));
  }
  if (interleaved) {
    fmt::print(
        "\n(micro-batch, chunk) pairs in flight per device (each holds one chunk's "
        "activations): {}\n",
        in_flight);
  } else {
    fmt::print("\nmicro-batches in flight per stage (activations held at once): {}\n", in_flight);
  }
  return 0;
}

}  // namespace

void AddScheduleCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ScheduleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "schedule",
      "Print the per-stage action lists of a pipeline schedule (F forward, B backward, SF/RF "
      "send/receive activation, SB/RB send/receive gradient), or with --step a plan's whole "
      "training step per rank (docs/formats/step-program.md).");
  cmd->add_option("--stages,-p", args->stages, "Pipeline stages P (one pipeline)")
      ->check(IntRange(1, kMaxScheduleActions))
      ->type_name("P");
  cmd->add_option("--micro-batches,-m", args->micro_batches, "Micro-batches per step M")
      ->check(IntRange(1, kMaxScheduleActions))
      ->type_name("M");
  cmd->add_option("--kind", args->kind,
                  "Schedule kind: 1f1b (default), gpipe, or interleaved (1F1B over --chunks "
                  "model chunks per device; micro-batches a multiple of the stages, or fewer "
                  "than twice them)")
      ->check(OneOf({"1f1b", "gpipe", "interleaved"}))
      ->type_name("1f1b|gpipe|interleaved");
  cmd->add_option("--chunks", args->chunks,
                  "With --kind interleaved: model chunks V per device (virtual stages P * V)")
      ->check(IntRange(2, 1024))
      ->type_name("V");
  cmd->add_option("run", args->run_path, "Run file (with --step): its cluster and model")
      ->type_name("RUN.yaml");
  cmd->add_option("--plan", args->plan_path, "Plan file (with --step)")->type_name("PLAN.json");
  cmd->add_flag("--step", args->step,
                "Print the plan's whole step program: every rank's ops and collectives");
  cmd->add_flag("--link-reports", args->link_reports,
                "With --step: the metrics carry the straggler link reports of an emulated run");
  cmd->add_option("--max-actions", args->max_actions,
                  "With --step: print at most N pipeline actions per rank (0: all)")
      ->check(IntRange(int64_t{0}, kMaxScheduleActions))
      ->type_name("N");
  SetExamples(cmd, {"motley schedule --stages 4 --micro-batches 8",
                    "motley schedule -p 2 -m 3 --kind gpipe",
                    "motley schedule -p 4 -m 8 --kind interleaved --chunks 2",
                    "motley schedule examples/runs/hetero-4.yaml --plan "
                    "examples/plans/hetero-4-balanced.json --step"});
  cmd->callback([args, &exit_code] { exit_code = RunSchedule(*args); });
}

}  // namespace motley::cli
