#!/usr/bin/env bash
# Issue 30: the local backend under a non-root Airflow worker (the official Airflow image runs as uid 50000).
#
# Creates the non-root user smdist-ci once (idempotent) and, as that user, with a fresh HOME and AIRFLOW_HOME
# of its own (temporary directories, removed at the end), runs one example DAG end to end on the local backend
# with the repository's venv: `airflow dags test smdist_own_cluster` by default, the cheapest example with a
# real multi-host job (a 3-host training job whose hosts reduce over TCP, its code from sourcedir.tar.gz). Not
# root, its hosts run in the fallback mode (no namespaces: loopback addresses, MASTER_PORT reserved in the
# user's own port table in /tmp, beside whatever root's runs left there).
#
#   bash scripts/nonroot-example.sh [dag_id]      # as root (it creates a user and switches to it)
#
# The run's environment is a worker's: PATH with the venv first, HOME, LANG, AIRFLOW_* for this run, and what
# the caller has of SMDIST_*, PIP_*, UV_* (not UV_CACHE_DIR), TLS bundles, proxies. Its jobs run in the worker's
# interpreter (SMDIST_LOCAL_RUNTIME=worker, as the test suite runs them, for speed) unless the caller sets
# SMDIST_LOCAL_RUNTIME=image. The checkout and the venv are used as they are (never chmod-ed): a directory on
# the way to them, or to the venv's base Python, that the user cannot search (here /root, above pyenv's
# Python) is replaced, in each command's own mount namespace, by an empty tmpfs holding only what is needed.
# Exits non-zero when the DAG run fails or leaves processes behind; either way it prints where its logs are
# (the run's output, every job's supervisor and host logs: $SMDIST_NONROOT_LOGS, default
# artifacts/nonroot-example/).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VENV=${VENV:-$REPO/.venv}
DAG_ID=${1:-smdist_own_cluster}
RUN_USER=${SMDIST_CI_USER:-smdist-ci}
LOGS=${SMDIST_NONROOT_LOGS:-$REPO/artifacts/nonroot-example}
LIMIT=${SMDIST_NONROOT_TIMEOUT:-1200}
say() { echo "nonroot-example: $*"; }

[ "$(id -u)" = 0 ] || { say "run me as root (I create the user $RUN_USER and switch to it)" >&2; exit 2; }

# -- the user: a system account without a home (its HOME is this run's) ----------------------------------------
if ! id -u "$RUN_USER" >/dev/null 2>&1; then
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$RUN_USER" \
    || id -u "$RUN_USER" >/dev/null  # made meanwhile by a concurrent run
fi
RUN_UID=$(id -u "$RUN_USER")
RUN_GID=$(id -g "$RUN_USER")
[ "$RUN_UID" != 0 ] || { say "$RUN_USER has uid 0" >&2; exit 2; }
leftovers() { pgrep -u "$RUN_UID" || true; }  # the user's processes: none may outlive the run
if [ -n "$(leftovers)" ]; then
  say "$RUN_USER already runs processes (another run?): $(leftovers | paste -sd' ')" >&2
  exit 1
fi

# -- temporary directories: the user's (HOME, AIRFLOW_HOME), and root's own (the namespace set-up) ------------
STATUS=1
TMP=""
CTL=""
finish() {
  if [ -n "$TMP" ] && [ -d "$TMP/airflow/smdist" ]; then  # every job's logs and state (no data)
    (cd "$TMP/airflow/smdist" && find . -path ./runtimes -prune -o -type f \
       \( -name '*.log' -o -name '*.jsonl' -o -name state.json -o -name request.json \) -print0 \
       | xargs -0r cp --parents -t "$LOGS/jobs") || true
  fi
  for pid in $(leftovers); do kill -KILL "$pid" 2>/dev/null || true; done  # the user's own processes only
  [ -z "$TMP" ] || rm -rf "$TMP"
  [ -z "$CTL" ] || rm -rf "$CTL"
  if [ "$STATUS" = 0 ]; then
    say "$DAG_ID succeeded as $RUN_USER (uid $RUN_UID); logs in $LOGS"
  else
    say "$DAG_ID FAILED as $RUN_USER (uid $RUN_UID); logs in $LOGS (dags-test.log first)" >&2
  fi
}
trap finish EXIT
rm -rf "$LOGS"
mkdir -p "$LOGS/jobs"
TMP=$(mktemp -d /tmp/smdist-nonroot-example.XXXXXX)
CTL=$(mktemp -d /tmp/smdist-nonroot-ctl.XXXXXX)  # root's, 0700: the user can change nothing root runs
mkdir -p "$TMP/home" "$TMP/airflow"
chown -R "$RUN_UID:$RUN_GID" "$TMP"
chmod 700 "$TMP"

# -- the worker's environment: nothing of root's (HOME, XDG dirs, caches under /root) -------------------------
ENV=(PATH="$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$TMP/home"
     USER="$RUN_USER" LOGNAME="$RUN_USER" LANG="${LANG:-C.UTF-8}" AIRFLOW_HOME="$TMP/airflow"
     AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags" AIRFLOW__CORE__LOAD_EXAMPLES=False
     SMDIST_LOCAL_RUNTIME="${SMDIST_LOCAL_RUNTIME:-worker}")
