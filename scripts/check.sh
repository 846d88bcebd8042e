#!/usr/bin/env bash
# The fast check, before a commit (about 3 minutes on a 2-core machine): the guard rails (scripts/lint.sh: ruff
# with the complexity budget, mypy strict) beside the unit tests (tests/unit: builders, specs, the wire format,
# the import graph, packaging, the lifecycle on a stub backend; no real job, no image runtime, no moto server),
# on Python 3.11 in .venv, with pytest-xdist's workers.
#
#   bash scripts/check.sh            # lint + tests/unit
#   bash scripts/check.sh --all      # lint + every test not marked slow (adds the moto server's tests,
#                                    # triggers, the CLI and DAG parsing: about 8 minutes here)
#
# A test that starts a real job or builds an image runtime and is not marked `slow` fails in every run
# (tests/conftest.py's guard), so no such test can hide in either selection. The whole suite is
# scripts/test.sh; CI is .ci/run (README, "Development").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
where=(tests/unit)
if [ "${1:-}" = --all ]; then shift; where=(tests); fi
mkdir -p artifacts
bash scripts/lint.sh >artifacts/check-lint.log 2>&1 & lint=$!
rc=0
.venv/bin/python -m pytest "${where[@]}" -q -p no:cacheprovider -m "not slow" -n "${SMDIST_TEST_WORKERS:-2}" "$@" \
  || rc=$?
lint_rc=0; wait "$lint" || lint_rc=$?
cat artifacts/check-lint.log
[ "$lint_rc" = 0 ] || { echo "check: lint failed (exit $lint_rc)"; exit "$lint_rc"; }
exit "$rc"
