#!/usr/bin/env bash
# Set-up command 1 of README.md: install the Debian packages, build motley quietly (one line per
# phase; full logs in build/logs/, errors shown on failure), then the main job on an emulated
# heterogeneous cluster (examples/runs/hetero-4.yaml: 2 devices at 3x the speed of 2 others):
# `motley plan` chooses a plan; the job trains under it and under the uniform Megatron-style
# baseline side by side (virtual clock: the exact emulated time), prints the measured speed-up,
# and writes one HTML report of the plan and both runs (build/demo/report.html). Extra arguments
# go to `motley train` (e.g. --clock wall to pace every rank for real, --steps 80).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/phase.sh
out=build/demo
phase "install packages" build/logs/install.log bash scripts/install_deps.sh
phase "configure and build motley" build/logs/build-motley.log \
  bash -c 'bash scripts/configure.sh && cmake --build build --target motley'
mkdir -p "$out"
./build/motley plan examples/runs/hetero-4.yaml -o "$out/plan.json" --quiet --top 2
./build/motley train examples/runs/hetero-4.yaml --plan "$out/plan.json" --compare uniform \
  --steps 40 --log-interval 40 --metrics "$out/metrics.jsonl" --report "$out/report.html" "$@"
