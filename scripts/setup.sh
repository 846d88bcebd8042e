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
# nftables' nft gives namespaced simulated hosts NAT to the worker's network (backends/local/hostnet.py); as
# root (CI) it is installed here, elsewhere hosts reach only the worker's loopback endpoints, and jobs say so
if ! command -v nft >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables >/tmp/smdist-apt-nftables.log 2>&1 \
    || { apt-get update -q >>/tmp/smdist-apt-nftables.log 2>&1 \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables >>/tmp/smdist-apt-nftables.log 2>&1; } \
    || echo "setup: apt-get install nftables failed (see /tmp/smdist-apt-nftables.log): hosts get no NAT" >&2
fi
# iproute2's ip makes namespaced hosts' bridge, links, addresses and routes (hostnet.py); without it hosts run in
# the fallback mode, and jobs say so
if ! command -v ip >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 >/tmp/smdist-apt-iproute2.log 2>&1 \
    || { apt-get update -q >>/tmp/smdist-apt-iproute2.log 2>&1 \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 >>/tmp/smdist-apt-iproute2.log 2>&1; } \
    || echo "setup: apt-get install iproute2 failed (see /tmp/smdist-apt-iproute2.log): hosts run without namespaces" >&2
fi
# the provider's bytecode, as `pip install` of a wheel compiles it: an editable install has none, and where
# PYTHONDONTWRITEBYTECODE is set every local job's supervisor would compile its modules again (~0.05 s a job);
# Python checks each file's mtime, so an edited module is compiled afresh, never run stale
.venv/bin/python -m compileall -q airflow_smdist >/dev/null
