// The `motley` subcommands. Each Add*Command registers one subcommand (its options and --help) on
// the application; when that subcommand is chosen, its callback runs after parsing and stores the
// process exit code in `exit_code` (0 success, else cli::Fail's code, docs/exit-codes.md). Every
// subcommand's help ends with examples (cli_help.h SetExamples). Only commands that work are
// registered.
#pragma once

#include <CLI/CLI.hpp>

namespace motley::cli {

// motley train [RUN.yaml] [--steps N] [--metrics FILE] [--threads N] [--micro-batches M]
//             [--plan PLAN.json] [--checkpoint-dir DIR] [--resume] ...
void AddTrainCommand(CLI::App& app, int& exit_code);
// motley generate RUN.yaml --checkpoint DIR --prompt TEXT [--tokens N] [--temperature T]
void AddGenerateCommand(CLI::App& app, int& exit_code);
// motley eval RUN.yaml --checkpoint DIR [--data FILE] [--batches N] [--json]
void AddEvalCommand(CLI::App& app, int& exit_code);
// motley validate RUN.yaml [--plan PLAN.json]
void AddValidateCommand(CLI::App& app, int& exit_code);
// motley schedule --stages P --micro-batches M [--kind 1f1b|gpipe]
void AddScheduleCommand(CLI::App& app, int& exit_code);
// motley profile RUN.yaml -o PROFILE.json [--micro-batches 1,2,4] [--tp 1] [--device-type NAME]
void AddProfileCommand(CLI::App& app, int& exit_code);
// motley report METRICS.jsonl [MORE.jsonl ...] -o report.html [--label NAME ...] [--title TEXT]
void AddReportCommand(CLI::App& app, int& exit_code);

}  // namespace motley::cli
