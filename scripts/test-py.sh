#!/usr/bin/env bash
# The test suite on another Python (3.12: MWAA 2.11+/3.x and the official Airflow image; 3.13), in its own venv
# (.venv-py<version>, kept and reused while pyproject.toml and this script are unchanged):
#
#   bash scripts/test-py.sh 3.12 [pytest args]
#   SMDIST_INSTALL_ONLY=1 bash scripts/test-py.sh 3.12     # only make the venv
#
# The venv holds the provider with its [local,test] extras and the newest Airflow, as a user's `pip install
# "airflow-smdist[local]"` gets them, and neither torch nor the SageMaker SDK: the only CPU torch on this
# machine's disk is built for Python 3.11 (PyPI's x86_64 torch is a multi-GB CUDA build), and the SDK does not
# install beside Airflow 3 on Python >= 3.12 (sagemaker-core needs importlib-metadata<7). So the run is
# everything that needs neither: installs, imports, DAG parsing, the sagemaker backend on moto, and local jobs of
# the images other than PyTorch's (tests marked `torch` are deselected; tests of the SDK oracle skip). A PyTorch
# image runtime would ask the indexes for torch: a constraint file says no torch at all, so a test that needs one
# and is not marked fails at once rather than downloading gigabytes.
set -euo pipefail
cd "$(dirname "$0")/.."
# every install compiles its bytecode, as pip does (uv does not by default): where PYTHONDONTWRITEBYTECODE is
# set, or a venv is read-only to its user, every interpreter would compile what it imports from source again
# (measured: importing Airflow and the provider 5.2 CPU-s without, 2.3 with; torch 3.7 against 1.8)
export UV_COMPILE_BYTECODE=1
PYV="${1:?usage: test-py.sh <python version, e.g. 3.12> [pytest args]}"; shift
VENV=".venv-py$PYV"
PYTHON="$(bash scripts/find-python.sh "$PYV")"

UV="${UV:-$(command -v uv || true)}"
if [ -z "$UV" ]; then
  [ -x .venv/bin/uv ] || bash scripts/setup.sh
  UV=.venv/bin/uv
fi
# this machine's mirrors, as pip.conf names them for pip (uv does not read pip.conf)
UV_ARGS=(--index-strategy unsafe-best-match)
for idx in /opt/pypi/simple /opt/pypi-more/simple; do [ -d "$idx" ] && UV_ARGS+=(--extra-index-url "file://$idx"); done

stamp="$PYV-$(cat pyproject.toml scripts/test-py.sh | sha1sum | cut -c1-12)"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.smdist-stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "[py$PYV] reusing $VENV"
else
  rm -rf "$VENV"
  "$UV" venv --quiet --seed --python "$PYTHON" "$VENV"
  "$UV" pip install --quiet --python "$VENV/bin/python" "${UV_ARGS[@]}" -e ".[local,test]" >"$VENV.install.log" 2>&1 \
    || { tail -30 "$VENV.install.log"; exit 1; }
  echo "$stamp" >"$VENV/.smdist-stamp"
fi
# the promise of the core install: no CUDA wheel, no torch, no SDK (sagemaker-studio is the Amazon provider's own)
if heavy=$("$UV" pip list --python "$VENV/bin/python" 2>/dev/null | grep -Ei '^(torch|nvidia-|sagemaker|sagemaker-core) ' ); then
  echo "[py$PYV] the install pulled what it must not: $heavy" >&2; exit 1
fi
"$VENV/bin/python" -m compileall -q airflow_smdist >/dev/null
# SMDIST_INSTALL_ONLY=1: make (or check) the venv and stop; CI makes it ahead, while other steps run
[ "${SMDIST_INSTALL_ONLY:-}" != 1 ] || { echo "[py$PYV] $VENV is ready"; exit 0; }
# (in the venv, not /tmp: a job's pip gets the worker's pip constraints, and a namespaced host has its own /tmp)
NO_TORCH="$PWD/$VENV/no-torch-constraint.txt"
echo "torch<0" >"$NO_TORCH"
echo "[py$PYV] $("$VENV/bin/python" -c 'import sys, airflow; print(sys.version.split()[0], "Airflow", airflow.__version__)')"
# (the tests named on the command line, else all of tests/: pytest-phases.sh)
PIP_CONSTRAINT="$NO_TORCH" exec bash scripts/pytest-phases.sh "$VENV/bin/python" "not torch" "$@"
