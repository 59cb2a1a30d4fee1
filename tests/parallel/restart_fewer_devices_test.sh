#!/usr/bin/env bash
# Restart on fewer devices (issue 6 acceptance): an mpiexec run of the tiny model on a 4-device
# emulated cluster saves a checkpoint every 3 steps; one rank is killed with SIGKILL mid-run; then
# `motley train RUN3.yaml --auto-plan --resume` on the cluster without that device plans the
# 3-device cluster and continues from the last complete checkpoint. Its per-step losses must
# equal (1e-5 relative, from the metrics JSONL) those of
#   - a run started from a copy of that same checkpoint under the plan `motley plan RUN3.yaml`
#     writes (ranks as threads, `--plan`), and
#   - the uninterrupted 4-device run (plan invariance: checkpoints are plan-independent).
# The 4-device run is paced on the wall clock (`--clock wall`, about 0.4 s a step) so that the
# kill lands mid-run; nothing here measures time (CTest's TIMEOUT is the only clock).
#
# Usage: restart_fewer_devices_test.sh MPIEXEC MOTLEY   (run by CTest, label mpi; exit 77 = skip)
set -uo pipefail
MPIEXEC=${1:-}
MOTLEY=$2
VICTIM=2  # world rank 2 drives device 2 (a slow device); RUN3's cluster lacks one slow device
# shellcheck source=../lib/mpi_four_ranks.sh
source "$(dirname "$0")/../lib/mpi_four_ranks.sh"
require_mpiexec "$MPIEXEC"
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 not found (it parses the metrics JSONL)"; exit 77
fi
WORK=$(mktemp -d)
MPI_PID=""
cleanup() {
  [[ -n "$MPI_PID" ]] && kill -KILL "$MPI_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# --- fixtures: the 4-device cluster, the same without one slow device, run files, 4-rank plan ---
write_four_device_cluster "$WORK/cluster4.yaml"
sed 's/^name: four/name: three/; s/device_type: slow, device_count: 2/device_type: slow, device_count: 1/' \
  "$WORK/cluster4.yaml" >"$WORK/cluster3.yaml"
# run_file NAME CLUSTER CHECKPOINT_DIR METRICS
run_file() {
  cat >"$WORK/$1.yaml" <<EOF
cluster: $2
model: {preset: tiny, num_blocks: 4, num_heads: 8, num_kv_heads: 8}
train:
  global_batch: 8
  seq_len: 32
  steps: 30
  seed: 7
  optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 3}
  val_every: 0
  metrics_path: $4
  checkpoint: {dir: $3, every_steps: 3, keep_last: 3}
EOF
}
run_file run4 cluster4.yaml "$WORK/ckpt" "$WORK/killed.jsonl"
run_file reference cluster4.yaml "$WORK/ckpt_reference" "$WORK/reference.jsonl"
run_file run3 cluster3.yaml "$WORK/ckpt" "$WORK/auto.jsonl"
run_file copy3 cluster3.yaml "$WORK/ckpt_copy" "$WORK/copy.jsonl"
write_dp2_pp2_plan "$WORK/plan4.json"
cd "$WORK" || exit 1

# --- the uninterrupted 4-device run (threads, virtual clock): the reference trajectory ---
"$MOTLEY" train reference.yaml --plan plan4.json >reference.log 2>&1 ||
  { cat reference.log; fail "the reference run failed"; }

# --- the 4-device run under mpiexec; kill rank $VICTIM once a checkpoint of step >= 6 exists ---
"$MPIEXEC" -n 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
  "$MOTLEY" train run4.yaml --plan plan4.json --clock wall >mpi.log 2>&1 &
