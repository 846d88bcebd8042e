#!/usr/bin/env bash
# Create .venv (once) and install the provider with its local-backend and test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch is pinned to 2.13.0 in the [local] extra (a CPU wheel where one is on local disk)
.venv/bin/python -m pip install --quiet -e ".[local,test]"
