#!/usr/bin/env bash
# Prepares, on a machine with apt (this one), the CPU-side build dependencies that a bare GPU
# machine may lack, as Debian packages for scripts/gpu_check.sh to unpack there (no package
# registry is reachable from the GPU machine). Usage: scripts/gpu_bundle.sh [DIR]
# DIR (default build-gpu-bundle, ignored by git through /build*/) receives debs/*.deb; the device
# run carries DIR/debs only (`carry: ["build-gpu-bundle/debs"]`, 14 MB; gpu_check.sh unpacks into
# DIR/root, about 110 MB, too big to carry). Packages come from the local apt cache when it
# holds them, else `apt-get download` (the ordinary apt client; nothing is installed here).
# Not bundled: Open MPI (optional, off on the GPU machine), Google Benchmark (the GPU benchmark is
# a plain program), ninja (gpu_check.sh falls back to make), CUDA, CMake and the compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-gpu-bundle}
mkdir -p "$dir/debs"
packages=(
  libfmt-dev libfmt9 libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libcli11-dev
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5
  libquadmath0 libgtest-dev libgmock-dev pkgconf pkgconf-bin libpkgconf3 pkg-config
)
for p in "${packages[@]}"; do
  if compgen -G "$dir/debs/${p}_*.deb" > /dev/null; then continue; fi
  cached=$(compgen -G "/var/cache/apt/archives/${p}_*.deb" | head -n 1 || true)
  if [ -n "$cached" ]; then
    cp "$cached" "$dir/debs/"
  else
    (cd "$dir/debs" && apt-get download "$p" > /dev/null 2>&1) \
      || { echo "gpu_bundle: apt-get download $p failed" >&2; exit 1; }
  fi
done
echo "gpu_bundle: $(ls "$dir/debs" | wc -l) packages, $(du -sh "$dir/debs" | cut -f1) in $dir/debs"
