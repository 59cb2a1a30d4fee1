#!/usr/bin/env bash
# CTest wrapper of hf_interop_test.py: runs it with the Python of VENV (made by
# scripts/install_hf_test_tools.sh). Exit 77 (CTest: skipped) when VENV cannot import torch,
# transformers, safetensors and numpy, except under CI=true, where that is a failure.
# Usage: hf_interop_test.sh VENV MOTLEY_BINARY
set -euo pipefail
venv="$1"
motley="$2"
py="$venv/bin/python"
if ! "$py" -c 'import torch, transformers, safetensors, numpy' > /dev/null 2>&1; then
  msg="$venv cannot import torch, transformers, safetensors and numpy: run scripts/install_hf_test_tools.sh $venv"
  if [ "${CI:-}" = "true" ]; then
    echo "FAILED (CI=true): $msg"
    exit 1
  fi
  echo "SKIPPED: $msg"
  exit 77
fi
exec env HF_HUB_OFFLINE=1 "$py" "$(dirname "$0")/hf_interop_test.py" "$motley"
