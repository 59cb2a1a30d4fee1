# Shared set-up of the shell tests that run `motley train` as 4 ranks under mpiexec and then stop,
# kill or restart one of them (tests/elastic/stop_rank_test.sh, tests/fault/kill9_train_test.sh,
# tests/parallel/restart_fewer_devices_test.sh). Sourced, not run. Provides:
#   require_mpiexec MPIEXEC        exit 77 (CTest: skipped) when Open MPI's launcher is absent
#   write_four_device_cluster P    the emulated 4-device cluster: 2 fast + 2 slow CPU devices on shm
#   write_dp2_pp2_plan P           2 replicas of 2 stages (fast device first, slow device second)
#   rank_pids PARENT               "RANK PID" for each rank process at most two levels under PARENT
#                                  (mpiexec's children, or the children of a per-rank wrapper)
#   rank_pid PARENT RANK           the process of world rank RANK (empty when there is none)

require_mpiexec() {
  if [[ -z "${1:-}" ]] || ! command -v "$1" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found ('${1:-}'); this test needs Open MPI"
    exit 77
  fi
}

write_four_device_cluster() {
  cat >"$1" <<'YAML'
name: four
device_types:
  - {name: fast, vendor: cpu, peak_flops: 0.6 GFLOPS, memory: 1 GiB, memory_bandwidth: 2 GB/s,
     emulated: {flops: 0.6 GFLOPS, memory_bandwidth: 2 GB/s}}
  - {name: slow, vendor: cpu, peak_flops: 0.2 GFLOPS, memory: 1 GiB, memory_bandwidth: 1 GB/s,
     emulated: {flops: 0.2 GFLOPS, memory_bandwidth: 1 GB/s}}
link_classes:
  - {name: shm, latency: 5 us, bandwidth: 2 GB/s}
nodes:
  - {name: host-fast, device_type: fast, device_count: 2, intra_link: shm}
  - {name: host-slow, device_type: slow, device_count: 2, intra_link: shm}
islands:
  - {name: localhost, nodes: [host-fast, host-slow], link: shm}
YAML
}

write_dp2_pp2_plan() {
  cat >"$1" <<'JSON'
{"format": "motley-plan", "version": 1, "schedule": "1f1b", "recompute": "none",
 "optimizer_sharding": "none", "comment": "dp2 of pp2 on 4 devices",
 "pipelines": [
  {"micro_batches": 2, "micro_batch_size": 2, "stages": [
    {"first_block": 0, "num_blocks": 2, "has_embedding": true, "has_head": false, "devices": [0], "tp_degree": 1},
    {"first_block": 2, "num_blocks": 2, "has_embedding": false, "has_head": true, "devices": [2], "tp_degree": 1}]},
  {"micro_batches": 2, "micro_batch_size": 2, "stages": [
    {"first_block": 0, "num_blocks": 2, "has_embedding": true, "has_head": false, "devices": [1], "tp_degree": 1},
    {"first_block": 2, "num_blocks": 2, "has_embedding": false, "has_head": true, "devices": [3], "tp_degree": 1}]}]}
JSON
}

rank_pids() {
  local child p rank
  for child in $(pgrep -P "$1"); do
    for p in "$child" $(pgrep -P "$child"); do
      rank=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
      # A wrapper and the rank it runs share the environment: the innermost process is the rank.
      [[ -n "$rank" && -z "$(pgrep -P "$p")" ]] && echo "$rank $p"
    done
  done
}

rank_pid() {
  rank_pids "$1" | awk -v r="$2" '$1 == r {print $2; exit}'
}
