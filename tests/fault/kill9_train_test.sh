#!/usr/bin/env bash
# Fault injection (issue 17, label `fault`): SIGKILL of one rank of a 4-rank mpiexec training run
# at seeded random points (which rank, after how many steps, how far into the next), REPS times.
# Each case must
#   - end (no hang; CTest's TIMEOUT is the only guard): the killed rank's process by signal 9, and
#     every other rank's process with a non-zero status (a wrapper records each rank's status);
#   - name what happened on every rank: each surviving rank prints an error naming itself and the
#     killed rank (the lost peer);
#   - leave the last complete checkpoint loadable: `motley train --resume` from it (ranks as
#     threads, the same plan) continues at its step + 1 and trains one more step.
# mpiexec runs with --enable-recovery: without it Open MPI kills the surviving processes as soon
# as one dies, before they can tell what happened (only mpiexec's report would name the killed
# rank). The run is paced on the wall clock (--clock wall, about 0.3 s a step), so kills land
# mid-step. Each case prints its measured time from the kill to the end of mpiexec ("time to
# end"); nothing is asserted on it.
#
# Usage: kill9_train_test.sh MPIEXEC MOTLEY [REPS] [SEED]   (exit 77 = skip)
set -uo pipefail
MPIEXEC=${1:-}
MOTLEY=$2
REPS=${3:-5}
SEED=${4:-17}
# shellcheck source=../lib/mpi_four_ranks.sh
source "$(dirname "$0")/../lib/mpi_four_ranks.sh"
require_mpiexec "$MPIEXEC"
WORK=$(mktemp -d)
MPI_PID=""
cleanup() {
  [[ -n "$MPI_PID" ]] && kill -KILL "$MPI_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$WORK" || exit 1

write_four_device_cluster cluster.yaml
write_dp2_pp2_plan plan.json
run_file() {  # NAME CHECKPOINT_DIR METRICS
  cat >"$1.yaml" <<YAML
cluster: ../cluster.yaml
model: {preset: tiny, num_blocks: 4, num_heads: 8, num_kv_heads: 8}
train:
  global_batch: 8
  seq_len: 32
  steps: 40
  seed: 7
  optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 3}
  val_every: 0
  metrics_path: $3
  checkpoint: {dir: $2, every_steps: 2, keep_last: 2}
YAML
}

# Each rank runs through this wrapper, which records the rank's exit status (128 + N: signal N).
# The survivors end the job with MPI_Abort after their last barrier; the first abort makes Open
# MPI send SIGTERM to every other rank's process group, which may reach a survivor before it has
# exited on its own. The wrapper then records 143 (ended by the job's SIGTERM) instead of dying
# unrecorded: the rank runs in the background so that `wait` returns to the trap at once.
cat >rank.sh <<'SH'
#!/usr/bin/env bash
recorded=""
record() { [[ -n "$recorded" ]] && return; recorded=1; echo "$OMPI_COMM_WORLD_RANK $1" >>"$RANK_STATUS"; }
trap 'record 143; exit 143' TERM
"$@" &
wait $!
status=$?
record "$status"
exit $status
SH
chmod +x rank.sh

