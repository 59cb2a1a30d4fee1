// `motley`: the command line of the project, the only module that links the offline half (spec,
// sched, ...) and the runtime half (backends, model, train). Subcommands live in *_command.cc.
// Bare `motley` prints the help (exit 0); `motley --version` the version; an unknown command is
// named, followed by the help (exit 2, a usage error as docs/exit-codes.md says, like every other
// usage error). Expected errors are Status values printed by each command (cli::Fail); the catch
// here is only a last resort for a bug that escaped as an exception.
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "backend/cpu/cpu_runtime_env.h"
#include "cli/cli_help.h"
#include "cli/commands.h"
#include "cli/plan_commands.h"

#ifndef MOTLEY_VERSION
#define MOTLEY_VERSION "unknown"
#endif

namespace {

constexpr int kUsageError = 2;  // docs/exit-codes.md

}  // namespace

int main(int argc, char** argv) {
  motley::backend::ConfigureCpuRuntime(argv);  // before any thread starts (cpu_runtime_env.h)
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported as a full disk, instead
  // of killing the process mid-save (SIGXFSZ's default), so a failed save can clean up.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    CLI::App app{
        "motley: train Llama-style language models on heterogeneous clusters (real CPU "
        "devices, emulated accelerators), plan them, simulate them and report on them.",
        "motley"};
    app.formatter(motley::cli::MakeFormatter());
    app.failure_message(motley::cli::FailureMessage);
    app.set_version_flag("--version", std::string("motley ") + MOTLEY_VERSION,
                         "Print the version and exit");
    app.require_subcommand(0, 1);
    app.fallthrough(false);
    int exit_code = 0;
    motley::cli::AddTrainCommand(app, exit_code);
    motley::cli::AddGenerateCommand(app, exit_code);
    motley::cli::AddEvalCommand(app, exit_code);
    motley::cli::AddValidateCommand(app, exit_code);
    motley::cli::AddScheduleCommand(app, exit_code);
    motley::cli::AddProfileCommand(app, exit_code);
    motley::cli::RegisterPlanCommands(app, exit_code);
    motley::cli::AddReportCommand(app, exit_code);
    app.footer(
        "\nStart here:\n"
        "  motley plan examples/runs/hetero-4.yaml -o plan.json --report plan.html\n"
        "  motley train examples/runs/hetero-4.yaml --plan plan.json --compare uniform "
        "--report run.html\n"
        "Every command has its own --help with an example. Docs: README.md, docs/.");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ExtrasError& e) {
      if (app.get_subcommands().empty() && argc > 1) {
        // Not a command: name it, then show what there is.
        fmt::print(stderr, "motley: '{}' is not a motley command\n\n{}", argv[1], app.help());
        return kUsageError;
      }
      app.exit(e);
      return kUsageError;
    } catch (const CLI::ParseError& e) {
      // --help / --version exit 0 after printing to stdout; usage errors go to stderr.
      const int code = app.exit(e);
      return code == 0 ? 0 : kUsageError;
    }
    if (app.get_subcommands().empty()) {
      fmt::print("{}", app.help());
      return 0;
    }
    return exit_code;
  } catch (const std::exception& e) {
    fmt::print(stderr, "motley: internal error: {}\n", e.what());
    return 1;
  }
}
