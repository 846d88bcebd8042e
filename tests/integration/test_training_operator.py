"""The training operator on the local backend: stable names, reattach on retry, kill stops, results."""

from __future__ import annotations

import json
import os
import time
import uuid
from types import SimpleNamespace

import pytest

from airflow_smdist._compat import AirflowException
from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.operators.base import stable_job_name
from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTRACT = os.path.join(REPO, "tests", "fixtures", "contract")


def context(run_id: str, task_id: str = "train", map_index: int = -1):
    ti = SimpleNamespace(dag_id="dag", task_id=task_id, map_index=map_index, try_number=1)
    return {"ti": ti, "run_id": run_id}


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for i in range(4):
        (d / f"p{i}.csv").write_text(f"{i}\n")
    return d


@pytest.fixture
def local_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    return tmp_path / "jobs"


def operator(tmp_path, data, **kw):
    args = dict(task_id="train", entry_point="dump_env.py", source_dir=CONTRACT,
                image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", instance_count=2,
                inputs={"train": f"file://{data}"}, output_path=f"file://{tmp_path}/out",
                environment={"SMDIST_REPO": REPO}, poll_interval=0.5,
                metric_definitions=[{"Name": "accuracy", "Regex": r"accuracy: ([0-9.]+)"}])
    args.update(kw)
    return SageMakerDistributedTrainingOperator(**args)


def test_stable_job_name_is_deterministic_valid_and_distinct():
    a = stable_job_name("smdist", "dag", "train_model", "manual__2026-12-02T10:00:00+00:00")
    assert a == stable_job_name("smdist", "dag", "train_model", "manual__2026-12-02T10:00:00+00:00")
    assert a != stable_job_name("smdist", "dag", "train_model", "manual__2026-12-02T10:00:00+00:00", map_index=3)
    assert a != stable_job_name("smdist", "dag", "train_model", "scheduled__2026-12-02T10:00:00+00:00")
    long = stable_job_name("smdist", "d" * 200, "t" * 200, "r" * 200)
    assert len(long) + len("-r30") <= 63
    from airflow_smdist.specs.validate import validate_request  # noqa: F401  (pattern checked below)
    import re

    assert re.fullmatch(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}", long + "-r30")


@pytest.mark.slow
def test_runs_and_returns_a_small_json_result(tmp_path, data, local_root):
    op = operator(tmp_path, data)
    result = op.execute(context(f"run-{uuid.uuid4().hex}"))
    json.dumps(result)  # XCom-safe
    assert result["status"] == "Completed" and result["backend"] == "local"
    assert result["model_artifacts"] == f"file://{tmp_path}/out/{result['job_name']}/output/model.tar.gz"
    assert os.path.exists(result["model_artifacts"][len("file://"):])
    assert result["final_metrics"]["accuracy"] in (0.5, 0.6)
    assert result["instance_count"] == 2 and result["hyperparameters"] == {}


@pytest.mark.slow
def test_blocking_wait_on_the_local_backend_ends_with_the_job_not_at_the_next_poll(tmp_path, data, local_root):
    """poll_interval governs the sagemaker backend; a local job's end is seen from its state file at once.
    With a 600 s interval the old wait slept 600 s after a job of about a second."""
    op = operator(tmp_path, data, instance_count=1, hyperparameters={"sleep": 1}, poll_interval=600)
    started = time.monotonic()
    result = op.execute(context(f"run-{uuid.uuid4().hex}"))
    assert result["status"] == "Completed"
    assert time.monotonic() - started < 300


@pytest.mark.slow
def test_retry_reattaches_to_the_running_job_instead_of_starting_a_second(tmp_path, data, local_root):
    run_id = f"run-{uuid.uuid4().hex}"
    first = operator(tmp_path, data, hyperparameters={"sleep": 4}, wait_for_completion=False)
    started = first.execute(context(run_id))
    assert started["status"] == "InProgress"
    # the worker died; the retry (a new operator object in a new process) finds the same job
    retry = operator(tmp_path, data, hyperparameters={"sleep": 4})
    result = retry.execute(context(run_id))
    assert result["job_name"] == started["job_name"] and result["status"] == "Completed"
    jobs = LocalBackend(local_root).list_jobs("training")
    assert [j["TrainingJobName"] for j in jobs] == [started["job_name"]]
    # a third try after success returns the completed job's result, again without a new job
    again = operator(tmp_path, data).execute(context(run_id))
    assert again["job_name"] == started["job_name"]
    assert len(LocalBackend(local_root).list_jobs("training")) == 1