MPI_PID=$!
latest_step() { [[ -f ckpt/latest ]] && sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' ckpt/latest; }
while true; do
  step=$(latest_step)
  [[ -n "$step" && "$step" -ge 6 ]] && break
  kill -0 "$MPI_PID" 2>/dev/null || { cat mpi.log; fail "the mpiexec run ended before step 6"; }
  sleep 0.05
done
VICTIM_PID=$(rank_pid "$MPI_PID" "$VICTIM")
[[ -n "$VICTIM_PID" ]] || fail "no process of rank $VICTIM under mpiexec (pid $MPI_PID)"
echo "latest checkpoint: step $step; killing rank $VICTIM (pid $VICTIM_PID) with SIGKILL"
kill -KILL "$VICTIM_PID"
wait "$MPI_PID"
status=$?
MPI_PID=""
echo "--- mpiexec run (exit status $status) ---"; tail -n 8 mpi.log; echo "---"
[[ $status -ne 0 ]] || fail "the mpiexec run exited 0 although rank $VICTIM was killed"
grep -q "^step 30/30" mpi.log && fail "the mpiexec run reached step 30: the kill came too late"
resume_step=$(latest_step)
[[ -n "$resume_step" && -f "ckpt/step-$(printf %08d "$resume_step")/checkpoint.json" ]] ||
  fail "no complete checkpoint left behind"
ls ckpt
cp -a ckpt ckpt_copy

# --- resume on the 3-device cluster with a new plan: --auto-plan --resume ---
"$MOTLEY" train run3.yaml --auto-plan --resume >auto.log 2>&1 || { cat auto.log; fail "--auto-plan --resume failed"; }
cat auto.log | head -n 6
grep -q "auto-plan for cluster 'three' (3 devices)" auto.log || fail "no auto-plan line"
grep -q "continuing at step $((resume_step + 1))" auto.log ||
  fail "did not continue at step $((resume_step + 1))"

# --- the same checkpoint (copy) under the plan `motley plan` writes, with --plan ---
"$MOTLEY" plan copy3.yaml -o plan3.json --quiet >plan.log 2>&1 || { cat plan.log; fail "motley plan failed"; }
"$MOTLEY" train copy3.yaml --plan plan3.json --resume >copy.log 2>&1 || { cat copy.log; fail "resume with --plan failed"; }

python3 - "$resume_step" <<'EOF' || fail "the trajectories differ"
import json, sys
first = int(sys.argv[1]) + 1
def losses(path):  # step lines only (a resumed run's file starts with a resume record)
    return {j["step"]: j["loss"] for j in map(json.loads, open(path)) if "event" not in j}
def pipelines(plan):  # the layout, without names and comments
    return json.dumps(plan["pipelines"], sort_keys=True)
auto, copy, ref = losses("auto.jsonl"), losses("copy.jsonl"), losses("reference.jsonl")
want = list(range(first, 31))
ok = True
for name, got in (("auto-plan resume", auto), ("--plan resume of the copy", copy)):
    if sorted(got) != want:
        print(f"{name}: steps {sorted(got)}, expected {want}"); ok = False
# The new plan is the planner's 3-device plan, recorded in the checkpoints the resume wrote.
auto_plan = json.load(open("ckpt/step-00000030/checkpoint.json"))["plan"]
if pipelines(auto_plan) != pipelines(json.load(open("plan3.json"))):
    print("the auto-plan differs from `motley plan`'s plan"); ok = False
devices = sorted(d for p in auto_plan["pipelines"] for s in p["stages"] for d in s["devices"])
print(f"new plan on devices {devices}: {auto_plan.get('comment', '')}")
if max(devices) > 2:
    print("the new plan uses a device the 3-device cluster lacks"); ok = False
worst = {"copy": 0.0, "reference": 0.0}
for step in want:
    if step not in auto:
        continue
    for name, other in (("copy", copy), ("reference", ref)):
        if step not in other:
            print(f"step {step}: missing from {name}"); ok = False; continue
        rel = abs(auto[step] - other[step]) / abs(other[step])
        worst[name] = max(worst[name], rel)
        if rel > 1e-5:
            print(f"step {step}: auto-plan loss {auto[step]} vs {name} {other[step]} ({rel:.3g})")
            ok = False
print(f"steps {first}-30: worst relative difference to the --plan resume {worst['copy']:.3g}, "
      f"to the uninterrupted 4-device run {worst['reference']:.3g}")
sys.exit(0 if ok else 1)
EOF
echo "PASS: killed rank $VICTIM after step $step; resumed at step $((resume_step + 1)) on 3 devices"
