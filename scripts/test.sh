#!/usr/bin/env bash
# Set-up command 2 of README.md (and what CI runs): install the Debian packages and the test-time
# tools, run the layering check, build with warnings as errors (scripts/configure.sh: tests and
# benchmarks on, whatever configured build/ before), run every test but the benchmarks, then build
# the unit tests and the libFuzzer targets with clang under AddressSanitizer +
# UndefinedBehaviorSanitizer and run them. Builds are quiet (one line per phase, logs in
# build/logs/, errors shown); ctest fails when it finds no tests. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/phase.sh
jobs=$(nproc)
logs=build/logs
phase "install packages" "$logs/install.log" bash scripts/install_deps.sh
phase "install test tools (chromium, safetensors)" "$logs/install-test-tools.log" \
  bash scripts/install_test_tools.sh
grep -h "install_test_tools:" "$logs/install-test-tools.log" || true
# Test-time tools of the Hugging Face interop test (motley_hf_interop_test): Debian's python3-torch
# and a virtual environment with transformers==4.40.2, safetensors and numpy<2 from PyPI. Without
# them that test reports skipped; under CI=true a failed install fails the run.
if ! phase "install Hugging Face test tools (torch, transformers)" "$logs/install-hf-tools.log" \
  bash scripts/install_hf_test_tools.sh build/hf-venv; then
  if [ "${CI:-}" = "true" ]; then
    echo "test.sh: the Hugging Face test tools could not be installed (CI=true: failing)"
    exit 1
  fi
  echo "test.sh: the Hugging Face test tools could not be installed; motley_hf_interop_test will skip"
fi
phase "layering check" "$logs/layering.log" python3 tools/check_layering.py
phase "configure build/" "$logs/configure.log" bash scripts/configure.sh
phase "build (warnings as errors)" "$logs/build.log" cmake --build build -j "$jobs"

echo "== tests"
ctest --test-dir build --output-on-failure --no-tests=error -j "$jobs" --label-exclude bench

echo "== ASan/UBSan build (clang) of the unit tests and the fuzz targets"
# Without CUDA: the GPU code cannot run under the host sanitizers (and skips without a GPU); the
# first build already compiled it with warnings as errors. clang, because libFuzzer is clang's:
# every object is built with -fsanitize=fuzzer-no-link,address,undefined (MOTLEY_SANITIZE +
# MOTLEY_FUZZ), so the unit tests and the fuzz targets share this one build. A build-asan folder
# configured with another compiler is started afresh.
if [[ -f build-asan/CMakeCache.txt ]] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++' build-asan/CMakeCache.txt; then
  rm -rf build-asan
fi
phase "configure build-asan/" "$logs/configure-asan.log" \
  env CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DMOTLEY_SANITIZE=ON -DMOTLEY_FUZZ=ON -DMOTLEY_BUILD_TESTS=ON -DMOTLEY_BUILD_BENCH=OFF \
  -DMOTLEY_WITH_CUDA=OFF -DCMAKE_COMPILE_WARNING_AS_ERROR=ON
phase "build build-asan/" "$logs/build-asan.log" cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --no-tests=error -j "$jobs" -L unit

echo "== fuzz targets: seed corpus + regressions + a fixed number of runs from a fixed seed"
# docs/fuzzing.md: what each target reads, how to fuzz longer, what to do with a crash.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --no-tests=error -j "$jobs" -L fuzz