for name in $(compgen -e); do
  case "$name" in
    UV_CACHE_DIR|SMDIST_LOCAL_RUNTIME|SMDIST_LOCAL_ROOT|SMDIST_RUNTIME_CACHE) ;;
    SMDIST_*|PIP_*|UV_*|SSL_CERT_FILE|SSL_CERT_DIR|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|JAVA_HOME|TZ|\
    http_proxy|https_proxy|no_proxy|HTTP_PROXY|HTTPS_PROXY|NO_PROXY) ENV+=("$name=${!name}") ;;
  esac
done

# -- what the user must reach: the checkout, the venv, the venv's base Python (pyvenv.cfg's home) --------------
BASE_PREFIX=$(dirname "$(sed -n 's/^home *= *//p' "$VENV/pyvenv.cfg")")
can_search() { env -i setpriv --reuid="$RUN_UID" --regid="$RUN_GID" --init-groups -- test -x "$1"; }
MOUNTS=()  # "blocked directory|needed path below it"
for needed in "$REPO" "$VENV" "$BASE_PREFIX"; do
  dir=""
  IFS=/ read -ra parts <<<"${needed#/}"
  for part in "${parts[@]}"; do
    dir=$dir/$part
    [ "$dir" != "$needed" ] || break
    if ! can_search "$dir"; then MOUNTS+=("$dir|$needed"); break; fi
  done
done
{
  echo 'set -euo pipefail'
  declare -p ENV
  i=0
  for pair in "${MOUNTS[@]}"; do  # every needed path held on a staging point before its directory is covered
    printf 'mkdir -p %q && mount --bind %q %q\n' "$CTL/stage/$i" "${pair#*|}" "$CTL/stage/$i"
    i=$((i + 1))
  done
  for blocked in $(printf '%s\n' "${MOUNTS[@]}" | cut -d'|' -f1 | sort -u); do
    printf 'mount -t tmpfs -o mode=0755,size=1m smdist-nonroot %q\n' "$blocked"
  done
  i=0
  for pair in "${MOUNTS[@]}"; do
    printf 'mkdir -p %q && mount --bind %q %q\n' "${pair#*|}" "$CTL/stage/$i" "${pair#*|}"
    i=$((i + 1))
  done
  printf 'cd %q\n' "$TMP/home"
  echo "exec env -i \"\${ENV[@]}\" setpriv --reuid=$RUN_UID --regid=$RUN_GID --init-groups -- \"\$@\""
} >"$CTL/enter.sh"
if [ ${#MOUNTS[@]} -gt 0 ]; then
  say "$RUN_USER cannot search $(printf '%s\n' "${MOUNTS[@]}" | cut -d'|' -f1 | sort -u | paste -sd' '); its" \
      "commands see only $(printf '%s\n' "${MOUNTS[@]}" | cut -d'|' -f2 | sort -u | paste -sd' ') there"
fi

as_user() {  # a command as the user, in the worker's environment, from its HOME, in a mount namespace of its own
  unshare --mount --propagation private -- bash "$CTL/enter.sh" "$@"
}

if ! as_user "$VENV/bin/python" -c "import airflow, airflow_smdist, os, sys
assert sys.base_prefix == '$BASE_PREFIX', f'the venv runs on {sys.base_prefix}, not on its base $BASE_PREFIX'
assert os.access('$REPO/dags', os.R_OK | os.X_OK), 'dags/ is not readable'" >"$LOGS/access.log" 2>&1; then
  cat "$LOGS/access.log" >&2
  say "$RUN_USER cannot use the venv ($VENV) or the checkout ($REPO): they must be readable (o+r, o+x)" >&2
  exit 1
fi

# -- the run ---------------------------------------------------------------------------------------------------
started=$(date +%s)
as_user "$VENV/bin/airflow" db migrate >"$LOGS/db-migrate.log" 2>&1 || { tail -40 "$LOGS/db-migrate.log" >&2; exit 1; }
say "airflow dags test $DAG_ID as $RUN_USER (uid $RUN_UID), AIRFLOW_HOME $TMP/airflow"
rc=0
as_user timeout --kill-after=30 "$LIMIT" "$VENV/bin/airflow" dags test "$DAG_ID" >"$LOGS/dags-test.log" 2>&1 || rc=$?
say "the run took $(( $(date +%s) - started ))s (exit $rc)"

# success: exit 0 and the DAG run finished in state success (`dags test` may exit 0 after a failed run)
final=$(grep -a "DagRun Finished" "$LOGS/dags-test.log" | tail -1 || true)
if [ "$rc" != 0 ] || ! grep -q "state=success" <<<"$final"; then
  grep -a -E "ended Failed|ended Stopped|Traceback|Error:|state=failed" "$LOGS/dags-test.log" | head -40 >&2 || true
  tail -60 "$LOGS/dags-test.log" >&2
  exit 1
fi
if ! grep -a -q "hosts run without namespaces" "$LOGS/dags-test.log"; then  # as meant: the fallback mode
  say "the run's log does not show hosts in the fallback mode" >&2
  exit 1
fi
for _ in $(seq 20); do [ -n "$(leftovers)" ] || break; sleep 0.5; done
if [ -n "$(leftovers)" ]; then
  say "processes outlived the run:" >&2
  ps -o pid,etime,args -p "$(leftovers | paste -sd,)" >&2 || true
  exit 1
fi
STATUS=0
