#!/usr/bin/env bash
# Test-time tools that motley itself does not need (scripts/test.sh installs them; the demo does
# not): Debian's `chromium` for the browser test of the HTML reports (tests/report), and the
# reference `safetensors` Python reader for one checkpoint test. Best effort: where either cannot
# be installed (offline, no such package, an externally managed Python), its test skips with a
# message, and this script says so.
set -uo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
if ! command -v chromium > /dev/null 2>&1; then
  if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends chromium; }; then
    echo "install_test_tools: chromium not installed; the browser test of the reports will skip"
  fi
fi
if ! python3 -c 'import safetensors, numpy' > /dev/null 2>&1; then
  timeout 120 python3 -m pip install --quiet --disable-pip-version-check safetensors numpy \
    || echo "install_test_tools: python safetensors not installed; its checkpoint test will skip"
fi
exit 0
