#!/usr/bin/env bash
# Quick start 2: set up, then run the test suite (unit, local backend, moto server, airflow dags test).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest tests -ra -q -p no:cacheprovider "$@"
