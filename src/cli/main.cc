// `motley`: the command line of the project, the only module that links the offline half (spec,
// sched, ...) and the runtime half (backends, model, train). Subcommands live in *_command.cc.
// Expected errors are Status values printed by each command (stderr, exit code 1); the catch here
// is only a last resort for a bug that escaped as an exception.
#include <csignal>
#include <cstdio>
#include <exception>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "backend/cpu/cpu_runtime_env.h"
#include "cli/commands.h"
#include "cli/plan_commands.h"

int main(int argc, char** argv) {
  motley::backend::ConfigureCpuRuntime(argv);  // before any thread starts (cpu_runtime_env.h)
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported as a full disk, instead
  // of killing the process mid-save (SIGXFSZ's default), so a failed save can clean up.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    CLI::App app{"motley: train Llama-style language models on heterogeneous clusters", "motley"};
    app.require_subcommand(1);
    app.fallthrough(false);
    int exit_code = 0;
    motley::cli::AddTrainCommand(app, exit_code);
    motley::cli::AddGenerateCommand(app, exit_code);
    motley::cli::AddEvalCommand(app, exit_code);
    motley::cli::AddValidateCommand(app, exit_code);
    motley::cli::AddScheduleCommand(app, exit_code);
    motley::cli::AddProfileCommand(app, exit_code);
    motley::cli::RegisterPlanCommands(app, exit_code);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      // --help / --version exit 0 after printing to stdout; usage errors (an unknown option, a
      // value out of range) go to stderr and exit 2, as every input error (docs/exit-codes.md).
      const int code = app.exit(e);
      return code == 0 ? 0 : 2;
    }
    return exit_code;
  } catch (const std::exception& e) {
    fmt::print(stderr, "motley: internal error: {}\n", e.what());
    return 1;
  }
}
