#!/usr/bin/env bash
# Straggler benchmark (issue 6, issue 14): the re-plan loop on the emulated clusters, one scenario
# at a time, each on the virtual clock (the runtime's exact emulated time):
#   1of8-3x        examples/runs/emulated-8.yaml, device 5 three times slower from step 20
#   2of16-2x-5x    examples/runs/emulated-16.yaml, device 5 two and device 12 five times slower
#                  from step 20
#   link-10x       emulated-8, the inter-node link between devices 3 and 4 ten times slower
#                  from step 20
#   slow-from-0    emulated-8, device 5 three times slower from step 1
# For each: the static plan (`motley plan` on the healthy cluster) under the scenario, the same
# with `--replan`, and the ideal: the planner's own static plan for the degraded cluster with the
# true rates (`motley plan --straggler ...`), trained under the scenario. Reported: tokens/s of the
# three over the steps after the loop adopted its plan (and over the whole run), re-planned /
# ideal (target >= 0.95 once adopted), re-planned / static (Malleus reports 2.63-5.28x over static
# systems, on its own clusters and stragglers), the steps from the onset to the first step under
# an adopted plan (target <= 10), and the bytes migrated. The runs' metrics JSONL are the source.
#
#   bench/straggler_bench.sh [BUILD_DIR]   (default: build; needs BUILD_DIR/motley and python3)
#   STEPS=N (default 60), SCENARIOS="1of8-3x link-10x" (default: all four), CLOCK=wall (default
#   virtual; wall paces every rank to its emulated time, distorted on a loaded host)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MOTLEY=${MOTLEY:-$BUILD/motley}
STEPS=${STEPS:-60}
CLOCK=${CLOCK:-virtual}
SCENARIOS=${SCENARIOS:-1of8-3x 2of16-2x-5x link-10x slow-from-0}
[[ -x "$MOTLEY" ]] || { echo "no motley binary at $MOTLEY (build it first)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is needed to read the metrics" >&2; exit 1; }
WORK=$(mktemp -d /tmp/motley_straggler_bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# scenario NAME -> RUN, ONSET, the scenario file's events, the planner's --straggler flags
setup() {
  case $1 in
    1of8-3x)
      RUN=examples/runs/emulated-8.yaml; ONSET=20; TRUE="--straggler 5=3"
      EVENTS="- {step: 20, device: 5, slowdown: 3}" ;;
    2of16-2x-5x)
      RUN=examples/runs/emulated-16.yaml; ONSET=20; TRUE="--straggler 5=2 --straggler 12=5"
      EVENTS=$'- {step: 20, device: 5, slowdown: 2}\n- {step: 20, device: 12, slowdown: 5}' ;;
    link-10x)
      RUN=examples/runs/emulated-8.yaml; ONSET=20; TRUE="--straggler 3-4=10"
      EVENTS="- {step: 20, link: [3, 4], slowdown: 10}" ;;
    slow-from-0)
      RUN=examples/runs/emulated-8.yaml; ONSET=1; TRUE="--straggler 5=3"
      EVENTS="- {step: 1, device: 5, slowdown: 3}" ;;
    *) echo "unknown scenario $1" >&2; exit 1 ;;
  esac
}

train() {  # LABEL PLAN extra args...
  local label=$1 plan=$2
  shift 2
  "$MOTLEY" train "$RUN" --plan "$plan" --steps "$STEPS" --clock "$CLOCK" \
    --inject "$DIR/scenario.yaml" --metrics "$DIR/$label.jsonl" "$@" >"$DIR/$label.log" 2>&1 ||
    { cat "$DIR/$label.log" >&2; exit 1; }
}

printf '%-12s %8s %8s %8s %8s %8s %8s %6s %9s %7s\n' scenario static replan ideal rp/ideal \
  "settled" rp/stat adopt "migr MB" "whole"
for name in $SCENARIOS; do
  setup "$name"
  DIR=$WORK/$name
  mkdir -p "$DIR"
  printf '%s\n' "$EVENTS" >"$DIR/scenario.yaml"
  "$MOTLEY" plan "$RUN" -o "$DIR/plan.json" >"$DIR/plan.log" 2>&1 ||
    { cat "$DIR/plan.log" >&2; exit 1; }
  # shellcheck disable=SC2086  # TRUE holds several flags
  "$MOTLEY" plan "$RUN" $TRUE -o "$DIR/ideal.json" >"$DIR/ideal-plan.log" 2>&1 ||
    { cat "$DIR/ideal-plan.log" >&2; exit 1; }
  train static "$DIR/plan.json"
  train replan "$DIR/plan.json" --replan
  train ideal "$DIR/ideal.json"
  python3 - "$DIR" "$ONSET" "$name" <<'PY'
import json, sys
d, onset, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def lines(label):
    return [json.loads(l) for l in open(f"{d}/{label}.jsonl") if l.strip()]
static, replan, ideal = lines("static"), lines("replan"), lines("ideal")
moves = [j for j in replan if "migration" in j and j["step"] >= onset - 1]
if moves:
    first = moves[0]["step"] + 1          # the first step under the first adopted plan
    last = moves[-1]["step"] + 1          # ... under the last one (the loop settled)
    adopt = f"{first - onset}/{last - onset}"  # steps from the onset to them
    mb = sum(j["migration"]["bytes"] for j in moves) / 1e6
else:
    first = last = len(replan) + 1
    adopt, mb = "-", 0.0
def tps(rows, lo):
    sel = [j for j in rows if j["step"] >= lo]
    t = sum(j["step_time_s"] for j in sel)
    return sum(j["tokens"] for j in sel) / t if t > 0 else float("nan")
def whole(rows):  # migration time included
    t = sum(j["step_time_s"] + j.get("migration", {}).get("time_s", 0.0) for j in rows)
    return sum(j["tokens"] for j in rows) / t
s, r, i = tps(static, first), tps(replan, first), tps(ideal, first)
settled = tps(replan, last) / tps(ideal, last)
print(f"{name:<12} {s:8.1f} {r:8.1f} {i:8.1f} {r / i:8.3f} {settled:8.3f} {r / s:8.2f} "
      f"{adopt:>6} {mb:9.3f} {whole(replan) / whole(static):7.2f}")
for j in moves:
    print(f"    after step {j['step']}: -> {j['migration']['to']}, "
          f"{j['migration']['bytes'] / 1e6:.3f} MB over the network "
          f"({j['migration']['local_bytes'] / 1e6:.3f} MB kept in place), "
          f"{j['migration']['time_s'] * 1e3:.1f} ms")
PY
  grep -h "re-plan (started" "$DIR/replan.log" | sed 's/^/    /' | cut -c1-200
done
cat <<EOF
tokens/s on the $CLOCK clock over the steps from the first adopted plan on (static and ideal over
the same steps); rp/ideal: re-planned / ideal there, settled: the same from the last adopted plan
on; rp/stat: re-planned / static; adopt: steps from the onset to the first/last step under an
adopted plan; migr MB: network bytes of every migration; whole: re-planned / static over every
step of the run, migration time included.
EOF
