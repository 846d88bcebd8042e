"""How an operator starts its job (issue 34, hole 8).

* The same task instance started twice at once (a zombie try and its retry) ends with ONE job, which both
  tries follow: the try whose Create fails because the other's went first ("Job name must be unique" on the
  local backend, ResourceInUse on SageMaker) reattaches to that job, once its tags say it is this task
  instance's; a job of another task instance under that name is still refused.
* What the backend refuses (Pipe mode on the local backend) is refused before the source is uploaded."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from types import SimpleNamespace

import boto3
import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.sagemaker import SageMakerBackend
from airflow_smdist.lifecycle import ForeignJob
from airflow_smdist.operators.processing import SmdistProcessingOperator
from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
from airflow_smdist.specs.errors import SpecError

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"


def context(run_id: str, try_number: int, dag_id: str = "dag"):
    ti = SimpleNamespace(dag_id=dag_id, task_id="train", map_index=-1, try_number=try_number, max_tries=1)
    return {"ti": ti, "run_id": run_id}


@pytest.fixture
def local_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    return tmp_path / "jobs"


@pytest.fixture
def source(tmp_path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('trained', flush=True)\n")
    return src


def both_create_at_once(monkeypatch, backend_cls) -> threading.Barrier:
    """Make the two tries race: each Create waits until both have chosen to create (each saw no job)."""
    barrier = threading.Barrier(2, timeout=60)
    real = backend_cls.submit

    def submit(self, kind, request, *args, **kw):
        barrier.wait()
        return real(self, kind, request, *args, **kw)

    monkeypatch.setattr(backend_cls, "submit", submit)
    return barrier


def run_tries(make_operator, contexts) -> list:
    """Execute one operator per context, each in its own thread, at once; their results (or errors)."""
    out: list = [None] * len(contexts)

    def run(i: int) -> None:
        try:
            out[i] = make_operator().execute(contexts[i])
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(contexts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    return out


@pytest.mark.slow
def test_two_tries_at_once_on_the_local_backend_end_with_one_job(tmp_path, local_root, source, monkeypatch):
    both_create_at_once(monkeypatch, LocalBackend)
    run_id = f"run-{uuid.uuid4().hex}"

    def make():
        return SageMakerDistributedTrainingOperator(
            task_id="train", entry_point="train.py", source_dir=str(source), image_uri=IMAGE,
            output_path=f"file://{tmp_path}/out", poll_interval=0.3)

    zombie, retry = run_tries(make, [context(run_id, 1), context(run_id, 2)])
    for result in (zombie, retry):
        assert isinstance(result, dict), repr(result)  # not "Job name must be unique"
        assert result["status"] == "Completed"
    assert zombie["job_name"] == retry["job_name"]
    assert LocalBackend(local_root).store.list("training") == [zombie["job_name"]]  # one job, no "-r2"


@pytest.mark.slow
def test_a_job_of_another_task_instance_is_still_refused(tmp_path, local_root, source, monkeypatch):
    """Two task instances given the same job_name, at once: the loser's error names the owner, no takeover."""
    both_create_at_once(monkeypatch, LocalBackend)
    name = f"shared-{uuid.uuid4().hex[:8]}"

    def make():
        return SageMakerDistributedTrainingOperator(
            task_id="train", job_name=name, entry_point="train.py", source_dir=str(source), image_uri=IMAGE,
            output_path=f"file://{tmp_path}/out", poll_interval=0.3)

    first, second = run_tries(make, [context("run-a", 1, "dag_a"), context("run-b", 1, "dag_b")])
    results = [r for r in (first, second) if isinstance(r, dict)]
    errors = [r for r in (first, second) if isinstance(r, BaseException)]
    assert len(results) == 1 and len(errors) == 1, (first, second)
    assert isinstance(errors[0], ForeignJob), repr(errors[0])
    assert "belongs to task instance dag_" in str(errors[0])
    assert results[0]["job_name"] == name


def test_two_tries_at_once_on_sagemaker_end_with_one_job(moto_server, s3_bucket, monkeypatch):
    both_create_at_once(monkeypatch, SageMakerBackend)
    run_id = f"run-{uuid.uuid4().hex}"

    def make():
        return SageMakerDistributedTrainingOperator(
            task_id="train", backend="sagemaker", image_uri=IMAGE, role=ROLE,
            output_path=f"s3://{s3_bucket}/out", poll_interval=0.05, print_logs=False)

    zombie, retry = run_tries(make, [context(run_id, 1), context(run_id, 2)])
    for result in (zombie, retry):
        assert isinstance(result, dict), repr(result)  # not ResourceInUse "... must be unique ..."
        assert result["status"] == "Completed"
    assert zombie["job_name"] == retry["job_name"]
    client = boto3.client("sagemaker", endpoint_url=moto_server, region_name=REGION)
    base = zombie["job_name"]
    names = [s["TrainingJobName"] for s in client.list_training_jobs(NameContains=base)["TrainingJobSummaries"]]
    assert names == [base]


def test_pipe_mode_on_the_local_backend_is_refused_before_the_source_is_uploaded(tmp_path, local_root, source):
    op = SageMakerDistributedTrainingOperator(
        task_id="train", entry_point="train.py", source_dir=str(source), image_uri=IMAGE, input_mode="Pipe",
        inputs={"train": f"file://{tmp_path}/data"}, output_path=f"file://{tmp_path}/out")
    with pytest.raises(SpecError) as info:
        op.execute(context(f"run-{uuid.uuid4().hex}", 1))
    assert info.value.field == "TrainingInputMode" and "Pipe mode" in str(info.value)
    assert not (tmp_path / "out").exists()  # no sourcedir.tar.gz
    assert not local_root.exists() or not [p for p in local_root.rglob("*") if p.is_file()]


def test_pipe_mode_of_a_processing_input_is_refused_before_the_code_is_uploaded(tmp_path, local_root):
    script = tmp_path / "prep.py"
    script.write_text("print('prep')\n")
    (tmp_path / "data").mkdir()
    op = SmdistProcessingOperator(
        task_id="prep", image_uri=IMAGE, code=str(script), code_location=f"file://{tmp_path}/code",
        inputs={"data": {"source": f"file://{tmp_path}/data/", "s3_input_mode": "Pipe"}},
        outputs={"out": f"file://{tmp_path}/processed"})
    with pytest.raises(SpecError) as info:
        op.execute(context(f"run-{uuid.uuid4().hex}", 1))
    assert "S3InputMode" in info.value.field and "Pipe mode" in str(info.value)
    assert not (tmp_path / "code").exists()  # prep.py was not uploaded
