#!/usr/bin/env bash
# The suite in three phases (scripts/test.sh, scripts/test-py.sh), each on as many pytest-xdist workers as its
# tests keep busy on this 2-core machine (benchmarks/results.md, "CI time"):
#   1. the tests not marked slow (unit tests, the sagemaker backend on moto, triggers, DAG parsing): most of their
#      time is waiting on a moto server, polls and subprocesses, so SMDIST_TEST_WORKERS (default 4) side by side;
#   2. the tests marked slow (real local jobs, image runtimes): one of them keeps about one core busy (measured:
#      CPU time = wall time, one at a time), so SMDIST_SLOW_WORKERS (default 2) side by side, one per core;
#   3. the tests marked serial (they watch timing or count calls against a clock) one at a time, beside nothing.
#
#   bash scripts/pytest-phases.sh PYTHON MARKEXPR|"" [pytest args: paths, --durations, ...]
# The tests named in the arguments, else all of tests/. SMDIST_TEST_WORKERS=0 / SMDIST_SLOW_WORKERS=0 run that
# phase in one process. A phase that selects nothing (pytest's exit 5) is fine when another ran tests; the exit
# is the first failure. SMDIST_JUNIT=prefix writes prefix-parallel.xml, prefix-slow.xml and prefix-serial.xml.
set -uo pipefail
PY="$1"; BASE="$2"; shift 2
where=(tests)
for arg in "$@"; do [ -e "${arg%%::*}" ] && where=() && break; done
set -- "${where[@]}" "$@"
and() { if [ -n "$BASE" ]; then echo "($BASE) and $1"; else echo "$1"; fi; }
junit() { [ -z "${SMDIST_JUNIT:-}" ] || echo "--junitxml=$SMDIST_JUNIT-$1.xml"; }
workers() { [ "$1" = 0 ] || echo "-n $1"; }
codes=()
phase() {  # NAME MARKEXPR WORKERS
  local rc start=$SECONDS how="$3 workers"
  [ "$3" != 0 ] || how="one process"
  # shellcheck disable=SC2046
  "$PY" -m pytest -ra -q -p no:cacheprovider -m "$(and "$2")" $(workers "$3") $(junit "$1") "${@:4}"
  rc=$?
  echo "[tests] phase $1 ($2; $how): exit $rc after $(( SECONDS - start )) s"
  codes+=("$rc")
}
phase parallel "not slow and not serial" "${SMDIST_TEST_WORKERS:-4}" "$@"
phase slow "slow and not serial" "${SMDIST_SLOW_WORKERS:-2}" "$@"
phase serial "serial" 0 "$@"
ran=0
for rc in "${codes[@]}"; do [ "$rc" = 5 ] || ran=1; done
[ "$ran" = 1 ] || exit 5
for rc in "${codes[@]}"; do [ "$rc" = 0 ] || [ "$rc" = 5 ] || exit "$rc"; done
exit 0
