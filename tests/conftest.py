"""Session-wide settings: a private AIRFLOW_HOME and local-job root, set before Airflow is imported."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile

import pytest

_ROOT = tempfile.mkdtemp(prefix="smdist-tests-")
os.environ["AIRFLOW_HOME"] = os.path.join(_ROOT, "airflow")
# With pytest-xdist (`-n N`) each worker imports this file too, after the controller: each gets an AIRFLOW_HOME
# (its own database) and a job root of its own, and shares the controller's runtime cache (below). A job root
# given before pytest started is everyone's.
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ["SMDIST_TESTS_GIVEN_ROOT"] = os.environ.get("SMDIST_LOCAL_ROOT", "")
os.environ["SMDIST_LOCAL_ROOT"] = os.environ.get("SMDIST_TESTS_GIVEN_ROOT") or os.path.join(_ROOT, "jobs")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
os.environ["SMDIST_LOCAL_STOP_GRACE"] = "5"
# Local runtimes (backends/local/job/runtimes.py) are shared by the whole session, whatever root a test uses (and
# by its xdist workers, which inherit the controller's setting; builds take turns under a lock), so the suite
# builds each image's runtime once (uv's own cache makes that fast after the first run; CI names one cache for
# all its steps in .ci/run). Tests run jobs in the worker's interpreter unless they are about images
# (test_local_runtimes.py, the example DAGs), which set SMDIST_LOCAL_RUNTIME=image, the default outside tests.
os.environ.setdefault("SMDIST_RUNTIME_CACHE", os.path.join(_ROOT, "runtimes"))
os.environ.setdefault("SMDIST_LOCAL_RUNTIME", "worker")
os.environ.pop("SMDIST_BACKEND", None)
os.makedirs(os.environ["AIRFLOW_HOME"], exist_ok=True)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
if REPO not in sys.path:
    sys.path.insert(0, REPO)


def pytest_sessionfinish(session, exitstatus):
    """The session's private root (AIRFLOW_HOME, job root, image runtimes: gigabytes) goes with the session, so
    repeated runs on one machine (CI, several Pythons) do not fill its disk."""
    import shutil

    shutil.rmtree(_ROOT, ignore_errors=True)


# -- the fast check's guard ----------------------------------------------------------------------------------------
# The fast selections (`scripts/check.sh`: tests/unit, or with --all every test `-m "not slow"`) and
# pytest-phases.sh's parallel phase must hold no test that runs a real job or builds an image runtime. So a
# test not marked `slow` (pyproject's markers) fails here, in every run, the moment it starts a job's supervisor
# or builds a runtime in this process (a `uv venv`), and after it ends if a job appeared under this process's job
# roots (a job started by a subprocess: `airflow dags test`).
_SLOW_HINT = "mark it @pytest.mark.slow (pyproject's markers: it then stays out of the fast check)"


def _starts_a_job(args) -> str | None:
    """What ``args`` (a Popen command line) starts that only a `slow` test may: a job's supervisor, a runtime's
    environment (uv venv), or None."""
    argv = [os.fspath(a) for a in args] if isinstance(args, (list, tuple)) else [os.fspath(args)]
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1].startswith("airflow_smdist.backends.local.job."):
            return f"a local job's supervisor ({argv[i + 1]})"
    if argv and os.path.basename(argv[0]) == "uv" and "venv" in argv[1:3]:
        return "an image runtime (uv venv)"
    return None


def _made_by_jobs() -> set[str]:
    """The jobs under this process's roots (the default job root, Airflow's). Not the runtime cache: xdist's
    workers share it, so another worker's slow test may fill it meanwhile (a build in this process is a Popen)."""
    roots = {os.environ.get("SMDIST_LOCAL_ROOT", ""), os.path.join(os.environ["AIRFLOW_HOME"], "smdist")}
    return {p for r in roots if r for p in glob.glob(os.path.join(r, "*", "*", "request.json"))}


_GUARD = pytest.StashKey[tuple[pytest.MonkeyPatch, set[str]]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """From the setup of a test not marked slow (its module's and session's fixtures included) to its teardown,
    a Popen that starts a job's supervisor or a runtime's `uv venv` fails the test."""
    if item.get_closest_marker("slow") is None:
        real_init = subprocess.Popen.__init__

        def guarded_init(self, args, *a, **kw):
            what = _starts_a_job(args)
            if what is not None:
                pytest.fail(f"{item.nodeid} starts {what} but is not marked slow: {_SLOW_HINT}", pytrace=False)
            real_init(self, args, *a, **kw)

        mp = pytest.MonkeyPatch()
        item.stash[_GUARD] = (mp, _made_by_jobs())
        mp.setattr(subprocess.Popen, "__init__", guarded_init)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the teardown of a test not marked slow: no job and no runtime may have appeared meanwhile (one
    started by a subprocess the Popen guard does not see, as `airflow dags test`)."""
    try:
        return (yield)
    finally:
        guard = item.stash.get(_GUARD, None)
        if guard is not None:
            guard[0].undo()
            new = sorted(_made_by_jobs() - guard[1])
            if new:
                pytest.fail(f"{item.nodeid} ran a real job or built a runtime ({new[0]}) but is not marked "
                            f"slow: {_SLOW_HINT}", pytrace=False)
