#!/usr/bin/env bash
# The smaller compatibility run on the oldest Airflow line supported (2.11, as MWAA runs it): provider
# import and registration, example DAG parse, and one DAG end to end under `airflow dags test`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv-airflow2
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "apache-airflow==2.11.2" "apache-airflow-providers-amazon>=9.22" \
  "torch==2.13.0" -e ".[test]"
exec "$VENV/bin/python" -m pytest tests/compat -ra -q -p no:cacheprovider "$@"