@pytest.mark.slow
def test_failed_attempt_gets_a_new_name_and_the_failure_is_reported(tmp_path, data, local_root):
    run_id = f"run-{uuid.uuid4().hex}"
    with pytest.raises(AirflowException) as info:
        operator(tmp_path, data, hyperparameters={"fail-host-rank": 0}).execute(context(run_id))
    message = str(info.value)
    assert "ended Failed" in message and "simulated crash" in message and "algo-1" in message
    result = operator(tmp_path, data).execute(context(run_id))
    assert result["status"] == "Completed" and result["job_name"].endswith("-r2")


@pytest.mark.slow
def test_on_kill_stops_the_job(tmp_path, data, local_root):
    op = operator(tmp_path, data, hyperparameters={"sleep": 300}, wait_for_completion=False)
    started = op.execute(context(f"run-{uuid.uuid4().hex}"))
    backend = LocalBackend(local_root)
    deadline = time.time() + 60
    while backend.describe("training", started["job_name"])["SecondaryStatus"] != "Training":
        assert time.time() < deadline
        time.sleep(0.2)
    op.on_kill()
    assert backend.describe("training", started["job_name"])["TrainingJobStatus"] == "Stopped"


def test_templated_strings_are_coerced_before_any_job_starts(tmp_path, data, local_root):
    from airflow_smdist.specs.errors import SpecError

    op = operator(tmp_path, data, instance_count="two")
    with pytest.raises(SpecError, match="instance_count"):
        op.execute(context(f"run-{uuid.uuid4().hex}"))
    assert LocalBackend(local_root).list_jobs("training") == []


@pytest.mark.slow
def test_sensor_waits_for_a_job_started_elsewhere(tmp_path, data, local_root):
    from airflow_smdist.sensors.training import SageMakerDistributedTrainingSensor

    started = operator(tmp_path, data, hyperparameters={"sleep": 2}, wait_for_completion=False).execute(
        context(f"run-{uuid.uuid4().hex}"))
    sensor = SageMakerDistributedTrainingSensor(task_id="wait", job_name=started["job_name"])
    assert sensor.poke({}) is False  # still running
    deadline = time.time() + 60
    while (done := sensor.poke({})) is False:
        assert time.time() < deadline
        time.sleep(0.5)
    assert done.is_done and done.xcom_value["status"] == "Completed"
    assert done.xcom_value["model_artifacts"].endswith(f"{started['job_name']}/output/model.tar.gz")

    failed = operator(tmp_path, data, hyperparameters={"fail-host-rank": 1}, wait_for_completion=False).execute(
        context(f"run-{uuid.uuid4().hex}"))
    sensor = SageMakerDistributedTrainingSensor(task_id="wait2", job_name=failed["job_name"])
    deadline = time.time() + 60
    with pytest.raises(AirflowException, match="ended Failed: AlgorithmError"):
        while sensor.poke({}) is False:
            assert time.time() < deadline
            time.sleep(0.5)


LR_SCALING = {"base_learning_rate": 0.01, "base_batch_size": 32, "per_device_batch_size": 64, "warmup_epochs": 2}


@pytest.mark.slow
@pytest.mark.torch
def test_lr_scaling_reaches_xcom_of_a_retried_and_of_a_deferred_task(tmp_path, data, local_root):
    """The try that built the request is not the one that returns the result when the task was deferred
    (execute_complete runs in a new process) or retried (reattach): lr_scaling comes from the job itself."""
    run_id = f"run-{uuid.uuid4().hex}"
    first = operator(tmp_path, data, lr_scaling=LR_SCALING, wait_for_completion=False,
                     distribution={"torch_distributed": {"enabled": True}})
    started = first.execute(context(run_id))
    expected = {"global_batch_size": 128, "learning_rate": 0.04, "warmup_epochs": 2, "world_size": 2}
    # a new operator object, as in the retry's process: reattaches and waits
    retried = operator(tmp_path, data, lr_scaling=LR_SCALING, distribution={"torch_distributed": {"enabled": True}})
    result = retried.execute(context(run_id))
    assert result["job_name"] == started["job_name"]
    assert result["lr_scaling"] == expected
    # as in the process that resumes a deferred task: only execute_complete runs
    resumed = operator(tmp_path, data, lr_scaling=LR_SCALING, distribution={"torch_distributed": {"enabled": True}})
    out = resumed.execute_complete(context(run_id), {"job_name": started["job_name"], "status": "Completed"})
    assert out["lr_scaling"] == expected
    # the values are those the job was started with (its hyperparameters), not recomputed guesses
    described = LocalBackend(local_root).describe("training", started["job_name"])
    assert json.loads(described["HyperParameters"]["learning_rate"]) == out["lr_scaling"]["learning_rate"]
