#!/usr/bin/env bash
# Kill one rank of a 4-rank mpiexec job mid-collective (issue 3 acceptance): the job must end (no
# hang; CTest's TIMEOUT is the only clock) with a non-zero status, and its output must name the
# lost rank (mpiexec's own report counts).
#
# Usage: kill_rank_test.sh MPIEXEC DRIVER [RANKS] [VICTIM]   (run by CTest, label mpi)
#   DRIVER is motley_comm_mpi_allreduce_loop; mpiexec flags as the other mpi tests.
set -uo pipefail
MPIEXEC=$1
DRIVER=$2
RANKS=${3:-4}
VICTIM=${4:-2}
WORK=$(mktemp -d)
MPI_PID=""
cleanup() {
  [[ -n "$MPI_PID" ]] && kill -KILL "$MPI_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

"$MPIEXEC" -n "$RANKS" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
  "$DRIVER" "$WORK" >"$WORK/out.log" 2>&1 &
MPI_PID=$!

# Wait until every rank is in the all-reduce loop (it wrote its pid after connecting).
while true; do
  ready=$(ls "$WORK"/rank*.pid 2>/dev/null | wc -l)
  [[ "$ready" -ge "$RANKS" ]] && break
  if ! kill -0 "$MPI_PID" 2>/dev/null; then
    echo "FAIL: the job ended before all ranks started"; cat "$WORK/out.log"; exit 1
  fi
  sleep 0.1
done
sleep 0.5  # a few collectives in
VICTIM_PID=$(cat "$WORK/rank$VICTIM.pid")
echo "killing rank $VICTIM (pid $VICTIM_PID) with SIGKILL"
kill -KILL "$VICTIM_PID"

wait "$MPI_PID"
status=$?
MPI_PID=""
echo "--- job output (exit status $status) ---"
cat "$WORK/out.log"
echo "---"
if [[ $status -eq 0 ]]; then
  echo "FAIL: the job exited 0 after rank $VICTIM was killed"; exit 1
fi
# mpiexec: "process rank 2 with PID N on node X exited on signal 9" (Open MPI 4.1 may print PID 0);
# a surviving motley rank: "... rank 2 (world rank 2) of group 'world' ...".
if ! grep -Eq "process rank $VICTIM with PID [0-9]+ .*signal|\(world rank $VICTIM\)" "$WORK/out.log"; then
  echo "FAIL: the output does not name the lost rank $VICTIM"; exit 1
fi
echo "PASS: the job ended (status $status) and named the lost rank $VICTIM"
