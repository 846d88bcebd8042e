#!/usr/bin/env bash
# End-to-end test of a real deployment (CI calls it from .ci/run): scripts/airflow-local.sh starts PostgreSQL,
# the api-server, the scheduler (LocalExecutor, parallelism 4), the dag-processor and the triggerer, with the
# example DAGs plus one DAG on the sagemaker backend against a moto server. scripts/e2e/test_deployment.py
# then triggers runs through the REST API with a token, as the UI does, drills two faults (kill -9 of a
# task's worker process, kill -9 of the triggerer), and checks states, task logs, XComs and links;
# scripts/e2e/test_trigger_moves.py moves a deferred sagemaker-backend job's trigger to a triggerer with another
# home directory and checks that the task log holds every line once;
# scripts/e2e/test_browser.py looks at the UI in headless Chromium and keeps screenshots in
# $E2E_ARTIFACTS (default: artifacts/e2e/, gitignored). Everything is stopped and removed at the end.
#
#   bash scripts/e2e-deployment.sh            # VENV=... to use another virtualenv than ./.venv
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
export VENV="${VENV:-$REPO/.venv}"
PY="$VENV/bin/python"
export E2E_ARTIFACTS="${E2E_ARTIFACTS:-$REPO/artifacts/e2e}"
STARTED=$(date +%s)
WORK="$(mktemp -d /tmp/smdist-e2e.XXXXXX)"
export AIRFLOW_LOCAL_DIR="$WORK/deployment"
free_port() { "$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
export AIRFLOW_LOCAL_PORT="$(free_port)" AIRFLOW_LOCAL_PG_PORT="$(free_port)"
MOTO_PORT="$(free_port)"
# the moto server scripts/e2e/test_trigger_moves.py runs inside the test process (it drives the job's states and lines)
export E2E_MOTO_LIVE_PORT="$(free_port)"
mkdir -p "$E2E_ARTIFACTS"

cleanup() {
  # a timeout around this script (.ci/run) ends it with SIGTERM: end the tests (their own process group) too
  [ -n "${TESTS_PID:-}" ] && kill -TERM "$TESTS_PID" 2>/dev/null || true
  bash scripts/airflow-local.sh stop >/dev/null 2>&1 || true
  [ -n "${MOTO_PID:-}" ] && kill "$MOTO_PID" 2>/dev/null || true
  # keep the components' logs with the screenshots, then remove everything else
  rm -rf "$E2E_ARTIFACTS/component-logs" "$E2E_ARTIFACTS/task-logs"
  cp -r "$AIRFLOW_LOCAL_DIR/logs" "$E2E_ARTIFACTS/component-logs" 2>/dev/null || true
  cp -r "$AIRFLOW_LOCAL_DIR/home/logs" "$E2E_ARTIFACTS/task-logs" 2>/dev/null || true
  if [ -s "$AIRFLOW_LOCAL_DIR/pgdata.path" ]; then rm -rf "$(cat "$AIRFLOW_LOCAL_DIR/pgdata.path")"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# browser check: Debian's Chromium and its driver (selenium drives it)
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "[e2e] installing chromium and chromium-driver (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >"$WORK/apt.log" 2>&1 \
      || { apt-get update -q >>"$WORK/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >>"$WORK/apt.log" 2>&1; } \
      || { cat "$WORK/apt.log"; exit 1; }
  else
    echo "[e2e] needs chromium and chromium-driver: sudo apt-get install -y chromium chromium-driver" >&2; exit 1
  fi
fi
"$PY" -c "import selenium, psycopg2, asyncpg, moto" 2>/dev/null || "$PY" -m pip install --quiet -e ".[test]"

# the DAG folder: the example DAGs and the e2e DAG on the sagemaker backend (moto)
mkdir -p "$WORK/dags"
ln -s "$REPO"/dags/* "$WORK/dags/"
ln -s "$REPO"/scripts/e2e/dags/*.py "$WORK/dags/"
export AIRFLOW_LOCAL_DAGS="$WORK/dags"

# a moto server on loopback plays SageMaker + S3 for the sagemaker-backend DAG
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"$WORK/moto.log" 2>&1 &
MOTO_PID=$!
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1
export AIRFLOW_CONN_AWS_MOTO="{\"conn_type\": \"aws\", \"extra\": {\"endpoint_url\": \"http://127.0.0.1:$MOTO_PORT\", \"region_name\": \"us-east-1\"}}"
export AIRFLOW_CONN_SMDIST_MOTO='{"conn_type": "smdist", "extra": {"backend": "sagemaker", "aws_conn_id": "aws_moto", "region_name": "us-east-1"}}'
export AIRFLOW_CONN_AWS_MOTO_LIVE="{\"conn_type\": \"aws\", \"extra\": {\"endpoint_url\": \"http://127.0.0.1:$E2E_MOTO_LIVE_PORT\", \"region_name\": \"us-east-1\"}}"
export AIRFLOW_CONN_SMDIST_MOTO_LIVE='{"conn_type": "smdist", "extra": {"backend": "sagemaker", "aws_conn_id": "aws_moto_live", "region_name": "us-east-1"}}'
# fault drills: a dead triggerer's triggers move to a live one after this many seconds without a heartbeat
export AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC=2
export AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD=10
export AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY=5

bash scripts/airflow-local.sh start
echo "[e2e] deployment up after $(( $(date +%s) - STARTED )) s"
# shellcheck disable=SC1091
source "$AIRFLOW_LOCAL_DIR/env.sh"
export AIRFLOW_LOCAL_SCRIPT="$REPO/scripts/airflow-local.sh"
rc=0
# in the background, so that a SIGTERM to this script runs cleanup at once rather than after the tests
timeout 900 "$PY" -m pytest scripts/e2e/test_deployment.py scripts/e2e/test_trigger_moves.py scripts/e2e/test_browser.py \
  -ra -q -p no:cacheprovider \
  -o testpaths=scripts/e2e --timeout 900 "$@" &
TESTS_PID=$!
wait "$TESTS_PID" || rc=$?
TESTS_PID=
echo "[e2e] wall time $(( $(date +%s) - STARTED )) s (rc $rc); screenshots in $E2E_ARTIFACTS"
exit $rc
