#!/usr/bin/env bash
# Create .venv (once) and install the provider with its local-backend and test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
# every install compiles its bytecode, as pip does (uv does not by default): where PYTHONDONTWRITEBYTECODE is
# set, or a venv is read-only to its user, every interpreter would compile what it imports from source again
# (measured: importing Airflow and the provider 5.2 CPU-s without, 2.3 with; torch 3.7 against 1.8)
export UV_COMPILE_BYTECODE=1
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# install once: again only when what it installs from changes (pyproject.toml, the extras, this script, the
# Python), so `scripts/test.sh` and `scripts/lint.sh` start at once on a set-up checkout (the install is
# editable: a change to the package's code needs none)
EXTRAS="${SMDIST_EXTRAS:-local,test,torch-examples,oracle}"
STAMP=".venv/.smdist-setup-stamp"
stamp="$(cat pyproject.toml scripts/setup.sh | sha1sum | cut -c1-12) $EXTRAS $(.venv/bin/python -V 2>&1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$STAMP"
  # the test venv: the local backend and the tests, plus what only Python 3.11 gets cheaply here: torch 2.13.0 in
  # the worker (torch-examples: the CPU wheel on this machine's disk is for 3.11 only) and the SageMaker SDK as the
  # tests' oracle (oracle: sagemaker-core needs importlib-metadata<7, which Airflow 3 on Python >= 3.12 cannot have).
  # SMDIST_EXTRAS overrides the extras (scripts/test-py.sh: "local,test" on 3.12 and 3.13).
  # Installed by uv (the [local] extra's own installer): measured here 43 s against pip's 260-297 s for the same
  # packages (the same versions but one). uv reads no pip.conf: the find-links and mirrors pip is configured
  # with are passed on (torch 2.13.0's CPU wheel lies in PIP_FIND_LINKS here)
  .venv/bin/python -m pip install --quiet uv
  uv_args=(--index-strategy unsafe-best-match)
  for idx in /opt/pypi/simple /opt/pypi-more/simple; do [ -d "$idx" ] && uv_args+=(--extra-index-url "file://$idx"); done
  for links in ${PIP_FIND_LINKS:-/opt/wheels}; do [ -e "$links" ] && uv_args+=(--find-links "$links"); done
  .venv/bin/uv pip install --quiet --python .venv/bin/python "${uv_args[@]}" --upgrade pip -e ".[$EXTRAS]"
  echo "$stamp" >"$STAMP"
else
  echo "setup: .venv is up to date with pyproject.toml ([$EXTRAS]); nothing to install"
fi
# nftables' nft gives namespaced simulated hosts NAT to the worker's network (backends/local/job/hostnet.py); as
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
