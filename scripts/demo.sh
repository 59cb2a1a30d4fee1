#!/usr/bin/env bash
# Set-up command 1 of README.md: install dependencies, build motley, run the main job on its
# embedded default (no arguments: see `motley train --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOTLEY_BUILD_TESTS=OFF \
  -DMOTLEY_BUILD_BENCH=OFF >/dev/null
cmake --build build --target motley
./build/motley train "$@"
