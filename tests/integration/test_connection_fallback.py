"""Only "connection not defined" may fall back to the default (local) backend: a malformed ``smdist``
extra or a failing secrets backend stops the task before any job starts (issue 12, Secrets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from types import SimpleNamespace

import pytest

from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAULTS = os.path.join(REPO, "tests", "fixtures", "faults")


def _operator(tmp_path, **kw):
    return SageMakerDistributedTrainingOperator(
        task_id="train", entry_point="deep_fail.py", source_dir=FAULTS,
        image_uri="1.dkr.ecr.us-east-1.amazonaws.com/x:1",
        output_path=f"file://{tmp_path}/out", role="arn:aws:iam::123456789012:role/R", **kw)


def _ctx():
    return {"ti": SimpleNamespace(dag_id="d", task_id="train", map_index=-1), "run_id": uuid.uuid4().hex}


@pytest.mark.parametrize("extra", ['{"backend": "sagemaker", region_name: "us-east-1"}', '["sagemaker"]'])
def test_a_malformed_smdist_extra_fails_before_any_job(tmp_path, monkeypatch, extra):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW_CONN_SMDIST_BROKEN", json.dumps({"conn_type": "smdist", "extra": extra}))
    with pytest.raises(Exception,
                       match=r"connection 'smdist_broken': its extra (is not valid JSON|must be a JSON object)"):
        _operator(tmp_path, smdist_conn_id="smdist_broken").execute(_ctx())
    assert not (tmp_path / "jobs").exists() and not (tmp_path / "out").exists()


def test_an_undefined_connection_still_means_the_default(tmp_path, monkeypatch):
    from airflow_smdist.hooks.smdist import SmdistHook

    monkeypatch.delenv("AIRFLOW_CONN_SMDIST_NOWHERE", raising=False)
    assert SmdistHook("smdist_nowhere").get_backend().name == "local"


def test_a_failing_secrets_backend_is_an_error_not_the_local_backend(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, FAULTS]), SMDIST_LOCAL_ROOT=str(tmp_path / "jobs"),
               AIRFLOW__SECRETS__BACKEND="failing_secrets.FailingBackend")
    code = ("from airflow_smdist.hooks.smdist import SmdistHook\n"
            "try:\n    print('BACKEND', SmdistHook('smdist_default').get_backend().name)\n"
            "except Exception as e:\n    print('ERROR', type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "BACKEND" not in out.stdout, out.stdout + out.stderr
    assert "ERROR ConnectionLookupError connection 'smdist_default': a secrets backend failed" in out.stdout, \
        out.stdout + out.stderr
    assert "secrets service unreachable" in out.stdout
