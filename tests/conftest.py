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
os.environ.pop("SMDIST_BACKEND", None)
os.makedirs(os.environ["AIRFLOW_HOME"], exist_ok=True)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
if REPO not in sys.path:
    sys.path.insert(0, REPO)
