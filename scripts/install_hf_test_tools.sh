#!/usr/bin/env bash
# Test-time tools of the Hugging Face interop test (tests/hf), not dependencies of motley itself:
# Debian's python3-torch (and python3-venv), and a virtual environment VENV (default
# build/hf-venv) made with Debian's /usr/bin/python3 -m venv --system-site-packages (the python3
# first on PATH may be another interpreter that cannot see Debian's torch) holding, from PyPI,
# transformers==4.40.2, safetensors and numpy<2. Safe to run again: an environment that already
# imports them is kept. Exits non-zero when something cannot be installed (the caller decides
# whether that fails the run). Uses sudo when not root.
set -euo pipefail
venv="${1:-build/hf-venv}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
check='import torch, transformers, safetensors, numpy; assert transformers.__version__ == "4.40.2"; assert int(numpy.__version__.split(".")[0]) < 2'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" > /dev/null 2>&1; then
  echo "install_hf_test_tools: $venv is ready"
  exit 0
fi
missing=()
for p in python3-torch python3-venv; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_hf_test_tools: installing ${missing[*]} (Debian)"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
echo "install_hf_test_tools: installing transformers==4.40.2, safetensors, numpy<2 into $venv (PyPI)"
timeout 600 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "transformers==4.40.2" safetensors "numpy<2"
"$venv/bin/python" -c "$check"
echo "install_hf_test_tools: $venv is ready"
