#!/usr/bin/env bash
# Under mpiexec only rank 0 prints progress: a 4-process run of the shipped emulated cluster
# prints its header, each progress line, the validation line and the summary once, and every
# line has the single progress format. Usage: mpi_progress_test.sh MPIEXEC MOTLEY SOURCE_DIR
# (skips with 77 when mpiexec is missing).
set -euo pipefail
mpiexec=$1 motley=$2 source=$3
command -v "$mpiexec" > /dev/null || { echo "mpiexec not found"; exit 77; }
out=$("$mpiexec" -n 4 --oversubscribe --bind-to none "$motley" train \
      "$source/examples/runs/hetero-4.yaml" --plan "$source/examples/plans/hetero-4-balanced.json" \
      --steps 2 --log-interval 1 2>&1) || { echo "$out"; exit 1; }
echo "$out"
count() { grep -c -- "$1" <<< "$out" || true; }
[ "$(count '^parallel run: plan ')" = 1 ] || { echo "FAIL: header not printed exactly once"; exit 1; }
[ "$(count '^step 1/2 | loss ')" = 1 ] || { echo "FAIL: step 1 not printed exactly once"; exit 1; }
[ "$(count '^step 2/2 | loss .* tok/s virtual .* ETA ')" = 1 ] || {
  echo "FAIL: step 2 not printed exactly once in the progress format"; exit 1; }
[ "$(count '^step 2: val_loss ')" = 1 ] || { echo "FAIL: validation not printed exactly once"; exit 1; }
[ "$(count '^done: 2 steps on 4 ranks')" = 1 ] || { echo "FAIL: summary not printed once"; exit 1; }
echo "mpi_progress_test: ok"
