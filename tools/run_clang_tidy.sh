#!/usr/bin/env bash
# Runs clang-tidy on the C++ files changed since BASE (default: origin/main or the first commit),
# using build/compile_commands.json. Usage: tools/run_clang_tidy.sh [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-$(git rev-list --max-parents=0 HEAD | tail -n 1)}
files=$(git diff --name-only "$base" -- 'src/*.cc' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
[ -n "$files" ] || { echo "clang-tidy: no changed .cc files"; exit 0; }
# shellcheck disable=SC2086
clang-tidy -p build --quiet $files
