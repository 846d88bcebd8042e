#!/usr/bin/env bash
# The suite in two phases (scripts/test.sh, scripts/test-py.sh):
#   1. the tests not marked slow (unit tests, the sagemaker backend on moto, triggers, CLI, DAG parsing) on
#      pytest-xdist workers: most of their time is waiting on a moto server, polls and subprocesses, so
#      SMDIST_TEST_WORKERS (default 4) of them run side by side on 2 cores;
#   2. the tests marked slow (real local jobs, image runtimes) one at a time: they are CPU-bound (measured: 4
#      workers gave no gain, 51 CPU-minutes in 33 minutes) and some of them watch timing; with them the tests
#      marked serial (not slow, but they count calls against a clock).
#
#   bash scripts/pytest-two-phases.sh PYTHON MARKEXPR|"" [pytest args: paths, --durations, ...]
# The tests named in the arguments, else all of tests/.
# A phase that selects nothing (pytest's exit 5) is fine when the other ran tests; the exit is the first failure.
# SMDIST_JUNIT=prefix writes prefix-parallel.xml and prefix-serial.xml.
set -uo pipefail
PY="$1"; BASE="$2"; shift 2
where=(tests)
for arg in "$@"; do [ -e "${arg%%::*}" ] && where=() && break; done
set -- "${where[@]}" "$@"
and() { if [ -n "$BASE" ]; then echo "($BASE) and $1"; else echo "$1"; fi; }
junit() { [ -z "${SMDIST_JUNIT:-}" ] || echo "--junitxml=$SMDIST_JUNIT-$1.xml"; }
"$PY" -m pytest -ra -q -p no:cacheprovider -m "$(and "not slow and not serial")" -n "${SMDIST_TEST_WORKERS:-4}" $(junit parallel) "$@"
first=$?
echo "[tests] phase 1 (not slow, not serial, ${SMDIST_TEST_WORKERS:-4} workers): exit $first"
"$PY" -m pytest -ra -q -p no:cacheprovider -m "$(and "(slow or serial)")" $(junit serial) "$@"
second=$?
echo "[tests] phase 2 (slow or serial, one at a time): exit $second"
if [ "$first" = 5 ] && [ "$second" = 5 ]; then exit 5; fi
for rc in "$first" "$second"; do [ "$rc" = 0 ] || [ "$rc" = 5 ] || exit "$rc"; done
exit 0
