"""Session-wide settings: a private AIRFLOW_HOME and local-job root, set before Airflow is imported."""

from __future__ import annotations

import os
import sys
import tempfile

_ROOT = tempfile.mkdtemp(prefix="smdist-tests-")
os.environ["AIRFLOW_HOME"] = os.path.join(_ROOT, "airflow")
os.environ.setdefault("SMDIST_LOCAL_ROOT", os.path.join(_ROOT, "jobs"))
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
os.environ["SMDIST_LOCAL_STOP_GRACE"] = "5"
# Local runtimes (backends/local/job/runtimes.py) are shared by the whole session, whatever root a test uses, so
# the suite builds each image's runtime once (uv's own cache makes that fast after the first run). Tests run
# jobs in the worker's interpreter unless they are about images (test_local_runtimes.py, the example DAGs),
# which set SMDIST_LOCAL_RUNTIME=image, the default outside tests.
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
