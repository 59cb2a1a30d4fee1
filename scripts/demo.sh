#!/usr/bin/env bash
# Set-up command 1 of README.md: install dependencies, build motley, run the main job: train an
# 8-block small model on an emulated heterogeneous cluster (2 devices at 3x the speed of 2 others,
# examples/runs/hetero-4.yaml) under a balanced plan, then the same job under the uniform
# Megatron-style split, and print both throughputs side by side (virtual clock: exact emulated
# time; pass `--clock wall` to pace every rank for real). Extra arguments go to `motley train`
# (e.g. --steps 20). About half a minute on 2 cores once built.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# Warnings do not stop the demo (CI builds with them as errors); set explicitly because the build
# folder may have been configured by scripts/test.sh.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOTLEY_BUILD_TESTS=OFF \
  -DMOTLEY_BUILD_BENCH=OFF -DCMAKE_COMPILE_WARNING_AS_ERROR=OFF >/dev/null
cmake --build build --target motley
./build/motley train examples/runs/hetero-4.yaml --plan examples/plans/hetero-4-balanced.json \
  --compare examples/plans/hetero-4-uniform.json "$@"
