"""The scaling study as users run it: a DAG under `airflow dags test`, real jobs, its report in XCom."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(REPO, "tests", "fixtures", "scaling_dag")


@pytest.mark.slow
def test_study_report_matches_the_jobs_measured_times(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "SMDIST_LOCAL_ROOT": str(tmp_path / "jobs"), "PYTHONPATH": REPO,
           "SMDIST_LOCAL_SAMPLE_INTERVAL": "0.1"}
    env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, timeout=300, check=True)
    run = subprocess.run([airflow, "dags", "test", "smdist_scaling_check"], env=env, capture_output=True, text=True,
                         timeout=900)
    log = run.stdout + run.stderr
    assert run.returncode == 0 and "state=success" in log, log[-4000:]
    assert "SCALING CHECK OK" in log  # the check task compared the report with both jobs' XCom results
    assert "LR CHECK OK 0.1 -> 0.2" in log  # and 2 hosts were started with twice 1 host's learning rate
    assert "Scaling study:" in log and "ml_m5_xlarge_x2" in log  # the table in the report task's log
    pngs = glob.glob(str(tmp_path / "scaling-check" / "study" / "*" / "scaling.png"))
    assert len(pngs) == 1 and open(pngs[0], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    insights = glob.glob(str(tmp_path / "scaling-check" / "*" / "output" / "insight.png"))
    assert len(insights) == 2  # every job of the study has its own insight plot