RANDOM=$SEED
for rep in $(seq 1 "$REPS"); do
  victim=$((RANDOM % 4))
  after_steps=$((2 + RANDOM % 24))          # steps completed before the kill
  delay_ms=$((RANDOM % 300))                # then this far into the next step
  dir="case$rep"
  mkdir -p "$dir"
  run_file "$dir/run" "$dir/ckpt" "$dir/metrics.jsonl"
  echo "=== case $rep: kill rank $victim with SIGKILL after $after_steps steps + ${delay_ms} ms"
  RANK_STATUS="$PWD/$dir/status" "$MPIEXEC" -n 4 --oversubscribe --bind-to none \
    --mca mpi_yield_when_idle 1 --enable-recovery -x RANK_STATUS \
    ./rank.sh "$MOTLEY" train "$dir/run.yaml" --plan plan.json --clock wall >"$dir/mpi.log" 2>&1 &
  MPI_PID=$!
  while true; do
    done_steps=$( [[ -f "$dir/metrics.jsonl" ]] && wc -l <"$dir/metrics.jsonl" || echo 0)
    [[ "$done_steps" -ge "$after_steps" ]] && break
    kill -0 "$MPI_PID" 2>/dev/null || { cat "$dir/mpi.log"; fail "case $rep: the run ended early"; }
    sleep 0.02
  done
  sleep "$(awk "BEGIN {print $delay_ms / 1000}")"
  victim_pid=$(rank_pid "$MPI_PID" "$victim")
  [[ -n "$victim_pid" ]] || fail "case $rep: no process of rank $victim under mpiexec"
  kill_at=$(date +%s.%N)
  kill -KILL "$victim_pid"
  # The case ends when every rank has ended (recorded its status). With --enable-recovery
  # mpiexec itself may wait on after its last process ended; it is ended here.
  while [[ $(cat "$dir/status" 2>/dev/null | wc -l) -lt 4 ]] && kill -0 "$MPI_PID" 2>/dev/null; do
    sleep 0.02
  done
  end_at=$(date +%s.%N)
  sleep 0.5
  kill -TERM "$MPI_PID" 2>/dev/null
  wait "$MPI_PID"
  MPI_PID=""
  echo "--- case $rep: every rank ended; time to end $(awk "BEGIN {printf \"%.2f\", $end_at - $kill_at}") s"
  grep -v -E '^step |PMIX ERROR' "$dir/mpi.log" | tail -n 12
  echo "rank exit statuses: $(sort "$dir/status" | tr '\n' ' ')"
  grep -q "^step 40/40" "$dir/mpi.log" && fail "case $rep: the run finished: the kill came too late"
  # Every rank ended, and how: the killed one by signal 9, the others with an error status.
  for r in 0 1 2 3; do
    rank_status=$(awk -v r="$r" '$1 == r {print $2}' "$dir/status")
    [[ -n "$rank_status" ]] || fail "case $rep: rank $r recorded no exit status"
    if [[ $r -eq $victim ]]; then
      [[ "$rank_status" -eq 137 ]] || fail "case $rep: the killed rank $r ended with $rank_status"
      continue
    fi
    [[ "$rank_status" -ne 0 ]] || fail "case $rep: rank $r exited 0 although rank $victim was lost"
    # ... and each survivor names itself and the lost rank.
    grep -Eq "rank $r: .*(world rank|rank) $victim[^0-9]" "$dir/mpi.log" ||
      fail "case $rep: rank $r printed no error naming the lost rank $victim"
  done
  # The last complete checkpoint loads: resume from it and train one step.
  latest=$(sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' "$dir/ckpt/latest" 2>/dev/null)
  if [[ -z "$latest" ]]; then
    echo "case $rep: no checkpoint was complete before the kill (kill after $after_steps steps)"
    [[ $after_steps -lt 2 ]] || fail "case $rep: no checkpoint after $after_steps steps"
    continue
  fi
  sed -i "s/steps: 40/steps: $((latest + 1))/; s|metrics_path: .*|metrics_path: $dir/resume.jsonl|" \
    "$dir/run.yaml"
  "$MOTLEY" train "$dir/run.yaml" --plan plan.json --resume >"$dir/resume.log" 2>&1 ||
    { cat "$dir/resume.log"; fail "case $rep: resuming from step $latest failed"; }
  grep -q "continuing at step $((latest + 1))" "$dir/resume.log" ||
    { cat "$dir/resume.log"; fail "case $rep: did not continue at step $((latest + 1))"; }
  echo "case $rep: resumed from the step-$latest checkpoint"
done
echo "PASS: $REPS kill -9 cases ended with every rank named and a loadable checkpoint"
