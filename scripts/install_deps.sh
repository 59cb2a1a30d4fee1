#!/usr/bin/env bash
# Installs everything motley needs to build and test on Debian 12, from Debian's packages only.
# Safe to run again. Uses sudo when not root.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
packages=(
  cmake ninja-build g++ pkg-config ccache python3 git
  libopenblas-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  iproute2
  # The sanitizer and fuzzing build of scripts/test.sh: clang 14, its runtimes (libFuzzer, ASan,
  # UBSan) and its OpenMP runtime.
  clang-14 libclang-rt-14-dev libomp-14-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install_deps: all packages present"
fi
