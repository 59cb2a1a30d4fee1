#!/usr/bin/env bash
# Runs one libFuzzer target (fuzz/CMakeLists.txt) the way CI does: every committed seed and
# regression input first, then RUNS mutations from a fixed seed with inputs of at most MAX_LEN
# bytes, in a private temporary folder (new corpus entries are not written into the source tree).
# Exit status: 0, or the target's on a crash, a sanitizer report, a leak or a timeout; the failing
# input is then printed (base64) and kept in $FUZZ_ARTIFACT_DIR when that is set: commit it under
# fuzz/regressions/NAME/ with the fix (docs/fuzzing.md).
#
# Usage: run_fuzz.sh TARGET RUNS MAX_LEN SEED_DIR [REGRESSION_DIR] [extra libFuzzer flags...]
set -uo pipefail
target=$1
runs=$2
max_len=$3
seeds=$4
regressions=${5:-}
shift 5 2>/dev/null || shift $#
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/new" "$work/artifacts" "$work/tmp"
dirs=("$seeds")
if [[ -n "$regressions" && -d "$regressions" ]]; then dirs+=("$regressions"); fi
start=$(date +%s.%N)
TMPDIR="$work/tmp" "$target" -seed=1 -runs="$runs" -max_len="$max_len" -timeout=60 \
  -rss_limit_mb=2560 -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" \
  "$work/new" "${dirs[@]}" 2>&1 | grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse)'
status=${PIPESTATUS[0]}
end=$(date +%s.%N)
echo "run_fuzz: $(basename "$target"): exit status $status after $(awk "BEGIN {printf \"%.1f\", $end - $start}") s"
if [[ $status -ne 0 ]]; then
  for f in "$work"/artifacts/*; do
    [[ -f "$f" ]] || continue
    echo "run_fuzz: failing input $(basename "$f") (base64):"
    base64 -w 0 "$f"; echo
    if [[ -n "${FUZZ_ARTIFACT_DIR:-}" ]]; then mkdir -p "$FUZZ_ARTIFACT_DIR" && cp "$f" "$FUZZ_ARTIFACT_DIR/"; fi
  done
fi
exit "$status"
