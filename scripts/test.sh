#!/usr/bin/env bash
# Quick start 2: set up, then run the test suite (unit, local backend, moto server, airflow dags test): the tests
# not marked slow on pytest-xdist workers, then the slow ones (real local jobs) one at a time
# (scripts/pytest-two-phases.sh says why). Pytest arguments pass to both phases: paths, -k, --durations.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bash scripts/pytest-two-phases.sh .venv/bin/python "" "$@"
