// The offline commands: `motley plan`, `motley predict` and `motley simulate` (issue 5). They read
// a run file, build the compute model (a profile file when given, else the roofline fallback), and
// run the planner, the predictor or the simulator. Registered like the other subcommands (see
// commands.h): the chosen command's callback stores its exit code (0 ok, 1 error printed to stderr).
#pragma once

#include <CLI/CLI.hpp>

namespace motley::cli {

// motley plan RUN.yaml -o PLAN.json [--report report.html] [--profile P.json] [--top N]
//                      [--trace T.json] [--no-baselines] [--baseline KIND] [--straggler ID=SLOWDOWN
//                      ...] [--quiet]
// motley predict RUN.yaml PLAN.json [--profile P.json] [--straggler ID=SLOWDOWN ...]
// motley simulate RUN.yaml PLAN.json [--trace T.json] [--report R.html] [--profile P.json]
// [--straggler ID=SLOWDOWN ...]
void RegisterPlanCommands(CLI::App& app, int& exit_code);
// Same, for a main without an exit-code variable: a failing command throws CLI::RuntimeError(1)
// after printing its error, which CLI::App::exit turns into exit code 1.
void RegisterPlanCommands(CLI::App& app);

}  // namespace motley::cli
