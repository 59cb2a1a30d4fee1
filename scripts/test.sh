#!/usr/bin/env bash
# Set-up command 2 of README.md (and what CI runs): install dependencies, build with warnings as
# errors, run the layering check and the whole test suite, then build the unit tests and the
# libFuzzer targets with clang under AddressSanitizer + UndefinedBehaviorSanitizer and run them.
# Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# Optional, best effort: the reference `safetensors` Python reader, used by one checkpoint test
# (motley_checkpoint_python_test), which skips with a message when it is missing. Never fatal:
# offline machines and externally managed Pythons simply skip that test.
if ! python3 -c 'import safetensors, numpy' > /dev/null 2>&1; then
  timeout 120 python3 -m pip install --quiet --disable-pip-version-check safetensors numpy \
    > /dev/null 2>&1 \
    || echo "test.sh: python safetensors not installed; its checkpoint test will skip"
fi
# Test-time tools of the Hugging Face interop test (motley_hf_interop_test): Debian's python3-torch
# and a virtual environment with transformers==4.40.2, safetensors and numpy<2 from PyPI. Without
# them that test reports skipped; under CI=true a failed install fails the run.
if ! bash scripts/install_hf_test_tools.sh build/hf-venv; then
  if [ "${CI:-}" = "true" ]; then
    echo "test.sh: the Hugging Face test tools could not be installed (CI=true: failing)"
    exit 1
  fi
  echo "test.sh: the Hugging Face test tools could not be installed; motley_hf_interop_test will skip"
fi
jobs=$(nproc)

echo "== layering check"
python3 tools/check_layering.py

echo "== build (warnings as errors)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_COMPILE_WARNING_AS_ERROR=ON
cmake --build build -j "$jobs"

echo "== tests"
ctest --test-dir build --output-on-failure -j "$jobs" --label-exclude bench

echo "== ASan/UBSan build (clang) of the unit tests and the fuzz targets"
# Without CUDA: the GPU code cannot run under the host sanitizers (and skips without a GPU); the
# first build already compiled it with warnings as errors. clang, because libFuzzer is clang's:
# every object is built with -fsanitize=fuzzer-no-link,address,undefined (MOTLEY_SANITIZE +
# MOTLEY_FUZZ), so the unit tests and the fuzz targets share this one build. A build-asan folder
# configured with another compiler is started afresh.
if [[ -f build-asan/CMakeCache.txt ]] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++' build-asan/CMakeCache.txt; then
  rm -rf build-asan
fi
CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DMOTLEY_SANITIZE=ON -DMOTLEY_FUZZ=ON -DMOTLEY_BUILD_BENCH=OFF -DMOTLEY_WITH_CUDA=OFF \
  -DCMAKE_COMPILE_WARNING_AS_ERROR=ON
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit

echo "== fuzz targets: seed corpus + regressions + a fixed number of runs from a fixed seed"
# docs/fuzzing.md: what each target reads, how to fuzz longer, what to do with a crash.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L fuzz
