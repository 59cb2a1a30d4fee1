#!/usr/bin/env bash
# A stopped rank ends the job (issue 14 acceptance): in each of RUNS runs, `motley train` runs 4
# ranks under mpiexec (2 replicas of 2 stages on an emulated 4-device cluster, checkpoints every 20
# steps); rank (run - 1) mod 4 gets `kill -STOP` at a moment drawn from a seeded generator (so at a
# random point of its step). Every survivor must exit with the liveness error naming the
# stopped rank ("world rank V ... silent"), the survivors' checkpoint, when they report one, must be
# complete, and no process of the job may be left (the stopped one included: MPI_Abort, not
# MPI_Finalize, ends the job). Prints each run's time from the stop to the end of mpiexec and the
# mean and largest over the runs; nothing here asserts a time (CTest's TIMEOUT only guards a hang).
#
# Usage: stop_rank_test.sh MPIEXEC MOTLEY [RUNS] [SEED]   (CTest: labels mpi, fault; 77 = skip)
set -uo pipefail
MPIEXEC=${1:-}
MOTLEY=$2
RUNS=${3:-5}
SEED=${4:-14}
# shellcheck source=../lib/mpi_four_ranks.sh
source "$(dirname "$0")/../lib/mpi_four_ranks.sh"
require_mpiexec "$MPIEXEC"
WORK=$(mktemp -d)
MPI_PID=""
cleanup() {
  if [[ -n "$MPI_PID" ]]; then
    for child in $(pgrep -P "$MPI_PID"); do kill -CONT "$child" 2>/dev/null; done
    kill -KILL "$MPI_PID" 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
RANDOM=$SEED

write_four_device_cluster "$WORK/cluster.yaml"
write_dp2_pp2_plan "$WORK/plan.json"
cd "$WORK" || exit 1

times=()
for run in $(seq 1 "$RUNS"); do
  rm -rf ckpt out.log
  cat >run.yaml <<'EOF'
cluster: cluster.yaml
model: {preset: tiny, num_blocks: 4, num_heads: 8, num_kv_heads: 8}
train:
  global_batch: 8
  seq_len: 32
  steps: 1000000
  seed: 7
  optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 3}
  val_every: 0
  checkpoint: {dir: ckpt, every_steps: 20, keep_last: 2}
EOF
  victim=$(((run - 1) % 4))
  delay_ms=$((RANDOM % 1500))
  "$MPIEXEC" -n 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --tag-output \
    "$MOTLEY" train run.yaml --plan plan.json >out.log 2>&1 &
  MPI_PID=$!
  # Training is under way once the first checkpoint is committed.
  until [[ -f ckpt/latest ]]; do
    kill -0 "$MPI_PID" 2>/dev/null || { cat out.log; fail "run $run: the job ended before training"; }
    sleep 0.05
  done
  pids=()
  victim_pid=""
  while read -r rank child; do
    pids+=("$child")
    [[ "$rank" == "$victim" ]] && victim_pid=$child
  done < <(rank_pids "$MPI_PID")
  [[ ${#pids[@]} -eq 4 && -n "$victim_pid" ]] || fail "run $run: did not find the 4 rank processes"
  sleep "$(awk -v ms="$delay_ms" 'BEGIN{print ms / 1000}')"
  start=$(date +%s.%N)
  kill -STOP "$victim_pid"
  wait "$MPI_PID"
  status=$?
  end=$(date +%s.%N)
  MPI_PID=""
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f", b - a}')
  times+=("$elapsed")
  echo "run $run: stopped world rank $victim (pid $victim_pid) ${delay_ms} ms after the first checkpoint; mpiexec exited $status after $elapsed s"
  [[ $status -ne 0 ]] || { cat out.log; fail "run $run: the job exited 0"; }
  for r in 0 1 2 3; do
    [[ $r -eq $victim ]] && continue
    line=$(grep -E "^\[[0-9]+,$r\]<stderr>:motley train: " out.log | head -n 1)
    if ! grep -q "world rank $victim" <<<"$line" || ! grep -q "silent" <<<"$line"; then
      cat out.log
      fail "run $run: survivor rank $r did not report the liveness error naming world rank $victim"
    fi
    echo "  rank $r: ${line#*; lost }" | cut -c1-300
    saved=$(sed -n 's/.*saved the last completed step [0-9]* to \([^ ]*\) .*/\1/p' <<<"$line")
    if [[ -n "$saved" && ! -f "$saved/checkpoint.json" ]]; then
      fail "run $run: rank $r names $saved, which is not a complete checkpoint"
    fi
  done
  # mpiexec can return while a killed rank is still tearing down (state R under load, seen in
  # CI): give each process a grace period to end before calling it left over. This is a hang
  # detector, not a speed bound.
  for p in "${pids[@]}"; do
    state=$(ps -o stat= -p "$p" 2>/dev/null | tr -d ' ')
    for _ in $(seq 1 300); do
      [[ -n "$state" && "$state" != Z* ]] || break
      sleep 0.1
      state=$(ps -o stat= -p "$p" 2>/dev/null | tr -d ' ')
    done
    if [[ -n "$state" && "$state" != Z* ]]; then
      ps -o pid,stat,args -p "$p"
      fail "run $run: process $p of the job is left (state $state)"
    fi
  done
done
awk -v list="${times[*]}" 'BEGIN{n = split(list, t, " "); s = 0; m = 0;
  for (i = 1; i <= n; ++i) { s += t[i]; if (t[i] > m) m = t[i] }
  printf "PASS: %d runs; stop to the last exit: mean %.2f s, largest %.2f s\n", n, s / n, m}'
