#!/usr/bin/env bash
# Quick start 2: set up, then run the test suite (unit, local backend, moto server, airflow dags test): the tests
# not marked slow on 4 pytest-xdist workers, the slow ones (real local jobs) on 2, then the serial ones one at a
# time (scripts/pytest-phases.sh says why). Pytest arguments pass to every phase: paths, -k, --durations.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bash scripts/pytest-phases.sh .venv/bin/python "" "$@"
