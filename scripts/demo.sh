#!/usr/bin/env bash
# Quick start 1: set up, then run the main example DAG end to end on the local backend.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export AIRFLOW_HOME="${AIRFLOW_HOME:-$PWD/airflow_home}"
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
mkdir -p "$AIRFLOW_HOME"
.venv/bin/airflow db migrate > "$AIRFLOW_HOME/db-migrate.log" 2>&1 || { cat "$AIRFLOW_HOME/db-migrate.log"; exit 1; }
.venv/bin/airflow dags test "${1:-smdist_torch_distributed}"
