#!/usr/bin/env bash
# Issue 6 benchmark: tokens/s of the 8-block small model on the emulated 8-device cluster
# (examples/runs/emulated-8.yaml) with no straggler, with one device three times slower from step
# 20 under the static plan, and with the same straggler and the re-plan loop (--replan), on the
# virtual clock and on the wall clock (every rank paced to its emulated time). Also prints the
# re-planning run's migrations (count, bytes, time). The ratio re-planned / static is the figure
# Malleus reports (2.63-5.28x average over static systems, on its own clusters and stragglers).
#
#   bench/straggler_bench.sh [BUILD_DIR]   (default: build; needs BUILD_DIR/motley)
#   STEPS=N (default 60), CLOCKS="virtual wall" (default both)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MOTLEY=${MOTLEY:-$BUILD/motley}
STEPS=${STEPS:-60}
CLOCKS=${CLOCKS:-virtual wall}
[[ -x "$MOTLEY" ]] || { echo "no motley binary at $MOTLEY (build it first)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/motley_straggler_bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
RUN=examples/runs/emulated-8.yaml
# Sustained: slow from step 20 to the end of the run.
cat > "$WORK/slow.yaml" <<'YAML'
- {step: 20, device: 5, slowdown: 3}
YAML
echo "== planning the healthy cluster"
"$MOTLEY" plan "$RUN" -o "$WORK/plan.json" > "$WORK/plan.log"
tail -n 1 "$WORK/plan.log"

# tokens/s of one run: the summary's throughput line; migrations from the plan-switch line.
run() {  # label clock args...
  local label=$1 clock=$2
  shift 2
  "$MOTLEY" train "$RUN" --plan "$WORK/plan.json" --steps "$STEPS" --clock "$clock" "$@" \
    > "$WORK/$label-$clock.log" 2>&1 || { cat "$WORK/$label-$clock.log" >&2; exit 1; }
  grep -oP 'throughput \([a-z]+ clock\): \K[0-9.]+' "$WORK/$label-$clock.log"
}

printf '%-8s %14s %14s %14s %10s %10s\n' clock "healthy tok/s" "static tok/s" \
  "replan tok/s" "replan/st" "healthy/st"
for clock in $CLOCKS; do
  healthy=$(run healthy "$clock")
  static=$(run static "$clock" --inject "$WORK/slow.yaml")
  replan=$(run replan "$clock" --inject "$WORK/slow.yaml" --replan)
  printf '%-8s %14s %14s %14s %10.2f %10.2f\n' "$clock" "$healthy" "$static" "$replan" \
    "$(awk -v a="$replan" -v b="$static" 'BEGIN{print a/b}')" \
    "$(awk -v a="$healthy" -v b="$static" 'BEGIN{print a/b}')"
  grep -h 'plan switches:\|adopted' "$WORK/replan-$clock.log" | sed 's/^/    /'
done
