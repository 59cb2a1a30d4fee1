# Sourced by scripts/demo.sh and scripts/test.sh: run a long phase quietly.
#   phase LABEL LOG CMD...
# runs CMD with all its output in LOG and prints one line, "LABEL ... ok (12 s)"; on failure it
# prints "FAILED", the log's error lines (or its last lines) and exits with CMD's status.
phase() {
  local label=$1 log=$2
  shift 2
  mkdir -p "$(dirname "$log")"
  local start=$SECONDS rc=0
  printf '%s ... ' "$label"
  "$@" > "$log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    printf 'ok (%d s; log %s)\n' $((SECONDS - start)) "$log"
    return 0
  fi
  printf 'FAILED after %d s (full log: %s)\n' $((SECONDS - start)) "$log"
  if grep -qE 'error:|Error|FAILED|fatal|E: ' "$log"; then
    grep -E -A4 'error:|Error|FAILED|fatal|E: ' "$log" | head -n 80
  else
    tail -n 40 "$log"
  fi
  exit "$rc"
}
