#!/usr/bin/env bash
# The GPU check (issue 7), one command on a bare GPU machine that has a CUDA toolkit, CMake and a
# C++ compiler and reaches no package registry:
#   scripts/gpu_check.sh OUTDIR
# 1. unpacks the CPU-side dependencies bundled by scripts/gpu_bundle.sh (build-gpu-bundle/debs,
#    or $MOTLEY_GPU_BUNDLE) into build-gpu-bundle/root and points CMake, pkg-config and the
#    loader at them (packages already on the machine are then not used);
# 2. configures and builds the gpu-labelled tests and the GPU step benchmark (Release, CUDA
#    architecture of the visible GPU, else 80;90; MPI and Google Benchmark off);
# 3. runs every gpu-labelled test (ctest -L gpu) and the gpt2-124m bf16 training-step benchmark
#    (tokens/s, MFU against 989 TFLOP/s and against the bf16 GEMM rate measured in the same run);
# 4. writes OUTDIR/summary.json (and summary.txt, the logs, the benchmark JSON, a JUnit file).
# Without a GPU it still builds, the tests report SKIPPED, and summary.json says "gpu": "none".
# Every phase runs under a timeout so that the whole stays within 8 minutes (480 s).
# Exit status: 0 when the build succeeded and no test failed (skips are not failures).
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
root=$(pwd)
t0=$(date +%s)
budget_s=${MOTLEY_GPU_CHECK_BUDGET_S:-470}
# Seconds left of the budget minus $1 (default 0), at least 10 (a timeout must be positive).
left() {
  local s=$(( budget_s - ($(date +%s) - t0) - ${1:-0} ))
  [ "$s" -lt 10 ] && s=10
  echo "$s"
}
log() { echo "gpu_check [$(( $(date +%s) - t0 ))s]: $*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
jobs=$(nproc 2> /dev/null || echo 4)

# --- the GPU ---------------------------------------------------------------------------------
gpu=none
arch="80;90"
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > "$out/nvidia-smi.txt" 2>&1; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -n 1)
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -n 1 | tr -d '. ')
  [ -n "$cap" ] && arch=$cap
  nvidia-smi >> "$out/nvidia-smi.txt" 2>&1
fi
[ -z "$gpu" ] && gpu=none
log "GPU: $gpu (CUDA architectures $arch), $jobs cores"

# --- the bundled dependencies ----------------------------------------------------------------
bundle=${MOTLEY_GPU_BUNDLE:-$root/build-gpu-bundle}
cmake_extra=()
if [ -d "$bundle/debs" ]; then
  prefix=$bundle/root
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in "$bundle"/debs/*.deb; do
    if command -v dpkg-deb > /dev/null 2>&1; then
      dpkg-deb -x "$deb" "$prefix"
    else  # ar (binutils) + tar: a .deb is an ar archive holding data.tar.*
      tmp=$(mktemp -d) && (cd "$tmp" && ar x "$deb" && tar -xf data.tar.* -C "$prefix") && rm -rf "$tmp"
    fi
  done
  # The packages say prefix=/usr; here they live under $prefix/usr.
  find "$prefix" -name '*.pc' -exec sed -i "s|=/usr|=$prefix/usr|g" {} +
  lib=$prefix/usr/lib/x86_64-linux-gnu
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$lib/openblas-pthread/pkgconfig:$lib/pkgconfig:$prefix/usr/share/pkgconfig"
  export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cmake_extra+=("-DPKG_CONFIG_EXECUTABLE=$prefix/usr/bin/pkgconf")
  log "dependencies: $(ls "$bundle/debs" | wc -l) bundled packages unpacked into $prefix"
else
  log "dependencies: no bundle at $bundle/debs, using the machine's packages"
fi

# --- configure and build ---------------------------------------------------------------------
build=${MOTLEY_GPU_BUILD:-$root/build-gpu}
gen=(-G "Unix Makefiles")
command -v ninja > /dev/null 2>&1 && gen=(-G Ninja)
build_ok=false
if timeout "$(left)" cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMOTLEY_WITH_MPI=OFF -DMOTLEY_BUILD_BENCH=OFF \
    "${cmake_extra[@]}" > "$out/configure.log" 2>&1; then
  targets=(motley_backend_ops_cuda_test motley_cuda_pipeline_test motley_cuda_step_bench)
  grep -q "motley_comm_nccl_test" "$build"/CMakeFiles/TargetDirectories.txt 2> /dev/null \
    && targets+=(motley_comm_nccl_test)
  log "configured ($(grep -o 'motley: CUDA.*' "$out/configure.log" | head -n 1)); building ${targets[*]}"
  if timeout "$(left)" cmake --build "$build" -j "$jobs" --target "${targets[@]}" \
      > "$out/build.log" 2>&1; then
    build_ok=true
  fi
fi
log "build: $build_ok (logs: configure.log, build.log)"

# --- gpu tests ---------------------------------------------------------------------------------
passed=0 failed=0 skipped=0 total=0
if $build_ok; then
  timeout "$(left 150)" ctest --test-dir "$build" -L gpu --output-on-failure \
    --timeout 300 --output-junit "$out/ctest_gpu.xml" > "$out/ctest_gpu.log" 2>&1
  total=$(grep -c "Test *#" "$out/ctest_gpu.log" || true)
  passed=$(grep -c "Test *#.*Passed" "$out/ctest_gpu.log" || true)
  skipped=$(grep -c "Test *#.*Skipped" "$out/ctest_gpu.log" || true)
  failed=$(( total - passed - skipped ))
  log "gpu tests: $total run, $passed passed, $failed failed, $skipped skipped (ctest_gpu.log)"
fi

# --- the training-step benchmark ------------------------------------------------------------
bench='{"status": "not run"}'
if $build_ok; then
  exe=$(find "$build" -name motley_cuda_step_bench -type f | head -n 1)
  if [ -n "$exe" ] && [ "$(left)" -gt 20 ]; then
    timeout "$(left 5)" "$exe" --preset gpt2-124m --precision bf16 --batch 16 --seq 1024 \
      --steps 10 --warmup 2 --json "$out/bench_gpt2_124m_bf16.json" > "$out/bench.log" 2>&1
    [ -s "$out/bench_gpt2_124m_bf16.json" ] && bench=$(cat "$out/bench_gpt2_124m_bf16.json")
    log "benchmark: $bench"
  fi
fi

elapsed=$(( $(date +%s) - t0 ))
cat > "$out/summary.json" <<JSON
{"gpu": "$gpu", "cuda_architectures": "$arch", "build_ok": $build_ok,
 "gpu_tests": {"total": $total, "passed": $passed, "failed": $failed, "skipped": $skipped},
 "benchmark": $bench,
 "elapsed_s": $elapsed}
JSON
log "done in ${elapsed}s: $out/summary.json"
$build_ok && [ "$failed" -eq 0 ]
