// How a `motley` subcommand reports an expected failure: the Status's message on stderr behind
// "motley COMMAND: ", and the process exit code its StatusCode maps to (core/status.h
// ExitCodeFor: 2 for input and usage errors, 1 otherwise; docs/exit-codes.md).
#pragma once

#include <cstdio>
#include <string_view>

#include <fmt/core.h>

#include "core/status.h"

namespace motley::cli {

// Prints "motley <command>: <message>" and returns ExitCodeFor(status). `status` must be an error.
inline int Fail(std::string_view command, const Status& status) {
  fmt::print(stderr, "motley {}: {}\n", command, status.message());
  return ExitCodeFor(status);
}

}  // namespace motley::cli
