// `motley schedule`: prints the per-stage action lists of one pipeline's schedule (src/sched), as
// the runtime and the simulator both interpret them, after checking them for completeness and
// deadlock freedom.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "cli/cli_help.h"
#include "cli/commands.h"
#include "cli/fail.h"
#include "cli/validators.h"
#include "sched/schedule.h"

namespace motley::cli {
namespace {

struct ScheduleArgs {
  int stages = 1;
  int64_t micro_batches = 1;
  std::string kind = "1f1b";
  bool step_actions = false;
};

// Actions the printout may hold: P * M forward-backward pairs per schedule. 2^24 is ~1 GB of
// action lists, and a printout of ~100 MB.
constexpr int64_t kMaxScheduleActions = int64_t{1} << 24;

int RunSchedule(const ScheduleArgs& args) {
  if (static_cast<int64_t>(args.stages) * args.micro_batches > kMaxScheduleActions) {
    return Fail("schedule", Err(StatusCode::kInvalidArgument,
                                "--stages {} * --micro-batches {} is more than {} micro-batch "
                                "passes to print",
                                args.stages, args.micro_batches, kMaxScheduleActions));
  }
  sched::ScheduleOptions options;
  options.with_step_actions = args.step_actions;
  const spec::PipelineSchedule kind =
      args.kind == "gpipe" ? spec::PipelineSchedule::kGPipe : spec::PipelineSchedule::k1F1B;
  auto schedule = sched::BuildSchedule(kind, args.stages, args.micro_batches, options);
  Status status = schedule.ok() ? sched::CheckSchedule(*schedule) : schedule.status();
  if (!status.ok()) {
    return Fail("schedule", status);
  }
  fmt::print("{} schedule, {} stage(s), {} micro-batch(es)\n", spec::PipelineScheduleName(kind),
             args.stages, args.micro_batches);
  fmt::print("{}", sched::ScheduleToString(*schedule));
  std::string in_flight;
  for (int i = 0; i < args.stages; ++i) {
    in_flight += fmt::format("{}{}", i == 0 ? "" : " ", sched::InFlightMicroBatches(*schedule, i));
  }
  fmt::print("\nmicro-batches in flight per stage (activations held at once): {}\n", in_flight);
  return 0;
}

}  // namespace

void AddScheduleCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ScheduleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "schedule",
      "Print the per-stage action lists of a pipeline schedule (F forward, B backward, SF/RF "
      "send/receive activation, SB/RB send/receive gradient).");
  cmd->add_option("--stages,-p", args->stages, "Pipeline stages P")
      ->required()
      ->check(IntRange(1, kMaxScheduleActions))
      ->type_name("P");
  cmd->add_option("--micro-batches,-m", args->micro_batches, "Micro-batches per step M")
      ->required()
      ->check(IntRange(1, kMaxScheduleActions))
      ->type_name("M");
  cmd->add_option("--kind", args->kind, "Schedule kind: 1f1b (default) or gpipe")
      ->check(OneOf({"1f1b", "gpipe"}))
      ->type_name("1f1b|gpipe");
  cmd->add_flag("--step-actions", args->step_actions,
                "Append the data-parallel sync and optimizer step to every stage");
  SetExamples(cmd, {"motley schedule --stages 4 --micro-batches 8",
                    "motley schedule -p 2 -m 3 --kind gpipe --step-actions"});
  cmd->callback([args, &exit_code] { exit_code = RunSchedule(*args); });
}

}  // namespace motley::cli
