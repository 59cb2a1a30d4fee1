#!/usr/bin/env bash
# Issue 5 benchmark (wall clock, this machine's CPU, at most 2 ranks): the predictor with a
# profile from `motley profile` against measured step times, for several plans of the small model
# on a two-device CPU cluster (not emulated: ranks are threads of one process on the real CPU
# backend, collectives go through shared memory).
#
#   bench/predict_vs_measured.sh [BUILD_DIR]      (default: build; needs BUILD_DIR/motley)
#
# Steps: ROUNDS rounds (default 5) of, for each plan: (1) `motley profile` measures the small
# model's block, embedding and head at micro-batch sizes 1, 2, 4 with one CPU thread (each rank
# runs one thread, OpenMP and OpenBLAS alike) and, for plans on both cores, one companion thread
# running the same work on the other core as the plan's other rank does (under 2% on this VM,
# but the profile then describes the conditions the plan runs in); (2) `motley predict --profile` gives the
# predicted step time; (3) `motley train --plan` runs STEPS steps and writes its metrics; the
# measured time is the median step_time_s of the steps after the first two (warm-up). Each
# plan's row is the median over the rounds of the predicted and of the measured time. The profile
# is taken again right before each plan's run, and the rounds interleave the plans: on a shared
# machine the background load drifts by 20% or more within a minute, and one profile taken at the
# start was compared with runs under a different load (PROFILE_ONCE=1 profiles once, at the start).
# Prints one row per plan (with each round's error, and the measured forward and backward ms per
# micro-batch of the busiest rank against the predicted ones of its stage) and the mean and
# largest absolute error. Wall-clock numbers: run it on an otherwise idle machine (e.g. under
# `chrt -f 10`), and report what it prints, whatever it is.
set -euo pipefail
BUILD=${1:-build}
MOTLEY=${MOTLEY:-$BUILD/motley}
STEPS=${STEPS:-12}
ROUNDS=${ROUNDS:-5}
PROFILE_ONCE=${PROFILE_ONCE:-0}
[[ -x "$MOTLEY" ]] || { echo "no motley binary at $MOTLEY (build it first)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/motley_pvm.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The cluster's shm link is the shared-memory transport between two ranks of one process; its
# latency and bandwidth are nominal values for this bench (the predictor uses them for the
# pipeline transfers and gradient all-reduces, which are small next to compute here).
cat > "$WORK/run.yaml" <<'YAML'
cluster:
  name: two-cpu-cores
  device_types:
    - {name: cpu, vendor: cpu, peak_flops: 50 GFLOPS, memory: 4 GiB, memory_bandwidth: 10 GB/s}
  link_classes:
    - {name: shm, latency: 5 us, bandwidth: 5 GB/s}
  nodes:
    - {name: local, device_type: cpu, device_count: 2, intra_link: shm}
model: small
train:
  global_batch: 8
  seq_len: 128
  steps: 12
  seed: 1
  threads: 1
  val_every: 0
  optimizer: {lr: 1.0e-3, min_lr: 1.0e-4, warmup_steps: 2}
YAML

plan() {  # name, JSON pipelines
  cat > "$WORK/$1.json" <<JSON
{"format": "motley-plan", "version": 1, "schedule": "1f1b", "pipelines": $2}
JSON
}
stage() {  # first num emb head device
  echo "{\"first_block\": $1, \"num_blocks\": $2, \"has_embedding\": $3, \"has_head\": $4, \"devices\": [$5], \"tp_degree\": 1}"
}
plan single "[{\"micro_batches\": 4, \"micro_batch_size\": 2, \"stages\": [$(stage 0 4 true true 0)]}]"
plan dp2 "[{\"micro_batches\": 2, \"micro_batch_size\": 2, \"stages\": [$(stage 0 4 true true 0)]},
           {\"micro_batches\": 2, \"micro_batch_size\": 2, \"stages\": [$(stage 0 4 true true 1)]}]"
plan dp2_uneven "[{\"micro_batches\": 3, \"micro_batch_size\": 2, \"stages\": [$(stage 0 4 true true 0)]},
                  {\"micro_batches\": 1, \"micro_batch_size\": 2, \"stages\": [$(stage 0 4 true true 1)]}]"
plan pp2 "[{\"micro_batches\": 4, \"micro_batch_size\": 2, \"stages\": [$(stage 0 2 true false 0), $(stage 2 2 false true 1)]}]"
plan pp2_uneven "[{\"micro_batches\": 8, \"micro_batch_size\": 1, \"stages\": [$(stage 0 3 true false 0), $(stage 3 1 false true 1)]}]"
plan pp2_b4 "[{\"micro_batches\": 2, \"micro_batch_size\": 4, \"stages\": [$(stage 0 2 true false 0), $(stage 2 2 false true 1)]}]"

PLANS=(single dp2 dp2_uneven pp2 pp2_uneven pp2_b4)
declare -A DEVICES=([single]=1 [dp2]=2 [dp2_uneven]=2 [pp2]=2 [pp2_uneven]=2 [pp2_b4]=2)
profile() {  # companions: the plan's other devices, busy beside the timed one as in its run
  "$MOTLEY" profile "$WORK/run.yaml" -o "$WORK/profile.json" --micro-batches 1,2,4 --threads 1 \
      --repeats 15 --companions "$1"
}
echo "== motley profile (small model, T=128, micro-batches 1,2,4, 1 thread, 1 companion)"
profile 1
echo "== $ROUNDS round(s) of: for each plan, profile again, predict, train $STEPS steps"
for ((round = 1; round <= ROUNDS; ++round)); do
  for p in "${PLANS[@]}"; do
    [[ "$PROFILE_ONCE" == 1 ]] || profile $((DEVICES[$p] - 1)) > /dev/null
    "$MOTLEY" predict "$WORK/run.yaml" "$WORK/$p.json" --profile "$WORK/profile.json" \
        > "$WORK/$p.$round.pred"
    "$MOTLEY" train "$WORK/run.yaml" --plan "$WORK/$p.json" --steps "$STEPS" \
        --metrics "$WORK/$p.$round.jsonl" > "$WORK/$p.log" 2>&1 ||
        { cat "$WORK/$p.log" >&2; exit 1; }
  done
  echo "   round $round done"
done

python3 - "$WORK" "$ROUNDS" "${PLANS[@]}" <<'PY'
import json, re, statistics, sys
work, rounds, plans = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def one_round(p, r):
    """(predicted s, measured s, busiest rank's measured and predicted fwd/bwd s per micro-batch)"""
    plan = json.load(open(f"{work}/{p}.json"))
    text = open(f"{work}/{p}.{r}.pred").read()
    predicted = float(re.search(r"^iteration ([0-9.eE+-]+) s", text, re.M).group(1))
    stage_pred = {}  # (pipeline, stage) -> (fwd s, bwd s) per micro-batch (predict's table)
    for row in text.splitlines():
        f = row.split()
        if len(f) >= 8 and f[0].isdigit() and f[1].isdigit():
            stage_pred[(int(f[0]), int(f[1]))] = (float(f[6]), float(f[7]))
    steps = [json.loads(l) for l in open(f"{work}/{p}.{r}.jsonl") if l.strip()][2:]
    busiest = max(steps[0]["ranks"], key=lambda x: x["forward_s"] + x["backward_s"])
    mb = plan["pipelines"][busiest["pipeline"]]["micro_batches"]
    def rank(step):
        return next(x for x in step["ranks"] if x["rank"] == busiest["rank"])
    fwd = statistics.median(rank(s)["forward_s"] / mb for s in steps)
    bwd = statistics.median(rank(s)["backward_s"] / mb for s in steps)
    pf, pb = stage_pred[(busiest["pipeline"], busiest["stage"])]
    return predicted, statistics.median(s["step_time_s"] for s in steps), fwd, bwd, pf, pb

print(f"\nmedians over {rounds} round(s); last column: the busiest rank's forward/backward ms per "
      "micro-batch, measured (predicted)")
print(f"{'plan':<12} {'predicted ms':>13} {'measured ms':>12} {'error':>8}   "
      f"{'per round':<28} fwd/bwd per micro-batch")
errs = []
for p in plans:
    rs = [one_round(p, r) for r in range(1, rounds + 1)]
    med = [statistics.median(x[i] for x in rs) for i in range(6)]
    err = (med[0] - med[1]) / med[1]
    errs.append(abs(err))
    per_round = " ".join(f"{100 * (x[0] - x[1]) / x[1]:+.1f}" for x in rs)
    print(f"{p:<12} {1e3 * med[0]:13.3f} {1e3 * med[1]:12.3f} {100 * err:+7.2f}%   {per_round:<28} "
          f"{1e3 * med[2]:.2f}/{1e3 * med[3]:.2f} ({1e3 * med[4]:.2f}/{1e3 * med[5]:.2f})")
print(f"\nmean |error| {100 * sum(errs) / len(errs):.2f}%, largest {100 * max(errs):.2f}% over "
      f"{len(errs)} plans")
PY
