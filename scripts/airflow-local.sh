#!/usr/bin/env bash
# Run a real Airflow 3 deployment on this machine: PostgreSQL, api-server (UI + REST API), scheduler
# (LocalExecutor), dag-processor and triggerer, with this repository's example DAGs and the local backend.
#
#   bash scripts/airflow-local.sh start             # set up (first time) and start everything; prints the UI login
#   bash scripts/airflow-local.sh status            # which components run
#   bash scripts/airflow-local.sh restart triggerer # (re)start one component: api-server|scheduler|dag-processor|triggerer
#   bash scripts/airflow-local.sh kill triggerer    # kill -9 one component (fault drills)
#   bash scripts/airflow-local.sh stop              # stop every component and PostgreSQL
#   source .airflow-local/env.sh                    # the same settings in your shell, for the airflow CLI
#
# Settings (environment, all optional): AIRFLOW_LOCAL_DIR (state: .airflow-local), AIRFLOW_LOCAL_PORT (8080),
# AIRFLOW_LOCAL_PG_PORT (5433), AIRFLOW_LOCAL_PARALLELISM (4), AIRFLOW_LOCAL_DAGS (./dags), VENV (./.venv, the
# one scripts/setup.sh makes). Any AIRFLOW__SECTION__KEY you export wins over the defaults below.
# The README's "Run it yourself" section explains each setting.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$(mkdir -p "${AIRFLOW_LOCAL_DIR:-$REPO/.airflow-local}" && cd "${AIRFLOW_LOCAL_DIR:-$REPO/.airflow-local}" && pwd)"
PORT="${AIRFLOW_LOCAL_PORT:-8080}"
PG_PORT="${AIRFLOW_LOCAL_PG_PORT:-5433}"
VENV="${VENV:-$REPO/.venv}"
COMPONENTS=(api-server scheduler dag-processor triggerer)
mkdir -p "$DIR/logs" "$DIR/pids"

say() { printf '[airflow-local] %s\n' "$*"; }
die() { printf '[airflow-local] error: %s\n' "$*" >&2; exit 1; }

# -- PostgreSQL (Debian's package; a private cluster owned by this deployment) ---------------------------
pg_bin() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  if [ -z "$d" ] && command -v initdb >/dev/null; then d="$(dirname "$(command -v initdb)")"; fi
  echo "$d"
}

