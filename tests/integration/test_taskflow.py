"""``@task.smdist`` / ``@task.smdist_processing``: real local jobs, and the moto server for the sagemaker backend.

The functions below are module-level: their source (not a pickle) is what travels into the jobs.
"""

from __future__ import annotations

import inspect
import io
import sys
import tarfile
import time
import uuid
from types import SimpleNamespace

import pytest

from airflow_smdist._compat import AirflowException
from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher, mpi
from airflow_smdist.decorators.processing import SmdistProcessingDecoratedOperator
from airflow_smdist.decorators.results import SmdistFunctionError, SmdistNoResult
from airflow_smdist.decorators.smdist import SmdistTrainingDecoratedOperator
from airflow_smdist.specs.errors import SpecError

pytestmark = pytest.mark.slow
IMAGE = {"framework": "pytorch", "framework_version": "2.5.1", "py_version": "py311", "instance_type": "ml.c5.xlarge"}


# -- functions that run in the jobs -------------------------------------------------------------------------
def resumable_steps(steps: int, seconds: float):
    """Counts ``steps``, rank 0 checkpointing the count to the checkpoint directory after each; starts from
    what it finds there (a resumed spot job finds what was synced before its interruption)."""
    import json
    import os
    import time

    from airflow_smdist.runtime import cluster

    c = cluster()
    path = os.path.join(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"), "checkpoints", "steps.json")
    start = json.load(open(path))["step"] if os.path.exists(path) else 0
    for step in range(start, steps):
        time.sleep(seconds)
        if c.rank == 0:
            with open(path + ".tmp", "w") as f:
                json.dump({"step": step + 1}, f)
            os.replace(path + ".tmp", path)
    return {"resumed_from": start, "steps": steps}


def rank_value(base: int, learning_rate: float = 0.0):
    from airflow_smdist.runtime import cluster

    c = cluster()
    # every rank returns something different; only global rank 0's may reach XCom
    return {"rank": c.rank, "world": c.world_size, "value": base + 100 * c.rank, "learning_rate": learning_rate}


def reads_hyperparameters(api_token: str = "", learning_rate: float = 0.0):
    from airflow_smdist.runtime import cluster

    return {"rank": cluster().rank, "token_ok": api_token == "s3cr3t-7", "learning_rate": learning_rate}


def fail_on_host_2(seconds: float):
    import time

    from airflow_smdist.runtime import cluster

    c = cluster()
    if c.host_rank == 1:
        raise ValueError(f"bad shard on host rank {c.host_rank}")
    time.sleep(seconds)
    return "rank 0 survived"


def fail_on_rank_3(seconds: float):
    import time

    from airflow_smdist.runtime import cluster

    c = cluster()
    if c.rank == 3:
        raise KeyError(f"rank {c.rank} lost its shard")
    time.sleep(seconds)  # the failing rank's abort ends the others sooner
    return "rank 0 survived"


def rank_and_world(base: int):
    import socket

    from airflow_smdist.runtime import cluster

    c = cluster()
    # each rank returns a different value; only global rank 0's may reach XCom
    return {"rank": c.rank, "world": c.world_size, "value": base + 100 * c.rank, "host": socket.gethostname()}


def returns_a_set():
    return {1, 2}


def raises_late(seconds: float):
    import time

    time.sleep(seconds)
    raise ZeroDivisionError("deferred and failed")


def sleeper(seconds: float):
    import time

    time.sleep(seconds)
    return {"slept": seconds}


def count_shard(suffix: str):
    import os

    from airflow_smdist.runtime import cluster

    shard = cluster().channels["records"]
    return sorted(f for f in os.listdir(shard) if f.endswith(suffix))


def big_result(n: int):
    return "x" * n


def uses_a_module_name():
    return inspect.getsource(rank_value)  # 'inspect' is this test module's, not the job's


# -- helpers ------------------------------------------------------------------------------------------------
MPI_2X2 = {"mpi": {"enabled": True, "processes_per_host": 2}}
needs_mpi_hosts = pytest.mark.skipif(
    launcher.namespace_prefix() is None or mpi.missing() is not None,
    reason=f"MPI ranks on separate hosts need namespaces and the [local] extra's Open MPI / mpi4py: "
           f"{launcher.namespaces_available()} {mpi.missing()}")


def context(run_id: str, task_id: str = "fn"):
    return {"ti": SimpleNamespace(dag_id="dag", task_id=task_id, map_index=-1, try_number=1), "run_id": run_id}


@pytest.fixture
def local_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    return tmp_path / "jobs"


def training(tmp_path, function, *args, **kw):
    options = dict(task_id="fn", python_callable=function, op_args=list(args), instance_count=2,
                   output_path=f"file://{tmp_path}/out", poll_interval=0.5, **IMAGE)
    options.update(kw)
    return SmdistTrainingDecoratedOperator(**options)


def trigger_event(make, ctx) -> dict:
    """Run ``make()``'s task until it defers, then its trigger until its first event; the event's payload."""
    import asyncio

    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.exceptions import TaskDeferred
    else:
        from airflow.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as deferred:
        make().execute(ctx)

    async def first_event():
        async for event in deferred.value.trigger.run():
            return event

    return asyncio.run(asyncio.wait_for(first_event(), 120)).payload


def wait_for(predicate, timeout=60):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, "timed out"
        time.sleep(0.2)


class RecordingTI(SimpleNamespace):
    def xcom_push(self, key, value):
        self.pushed[key] = value


# -- tests --------------------------------------------------------------------------------------------------
def test_only_global_rank_0s_value_is_the_result(tmp_path, local_root):
    op = training(tmp_path, rank_value, 7)
    value = op.execute(context(f"run-{uuid.uuid4().hex}"))
    # rank 1 returned {"rank": 1, "value": 107, ...}; only rank 0's value comes back
    assert value == {"rank": 0, "world": 2, "value": 7, "learning_rate": 0.0}
    job = LocalBackend(local_root).list_jobs("training")[0]["TrainingJobName"]
    logs = (local_root / "training" / job / "logs" / "algo-2.jsonl").read_text()
    assert "only global rank 0's return value becomes the task's result" in logs


def test_deferred_wait_returns_rank_0s_value_and_secret_hyperparameters_reach_the_function(tmp_path, local_root):
    def make():
        return training(tmp_path, reads_hyperparameters, deferrable=True, hyperparameters={"api_token": "s3cr3t-7"},
                        secret_hyperparameters=["api_token"], lr_scaling={"base_learning_rate": 0.1,
                                                                           "base_batch_size": 32,
                                                                           "per_device_batch_size": 32})
    ti = RecordingTI(dag_id="dag", task_id="fn", map_index=-1, try_number=1, pushed={})
    ctx = {"ti": ti, "run_id": f"run-{uuid.uuid4().hex}"}
    value = make().execute_complete(ctx, trigger_event(make, ctx))  # the triggerer resumes a fresh operator
    assert value == {"rank": 0, "token_ok": True, "learning_rate": pytest.approx(0.2)}
    job = ti.pushed["smdist_job"]  # the job's own summary, with the secret masked
    assert job["status"] == "Completed" and job["hyperparameters"]["api_token"] == "***"
    assert job["lr_scaling"]["learning_rate"] == pytest.approx(0.2)


def test_a_function_raising_on_host_2_fails_the_task_with_host_2s_traceback(tmp_path, local_root, caplog, capsys):
    op = training(tmp_path, fail_on_host_2, 30)
    with pytest.raises(SmdistFunctionError) as info:
        op.execute(context(f"run-{uuid.uuid4().hex}"))
    error = info.value
    assert error.exception_type == "ValueError" and error.host == "algo-2" and error.rank == 1
    message = str(error)
    assert "raised ValueError on rank 1 on algo-2" in message and "bad shard on host rank 1" in message
    # the traceback points at this file's own line of the raise (the source travels at its line numbers)
    lines, first = inspect.getsourcelines(fail_on_host_2)
    raise_line = first + next(i for i, line in enumerate(lines) if "raise ValueError" in line)
    assert f"line {raise_line}, in fail_on_host_2" in message
    assert 'raise ValueError(f"bad shard on host rank {c.host_rank}")' in message
    assert "Traceback on algo-2" in capsys.readouterr().out + caplog.text  # in the task log
    assert "runtime/function.py" not in error.remote_traceback  # starts at the function, not the runner


def test_pickling_with_another_python_is_refused_before_any_job(tmp_path, local_root):
    op = training(tmp_path, rank_value, 1, serializer="cloudpickle", py_version="py310")
    with pytest.raises(SpecError, match=r"py_version.*Python 3\.10.*differs"):
        op.execute(context(f"run-{uuid.uuid4().hex}"))
    assert LocalBackend(local_root).list_jobs("training") == []
    assert not (tmp_path / "out").exists()  # nothing uploaded either


def test_module_names_and_non_json_arguments_are_refused_before_any_job(tmp_path, local_root):
    with pytest.raises(SpecError, match="uses names of the DAG file.*inspect"):
        training(tmp_path, uses_a_module_name).execute(context(f"run-{uuid.uuid4().hex}"))
    with pytest.raises(SpecError, match=r"rank_value\(\) positional argument 0.*set value is not JSON"):
        training(tmp_path, rank_value, {1, 2}).execute(context(f"run-{uuid.uuid4().hex}"))
    assert LocalBackend(local_root).list_jobs("training") == []


def test_cloudpickle_opt_in_runs_a_closure(tmp_path, local_root):
    offset = 5

    def closure(x):
        return x + offset

    # cloudpickle payloads need the image's Python to be the worker's: the PyTorch image of this Python
    image = {11: ("2.5.1", "py311"), 12: ("2.9.0", "py312"), 13: ("2.10.0", "py313")}[sys.version_info[1]]
    op = training(tmp_path, closure, 10, serializer="cloudpickle", instance_count=1,
                  framework_version=image[0], py_version=image[1])
    assert op.execute(context(f"run-{uuid.uuid4().hex}")) == 15


def test_a_retry_reattaches_to_the_running_job(tmp_path, local_root):
    run_id = f"run-{uuid.uuid4().hex}"
    first = training(tmp_path, sleeper, 3, wait_for_completion=False).execute(context(run_id))
    assert first["status"] == "InProgress"
    value = training(tmp_path, sleeper, 3).execute(context(run_id))  # the retry: a new operator object
    assert value == {"slept": 3}
    assert [j["TrainingJobName"] for j in LocalBackend(local_root).list_jobs("training")] == [first["job_name"]]


def test_on_kill_stops_the_job(tmp_path, local_root):
    op = training(tmp_path, sleeper, 300, wait_for_completion=False)
    name = op.execute(context(f"run-{uuid.uuid4().hex}"))["job_name"]
    backend = LocalBackend(local_root)
    wait_for(lambda: "smdist: calling sleeper()" in "".join(e.message for e in backend.log_events("training", name)[0]))
    op.on_kill()
    assert backend.describe("training", name)["TrainingJobStatus"] == "Stopped"


def test_processing_calls_the_function_once_per_host_over_its_shard(tmp_path, local_root):
    data = tmp_path / "records"
    data.mkdir()
    names = [f"part-{i}.csv" for i in range(5)]
    for n in names:
        (data / n).write_text("1\n")
    op = SmdistProcessingDecoratedOperator(
        task_id="fn", python_callable=count_shard, op_args=[".csv"], image_uri="python:3.11", instance_count=2,
        inputs={"records": {"source": f"file://{data}", "distribution": "ShardedByS3Key"}},
        code_location=f"file://{tmp_path}/code", poll_interval=0.5)
    per_host = op.execute(context(f"run-{uuid.uuid4().hex}"))
    assert per_host == [["part-0.csv", "part-2.csv", "part-4.csv"], ["part-1.csv", "part-3.csv"]]


def test_moto_receives_the_request_the_operator_builds(moto_server, s3_bucket, tmp_path):
    import boto3

    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    args = dict(instance_count=2, output_path=f"s3://{s3_bucket}/out", role="arn:aws:iam::123456789012:role/R",
                inputs={"train": {"s3_uri": f"s3://{s3_bucket}/train/", "distribution": "ShardedByS3Key"}},
                hyperparameters={"epochs": 3}, environment={"STAGE": "test"}, max_run=600, **IMAGE)
    name = f"fn-{uuid.uuid4().hex[:10]}"
    op = SmdistTrainingDecoratedOperator(task_id="fn", python_callable=rank_value, op_args=[1], backend="sagemaker",
                                         job_name=name, poll_interval=0.1, requirements=["tqdm==4.67.1"], **args)
    # moto completes every job at once and writes no output: "Completed but no result" must fail the task
    with pytest.raises(SmdistNoResult, match="completed, but it has no output data"):
        op.execute(context("run-1"))
    sm = boto3.client("sagemaker", endpoint_url=moto_server, region_name="us-east-1")
    received = sm.describe_training_job(TrainingJobName=name)
    expected = SageMakerDistributedTrainingOperator(
        task_id="same", backend="sagemaker", entry_point="smdist_entry.py", source_dir=str(tmp_path), **args,
    ).plan(name, "sagemaker").request
    for key in ("AlgorithmSpecification", "RoleArn", "ResourceConfig", "InputDataConfig", "OutputDataConfig",
                "StoppingCondition", "HyperParameters", "Environment"):
        assert received[key] == expected[key], key
    assert "SMDIST" not in str(received["Environment"]) and "KEY" not in str(received["Environment"])
    source = boto3.client("s3", endpoint_url=moto_server).get_object(
        Bucket=s3_bucket, Key=f"out/{name}/source/sourcedir.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(source)) as tar:
        members = set(tar.getnames())
        shipped = tar.extractfile("smdist_function.py").read().decode()
        requirements = tar.extractfile("requirements.txt").read().decode()
    assert {"smdist_entry.py", "smdist_function.json", "airflow_smdist/runtime/function.py"} <= members
    assert "def rank_value(base: int" in shipped and "@" not in shipped and requirements == "tqdm==4.67.1\n"


def test_completed_without_a_done_record_fails_the_task(tmp_path, local_root):
    with pytest.raises(AirflowException, match="done record"):
        training(tmp_path, exits_early, instance_count=1).execute(context(f"run-{uuid.uuid4().hex}"))


def exits_early():
    import os

    os.makedirs(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "other"), exist_ok=True)
    open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "other", "x.txt"), "w").close()
    os._exit(0)  # before the runner writes the result


