#!/usr/bin/env bash
# The one configuration of build/ that both set-up commands of README.md use: RelWithDebInfo,
# warnings as errors, tests and benchmarks on. scripts/demo.sh and scripts/test.sh share it, so in
# whichever order they run neither undoes the other's build (a folder configured otherwise, e.g.
# with tests off, is set back to this). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_COMPILE_WARNING_AS_ERROR=ON -DMOTLEY_BUILD_TESTS=ON -DMOTLEY_BUILD_BENCH=ON "$@"
