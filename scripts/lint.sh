#!/usr/bin/env bash
# Guard rails: ruff (pyproject's rule set, no function above cyclomatic complexity 15) and mypy (strict for the
# modules listed in pyproject's [tool.mypy] files). Fails when either finds a problem.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
"$PY" -m ruff check airflow_smdist dags tests benchmarks scripts
"$PY" -m mypy