def test_processing_on_moto_ships_the_payload_as_inputs_and_collects_results_from_an_output(moto_server, s3_bucket):
    import boto3

    name = f"fnp-{uuid.uuid4().hex[:10]}"
    op = SmdistProcessingDecoratedOperator(
        task_id="fn", python_callable=count_shard, op_args=[".csv"], backend="sagemaker", job_name=name,
        image_uri="763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-cpu-py311",
        role="arn:aws:iam::123456789012:role/R", instance_count=2, code_location=f"s3://{s3_bucket}/code",
        inputs={"records": {"source": f"s3://{s3_bucket}/records/", "distribution": "ShardedByS3Key"}},
        poll_interval=0.1)
    with pytest.raises(SmdistNoResult, match="host 1 of 2 wrote no result"):  # moto completes with no output
        op.execute(context("run-1"))
    job = boto3.client("sagemaker", endpoint_url=moto_server, region_name="us-east-1").describe_processing_job(
        ProcessingJobName=name)
    inputs = {i["InputName"]: i["S3Input"] for i in job["ProcessingInputs"]}
    assert inputs["records"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert inputs["smdist-function"]["LocalPath"] == "/opt/ml/processing/input/smdist-function"
    assert job["AppSpecification"]["ContainerEntrypoint"] == ["python3",
                                                              "/opt/ml/processing/input/code/smdist_entry.py"]
    outputs = {o["OutputName"]: o["S3Output"] for o in job["ProcessingOutputConfig"]["Outputs"]}
    assert outputs["smdist-results"]["S3Uri"] == f"s3://{s3_bucket}/code/{name}/output/smdist-results"
    keys = {o["Key"] for o in boto3.client("s3", endpoint_url=moto_server).list_objects_v2(
        Bucket=s3_bucket, Prefix=f"code/{name}/input/smdist-function/")["Contents"]}
    assert f"code/{name}/input/smdist-function/smdist_function.py" in keys
    assert not job.get("Environment")  # nothing (no key, no secret) travels in the job's environment


def test_processing_host_2s_failure_fails_the_task_with_its_type(tmp_path, local_root):
    data = tmp_path / "records"
    data.mkdir()
    (data / "a.csv").write_text("1\n")
    op = SmdistProcessingDecoratedOperator(
        task_id="fn", python_callable=fail_on_host_2, op_args=[30], image_uri="python:3.11", instance_count=2,
        inputs={"records": f"file://{data}"}, code_location=f"file://{tmp_path}/code", poll_interval=0.5)
    with pytest.raises(SmdistFunctionError, match=r"fail_on_host_2\(\) raised ValueError on host algo-2") as info:
        op.execute(context(f"run-{uuid.uuid4().hex}"))
    assert info.value.exception_type == "ValueError" and "bad shard on host rank 1" in info.value.remote_traceback


def test_a_result_above_max_result_bytes_fails_with_a_clear_error(tmp_path, local_root):
    op = training(tmp_path, big_result, 5000, instance_count=1, max_result_bytes=1000)
    with pytest.raises(SmdistFunctionError, match=r"raised ResultTooLarge on rank 0 .* 5002 bytes as JSON, above "
                                                  r"max_result_bytes=1000: write large data to S3"):
        op.execute(context(f"run-{uuid.uuid4().hex}"))


@needs_mpi_hosts
def test_under_mpi_a_function_raising_on_rank_3_fails_the_task_naming_its_own_host(tmp_path, local_root, caplog,
                                                                                   capsys):
    """mpirun on algo-1 relays every rank's output, so rank 3's record reaches the task through algo-1's log
    stream; the task must still name the host rank 3 ran on (algo-2) and show that host's traceback."""
    op = training(tmp_path, fail_on_rank_3, 120, distribution=MPI_2X2)
    with pytest.raises(SmdistFunctionError) as info:
        op.execute(context(f"run-{uuid.uuid4().hex}"))
    error = info.value
    assert (error.exception_type, error.host, error.rank) == ("KeyError", "algo-2", 3), str(error)
    message = str(error)
    assert "raised KeyError on rank 3 on algo-2" in message and "rank 3 lost its shard" in message
    assert "Traceback on algo-2:" in message and "in fail_on_rank_3" in message
    assert 'raise KeyError(f"rank {c.rank} lost its shard")' in error.remote_traceback
    log = capsys.readouterr().out + caplog.text
    assert "Traceback on algo-2:" in log and "in fail_on_rank_3" in log  # in the task log
    assert "on algo-1" not in message.split("later failure")[0]


@needs_mpi_hosts
def test_under_mpi_only_global_rank_0s_value_reaches_xcom(tmp_path, local_root):
    op = training(tmp_path, rank_and_world, 7, distribution=MPI_2X2)
    value = op.execute(context(f"run-{uuid.uuid4().hex}"))
    # ranks 1..3 returned 107, 207, 307 (ranks 2 and 3 on algo-2); only global rank 0's value comes back
    assert value == {"rank": 0, "world": 4, "value": 7, "host": "algo-1"}
    job = LocalBackend(local_root).list_jobs("training")[0]["TrainingJobName"]
    lines = "".join(e.message for e in LocalBackend(local_root).log_events("training", job)[0])
    for rank, host in ((1, "algo-1"), (2, "algo-2"), (3, "algo-2")):
        assert f"smdist: calling rank_and_world() on {host} (rank {rank} of 4)" in lines
        assert f"smdist: rank {rank} returned; only global rank 0's return value becomes the task's result" in lines


def test_a_non_json_return_value_fails_the_task_with_the_runners_error_and_the_fix(tmp_path, local_root):
    op = training(tmp_path, returns_a_set, instance_count=1)
    with pytest.raises(SmdistFunctionError) as info:
        op.execute(context(f"run-{uuid.uuid4().hex}"))
    assert info.value.exception_type == "ResultNotJSON" and info.value.rank == 0
    message = str(info.value)
    assert "returns_a_set() raised ResultNotJSON on rank 0 on algo-1" in message
    assert "the return value of returns_a_set() is not JSON" in message
    assert "write large or binary data to S3 and return its URI" in message  # the fix


def test_a_deferred_run_whose_function_raises_fails_with_its_exception_type(tmp_path, local_root):
    def make():
        return training(tmp_path, raises_late, 1, instance_count=1, deferrable=True)

    ctx = context(f"run-{uuid.uuid4().hex}")
    event = trigger_event(make, ctx)
    with pytest.raises(SmdistFunctionError) as info:
        make().execute_complete(ctx, event)  # the triggerer resumes a fresh operator object
    assert info.value.exception_type == "ZeroDivisionError" and info.value.host == "algo-1"
    assert "raises_late() raised ZeroDivisionError on rank 0 on algo-1" in str(info.value)
    assert "deferred and failed" in info.value.remote_traceback


def test_a_decorated_spot_job_is_interrupted_and_its_function_resumes_from_its_checkpoint(tmp_path, local_root,
                                                                                         monkeypatch):
    """The spot rehearsal for @task.smdist: interrupted once 3 s into training, the function starts again on both
    hosts from the checkpoint rank 0 wrote (synced to CheckpointConfig.S3Uri and copied back), and the task's
    result is the resumed run's."""
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "3")
    monkeypatch.setenv("SMDIST_LOCAL_CHECKPOINT_SYNC", "0.5")
    op = training(tmp_path, resumable_steps, 12, 0.5, use_spot_instances=True, max_run=600, max_wait=900,
                  checkpoint_s3_uri=f"file://{tmp_path}/checkpoints")
    value = op.execute(context(f"run-{uuid.uuid4().hex}"))
    assert value["steps"] == 12 and 0 < value["resumed_from"] < 12, value
    backend = LocalBackend(local_root)
    job = backend.list_jobs("training")[0]["TrainingJobName"]
    d = backend.describe("training", job)
    assert [t["Status"] for t in d["SecondaryStatusTransitions"]].count("Interrupted") == 1, d
    assert d["EnableManagedSpotTraining"] is True and d["TrainingJobStatus"] == "Completed"
