#!/usr/bin/env bash
# Set-up command 2 of README.md (and what CI runs): install the Debian packages and the test-time
# tools, run the layering check, build with warnings as errors (scripts/configure.sh: tests and
# benchmarks on, whatever configured build/ before), run every test but the benchmarks, then build
# the unit tests under AddressSanitizer + UndefinedBehaviorSanitizer and run them. Builds are
# quiet (one line per phase, logs in build/logs/, errors shown); ctest fails when it finds no
# tests. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/phase.sh
jobs=$(nproc)
logs=build/logs
phase "install packages" "$logs/install.log" bash scripts/install_deps.sh
phase "install test tools (chromium, safetensors)" "$logs/install-test-tools.log" \
  bash scripts/install_test_tools.sh
grep -h "install_test_tools:" "$logs/install-test-tools.log" || true
phase "layering check" "$logs/layering.log" python3 tools/check_layering.py
phase "configure build/" "$logs/configure.log" bash scripts/configure.sh
phase "build (warnings as errors)" "$logs/build.log" cmake --build build -j "$jobs"

echo "== tests"
ctest --test-dir build --output-on-failure --no-tests=error -j "$jobs" --label-exclude bench

echo "== ASan/UBSan build of the unit tests"
# Without CUDA: the GPU code cannot run under the host sanitizers (and skips without a GPU); the
# first build already compiled it with warnings as errors.
phase "configure build-asan/" "$logs/configure-asan.log" \
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMOTLEY_SANITIZE=ON \
  -DMOTLEY_BUILD_TESTS=ON -DMOTLEY_BUILD_BENCH=OFF -DMOTLEY_WITH_CUDA=OFF \
  -DCMAKE_COMPILE_WARNING_AS_ERROR=ON
phase "build build-asan/" "$logs/build-asan.log" cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --no-tests=error -j "$jobs" -L unit