as_pg() {  # PostgreSQL refuses to run as root: as root, run its tools as the 'postgres' user
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_start() {
  local bin
  bin="$(pg_bin)"
  if [ -z "$bin" ]; then
    [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed: sudo apt-get install -y postgresql"
    say "installing PostgreSQL (apt-get install postgresql)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >"$DIR/logs/apt.log" 2>&1 \
      || { apt-get update -q >>"$DIR/logs/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >>"$DIR/logs/apt.log" 2>&1; } \
      || die "apt-get install postgresql failed: see $DIR/logs/apt.log"
    bin="$(pg_bin)"
  fi
  # the cluster lives where the 'postgres' user can reach it (a pytest tmp dir is private to root)
  if [ ! -s "$DIR/pgdata.path" ]; then
    if [ "$(id -u)" = 0 ]; then mktemp -d /tmp/smdist-airflow-pg.XXXXXX >"$DIR/pgdata.path"; else echo "$DIR/pg" >"$DIR/pgdata.path"; fi
  fi
  PGDATA_DIR="$(cat "$DIR/pgdata.path")"
  mkdir -p "$PGDATA_DIR"
  [ "$(id -u)" = 0 ] && chown postgres: "$PGDATA_DIR" && chmod 700 "$PGDATA_DIR"
  if [ ! -f "$PGDATA_DIR/data/PG_VERSION" ]; then
    say "creating a PostgreSQL cluster in $PGDATA_DIR/data"
    printf '%s\n' "$PG_PASSWORD" >"$DIR/pgpass.tmp"
    [ "$(id -u)" = 0 ] && chown postgres: "$DIR/pgpass.tmp" && cp -p "$DIR/pgpass.tmp" "$PGDATA_DIR/pw" && rm -f "$DIR/pgpass.tmp"
    [ "$(id -u)" = 0 ] || mv "$DIR/pgpass.tmp" "$PGDATA_DIR/pw"
    as_pg "$bin/initdb" -D "$PGDATA_DIR/data" -U airflow --pwfile="$PGDATA_DIR/pw" -A scram-sha-256 -E UTF8 \
      >"$DIR/logs/initdb.log" 2>&1 || die "initdb failed: see $DIR/logs/initdb.log"
    rm -f "$PGDATA_DIR/pw"
  fi
  if ! as_pg "$bin/pg_ctl" -D "$PGDATA_DIR/data" status >/dev/null 2>&1; then
    as_pg "$bin/pg_ctl" -D "$PGDATA_DIR/data" -l "$PGDATA_DIR/postgres.log" -w -t 60 \
      -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $PGDATA_DIR -c max_connections=200" start >/dev/null \
      || die "PostgreSQL did not start: see $PGDATA_DIR/postgres.log"
  fi
  if ! PGPASSWORD="$PG_PASSWORD" "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U airflow -d postgres -tAc \
       "SELECT 1 FROM pg_database WHERE datname='airflow'" | grep -q 1; then
    PGPASSWORD="$PG_PASSWORD" "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U airflow airflow
  fi
  say "PostgreSQL on 127.0.0.1:$PG_PORT (cluster $PGDATA_DIR/data)"
}

pg_stop() {
  local bin
  bin="$(pg_bin)"
  [ -n "$bin" ] && [ -s "$DIR/pgdata.path" ] || return 0
  PGDATA_DIR="$(cat "$DIR/pgdata.path")"
  [ -f "$PGDATA_DIR/data/PG_VERSION" ] || return 0
  as_pg "$bin/pg_ctl" -D "$PGDATA_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
}

# -- settings -----------------------------------------------------------------------------------------------
secret() { [ -s "$DIR/$1" ] || "$VENV/bin/python" -c "import secrets; print(secrets.token_urlsafe(32))" >"$DIR/$1"; cat "$DIR/$1"; }

write_env() {
  PG_PASSWORD="$(secret pg.password)"
  local jwt api_key ui_password
  jwt="$(secret jwt.secret)"
  api_key="$(secret api.secret)"
  ui_password="$(secret ui.password)"
  mkdir -p "$DIR/home" "$DIR/jobs"
  printf '{"admin": "%s"}\n' "$ui_password" >"$DIR/home/passwords.json"
  cat >"$DIR/env.sh" <<EOF
# Written by scripts/airflow-local.sh: the settings every component of this deployment shares.
export AIRFLOW_HOME="$DIR/home"
export PATH="$VENV/bin:\$PATH"
# this checkout's code, and its package metadata first (checkout_metadata): its entry points (the provider
# info, the job page's plugin) whatever install of the provider \$VENV holds
export PYTHONPATH="$DIR/meta:$REPO\${PYTHONPATH:+:\$PYTHONPATH}"
export AIRFLOW__CORE__DAGS_FOLDER="\${AIRFLOW__CORE__DAGS_FOLDER:-${AIRFLOW_LOCAL_DAGS:-$REPO/dags}}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# 1. the metadata DB: PostgreSQL through psycopg2; Airflow 3 derives its async URL (asyncpg) from it
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://airflow:$PG_PASSWORD@127.0.0.1:$PG_PORT/airflow"
# 2. LocalExecutor running tasks in parallel ([core] parallelism), tasks talk to the api-server's Execution API
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__CORE__PARALLELISM="\${AIRFLOW__CORE__PARALLELISM:-${AIRFLOW_LOCAL_PARALLELISM:-4}}"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$PORT/execution/"
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT=$PORT
export AIRFLOW__API__WORKERS=1
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$PORT"
# 3. one JWT secret (and one API secret key) shared by every component, or tasks are refused
export AIRFLOW__API_AUTH__JWT_SECRET="$jwt"
export AIRFLOW__API__SECRET_KEY="$api_key"
# 4. auth: Airflow's simple auth manager, one admin user; REST calls take a token from POST /auth/token
export AIRFLOW__CORE__AUTH_MANAGER=airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$DIR/home/passwords.json"
# 5. one local-job root for workers AND the triggerer (the triggerer reads job state and logs there)
export SMDIST_LOCAL_ROOT="\${SMDIST_LOCAL_ROOT:-$DIR/jobs}"
# 6. waits in the triggerer by default (a run can still choose: the example DAGs' "deferrable" Param)
export AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="\${AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE:-True}"
# 7. new DAGs start unpaused, so a trigger from the UI or the API runs at once
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
# 8. retries: a task whose worker died is retried, and the retry reattaches to its job (no second job)
export AIRFLOW__CORE__DEFAULT_TASK_RETRIES="\${AIRFLOW__CORE__DEFAULT_TASK_RETRIES:-2}"
export AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY="\${AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY:-10}"
export AIRFLOW_LOCAL_UI="http://127.0.0.1:$PORT"
export AIRFLOW_LOCAL_USER=admin
export AIRFLOW_LOCAL_PASSWORD="$ui_password"
EOF
}

# -- components ---------------------------------------------------------------------------------------------
alive() { [ -s "$DIR/pids/$1.pid" ] && kill -0 "$(cat "$DIR/pids/$1.pid")" 2>/dev/null; }

start_one() {
  local c="$1"
  if alive "$c"; then say "$c already runs (pid $(cat "$DIR/pids/$c.pid"))"; return; fi
  # its own session, so stop ends the component with every process it started (LocalExecutor workers)
  ( # shellcheck disable=SC1091
    source "$DIR/env.sh"
    exec setsid "$VENV/bin/airflow" "$c" >>"$DIR/logs/$c.log" 2>&1 ) &
  echo $! >"$DIR/pids/$c.pid"
  say "$c started (pid $!, log $DIR/logs/$c.log)"
}

stop_one() {
  local c="$1" sig="${2:-TERM}" pid
  [ -s "$DIR/pids/$c.pid" ] || return 0
  pid="$(cat "$DIR/pids/$c.pid")"
  if [ "$sig" = KILL ]; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; rm -f "$DIR/pids/$c.pid"; return; fi
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$DIR/pids/$c.pid"
}

wait_healthy() {
  for _ in $(seq 1 180); do
    if "$VENV/bin/python" - "$PORT" <<'EOF' 2>/dev/null; then return 0; fi
import json, sys, urllib.request
health = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/v2/monitor/health", timeout=5))
sys.exit(0 if health["metadatabase"]["status"] == "healthy" and health["scheduler"]["status"] == "healthy" else 1)
EOF
    sleep 1
  done
  die "the api-server did not become healthy: see $DIR/logs/api-server.log and scheduler.log"
}

check_venv() {
  [ -x "$VENV/bin/airflow" ] || die "no Airflow in $VENV: run 'bash scripts/setup.sh' first, or set VENV=/path/to/venv"
  if ! "$VENV/bin/python" -c "import psycopg2, asyncpg" 2>/dev/null; then
    say "installing the PostgreSQL drivers psycopg2-binary and asyncpg into $VENV"
    "$VENV/bin/python" -m pip install --quiet psycopg2-binary asyncpg
  fi
}

# The package metadata of this checkout (an egg-info made from pyproject.toml; env.sh puts it first on PYTHONPATH):
# Airflow finds providers and plugins by their entry points, and \$VENV's install of the provider may be another
# checkout's, or older than an entry point (an editable install's metadata is made when it is installed).
checkout_metadata() {
  rm -rf "$DIR/meta" && mkdir -p "$DIR/meta"
  ( cd "$REPO" && "$VENV/bin/python" -c "from setuptools import setup; setup()" -q egg_info --egg-base "$DIR/meta" ) \
    >"$DIR/logs/egg-info.log" 2>&1 || die "could not read this checkout's package metadata: see $DIR/logs/egg-info.log"
}

start() {
  check_venv
  checkout_metadata
  write_env
  pg_start
  # shellcheck disable=SC1091
  ( source "$DIR/env.sh"; airflow db migrate >"$DIR/logs/db-migrate.log" 2>&1 ) \
    || die "airflow db migrate failed: see $DIR/logs/db-migrate.log"
  for c in "${COMPONENTS[@]}"; do start_one "$c"; done
  wait_healthy
  # shellcheck disable=SC1091
  source "$DIR/env.sh"
  say "Airflow UI and REST API: $AIRFLOW_LOCAL_UI   login: $AIRFLOW_LOCAL_USER / $AIRFLOW_LOCAL_PASSWORD"
  say "DAGs from $AIRFLOW__CORE__DAGS_FOLDER; local jobs in $SMDIST_LOCAL_ROOT; logs in $DIR/logs"
  say "CLI: source $DIR/env.sh && airflow dags list    stop: bash scripts/airflow-local.sh stop"
}

case "${1:-start}" in
  start) start ;;
  stop) for c in "${COMPONENTS[@]}"; do stop_one "$c"; done; pg_stop; say "stopped" ;;
  status) for c in "${COMPONENTS[@]}"; do if alive "$c"; then say "$c: running (pid $(cat "$DIR/pids/$c.pid"))"; else say "$c: stopped"; fi; done ;;
  restart) [ -n "${2:-}" ] || die "restart which component?"; stop_one "$2"; start_one "$2" ;;
  kill) [ -n "${2:-}" ] || die "kill which component?"; stop_one "$2" KILL; say "$2 killed (SIGKILL)" ;;
  env) cat "$DIR/env.sh" ;;
  *) die "usage: $0 start|stop|status|restart <component>|kill <component>|env" ;;
esac
