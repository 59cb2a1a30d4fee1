// How `motley` explains itself: the help formatter (option types as the user writes them, e.g.
// `--kind 1f1b|gpipe`, never the parser's `ENUM:value in {...}` or `INT:POSITIVE`), an example
// block under every subcommand's help, value checks whose errors say what was wrong in words
// ("--steps: must be a positive whole number, got 0"), and the message printed for a usage error
// ("motley schedule: --kind: 'zigzag' is not one of 1f1b, gpipe" and where to find help).
// Used by cli/main.cc and every *_command.cc. Not thread-safe (set-up only).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace motley::cli {

// The formatter every motley (sub)command uses; install it on the top-level app before adding
// subcommands (they inherit it).
std::shared_ptr<CLI::Formatter> MakeFormatter();

// The failure message of a usage error: "motley CMD: MESSAGE" and a pointer to CMD's --help.
std::string FailureMessage(const CLI::App* app, const CLI::Error& error);

// Adds "Examples:" with one line per example (each a full command line) to a subcommand's help.
void SetExamples(CLI::App* cmd, const std::vector<std::string>& examples);

// A word check with a plain-words message and nothing added to the help's type name (numbers are
// checked by cli/validators.h).
CLI::Validator OneOf(std::vector<std::string> names);  // exactly one of these words

}  // namespace motley::cli
