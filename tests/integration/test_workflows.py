"""Many-job workflows on the local backend: a chain of links past the runtime limit, resuming."""

from __future__ import annotations

import io
import json
import os
import tarfile
import uuid
from types import SimpleNamespace

import pytest

from airflow_smdist._compat import AirflowException
from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.operators.workflows import SageMakerTrainingChainOperator

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LONG_JOB = os.path.join(REPO, "dags", "scripts", "long_job")


def chain(tmp_path, **kw):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "x.csv").write_text("1\n")
    args = dict(task_id="long", entry_point="train.py", source_dir=LONG_JOB,
                image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", inputs={"train": f"file://{data}"},
                output_path=f"file://{tmp_path}/out", checkpoint_s3_uri=f"file://{tmp_path}/ckpt", poll_interval=0.3,
                metric_definitions=[{"Name": "progress", "Regex": r"progress=([0-9.]+)"}])
    args.update(kw)
    return SageMakerTrainingChainOperator(**args)


def ctx():
    return {"ti": SimpleNamespace(dag_id="d", task_id="long", map_index=-1), "run_id": uuid.uuid4().hex}


@pytest.mark.slow
def test_chain_resumes_link_after_link_until_the_marker(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    result = chain(tmp_path, hyperparameters={"units": 8, "seconds_per_unit": 0.5}, max_run=3,
                   max_links=8).execute(ctx())
    assert result["finished"] is True and len(result["links"]) >= 2
    assert ([link["secondary_status"] for link in result["links"][:-1]]
            == ["MaxRuntimeExceeded"] * (len(result["links"]) - 1))
    assert result["links"][-1]["status"] == "Completed"
    with tarfile.open(result["model_artifacts"][len("file://"):]) as tar:
        state = json.load(io.BytesIO(tar.extractfile("result.json").read()))
    # every unit done exactly once across the links: nothing lost or repeated at a cut
    assert state["done"] == 8 and state["total"] == pytest.approx(sum(i ** 0.5 for i in range(1, 9)))
    assert (tmp_path / "ckpt" / "FINISHED").exists()


@pytest.mark.slow
def test_a_retry_of_a_finished_chain_returns_its_links_instead_of_none(tmp_path, monkeypatch):
    """A try killed after the chain finished (a zombie, a lost worker): the retry finds the finished marker, and
    returns the links the earlier try ran, each reattached to (no link is run again)."""
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    context = ctx()
    first = chain(tmp_path, hyperparameters={"units": 6, "seconds_per_unit": 0.5}, max_run=2, max_links=8)
    result = first.execute(context)
    assert result["finished"] is True and len(result["links"]) >= 2, result
    retry = chain(tmp_path, hyperparameters={"units": 6, "seconds_per_unit": 0.5}, max_run=2, max_links=8)
    again = retry.execute(context)
    assert again["links"] == result["links"] and again["finished"] is True
    assert again["model_artifacts"] == result["model_artifacts"]
    jobs = LocalBackend(tmp_path / "jobs").list_jobs("training")
    assert len(jobs) == len(result["links"]), jobs  # nothing started again


@pytest.mark.slow
def test_chain_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    with pytest.raises(AirflowException, match="not finished after 1 links"):
        chain(tmp_path, hyperparameters={"units": 50, "seconds_per_unit": 0.5}, max_run=2, max_links=1).execute(ctx())


def test_chain_needs_a_checkpoint_uri(tmp_path):
    from airflow_smdist.specs.errors import SpecError

    with pytest.raises(SpecError, match="checkpoint_s3_uri"):
        chain(tmp_path, checkpoint_s3_uri=None)
