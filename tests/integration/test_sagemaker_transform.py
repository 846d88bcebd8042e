"""Batch inference on the sagemaker backend, over HTTP to the moto server (no mocked methods of ours).

moto completes every job at once and writes no outputs; where a test needs the service's outputs it writes
them into moto's S3 itself, as a transform job would have (one line per record), or drives job states
through moto_server's helpers."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
import uuid
from types import SimpleNamespace

import boto3
import moto_throttle
import pytest

from airflow_smdist._compat import AirflowException
from airflow_smdist.backends.base import BackendError
from airflow_smdist.runtime import batch_runner as inference
from airflow_smdist.backends.sagemaker import SageMakerBackend
from airflow_smdist.operators.transform import (
    SageMakerBatchShardPlanOperator,
    SageMakerShardedBatchInferenceOperator,
    create_model,
    describe_model,
)
from airflow_smdist.sensors.transform import SageMakerShardedBatchInferenceSensor
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.transform import RUNNER_NAME, build_model, build_transform
from moto_server import REGION, new_jobs_in_progress, sagemaker_backend, seed_log_stream, set_job_status

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
ROWS = {"a.csv": 3, "nested/b.csv": 5, "c.csv": 2, "d.csv": 4}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def context(run_id: str, task_id: str = "score", map_index: int = -1):
    return {"ti": SimpleNamespace(dag_id="dag", task_id=task_id, map_index=map_index, try_number=1), "run_id": run_id}


@pytest.fixture
def backend(moto_server):
    return SageMakerBackend()


@pytest.fixture
def s3(moto_server):
    return boto3.client("s3", endpoint_url=moto_server, region_name=REGION)


@pytest.fixture
def sm(moto_server):
    return boto3.client("sagemaker", endpoint_url=moto_server, region_name=REGION)


@pytest.fixture
def prefix(s3, s3_bucket):
    """Input objects and a model.tar.gz in moto's S3."""
    for key, n in ROWS.items():
        s3.put_object(Bucket=s3_bucket, Key=f"in/{key}", Body="".join(f"{i},{i + 1},{i + 2},{i}\n" for i in range(n)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("code/inference.py")
        info.size = 0
        tar.addfile(info, io.BytesIO(b""))
    s3.put_object(Bucket=s3_bucket, Key="model/model.tar.gz", Body=buf.getvalue())
    return s3_bucket


def write_output(s3, bucket, key, lines):
    """What the service writes for an object: its predictions, one line per record."""
    s3.put_object(Bucket=bucket, Key=f"out/{key}.out", Body="".join(f"{i * 0.5}\n" for i in range(lines)))


def op(bucket, **kw):
    args = dict(task_id="score", backend="sagemaker", input_uri=f"s3://{bucket}/in/", output_uri=f"s3://{bucket}/out/",
                model_data=f"s3://{bucket}/model/model.tar.gz", image_uri=IMAGE, role=ROLE, instance_count=2,
                content_type="text/csv", accept="text/csv", split_type="Line", poll_interval=0.05, print_logs=False)
    args.update(kw)
    return SageMakerShardedBatchInferenceOperator(**args)


def test_model_and_transform_job_round_trip(backend, prefix):
    name = unique("model")
    request = build_model(model_name=name, model_data=f"s3://{prefix}/model/model.tar.gz", role=ROLE,
                          image_uri=IMAGE, allow_local_uris=False).request
    arn = create_model(backend, request)
    assert arn.endswith(f":model/{name}")
    d = describe_model(backend, name)
    assert d["ModelName"] == name
    assert d["PrimaryContainer"]["ModelDataUrl"] == request["PrimaryContainer"]["ModelDataUrl"]
    assert d["PrimaryContainer"]["Environment"]["SAGEMAKER_SUBMIT_DIRECTORY"] == "/opt/ml/model/code"
    assert describe_model(backend, unique("absent")) is None
    job = unique("tj")
    req = build_transform(job_name=job, model_name=name, input_uri=f"s3://{prefix}/in/",
                          output_uri=f"s3://{prefix}/out/", instance_count=3, content_type="text/csv",
                          split_type="Line", batch_strategy="MultiRecord", max_payload_mb=4, assemble_with="Line",
                          accept="text/csv", allow_local_uris=False)
    assert backend.submit("transform", req) == job
    got = backend.describe("transform", job)
    assert got["TransformJobStatus"] == "Completed"
    for key in ("ModelName", "TransformInput", "TransformOutput", "TransformResources", "BatchStrategy",
                "MaxPayloadInMB"):
        assert got[key] == req[key], key
    with pytest.raises(BackendError) as e:
        backend.submit("transform", req)
    assert e.value.code == "ResourceInUse"


def test_local_uris_are_refused_before_any_call(backend, sm):
    request = build_model(model_name=unique("model"), model_data="file:///tmp/model.tar.gz", role=ROLE,
                          image_uri=IMAGE).request
    with pytest.raises(SpecError, match="file:// URIs only work on the local backend"):
        create_model(backend, request)
    assert request["ModelName"] not in [m["ModelName"] for m in sm.list_models()["Models"]]


def test_operator_finds_what_the_jobs_did_not_write_and_reruns_only_that(backend, prefix, s3, sm):
    run = f"run-{uuid.uuid4().hex}"
    # moto "completes" the job but writes nothing: every object is named as missing
    with pytest.raises(AirflowException) as e:
        op(prefix).execute(context(run))
    assert "4 of 4 object(s) incomplete" in str(e.value)
    assert f"s3://{prefix}/in/nested/b.csv: no output s3://{prefix}/out/nested/b.csv.out" in str(e.value)
    first = sm.list_transform_jobs(NameContains="smdist-batch-score")["TransformJobSummaries"]
    jobs = [j["TransformJobName"] for j in first]
    d = sm.describe_transform_job(TransformJobName=jobs[0])
    assert d["TransformInput"]["DataSource"]["S3DataSource"] == {"S3DataType": "S3Prefix",
                                                                 "S3Uri": f"s3://{prefix}/in/"}
    manifest = json.loads(s3.get_object(Bucket=prefix, Key="out/_smdist/manifest.json")["Body"].read())
    assert not manifest["complete"] and len(manifest["pending"]) == 4

    # the service wrote three outputs, one with a record missing: the re-run covers only the other two
    write_output(s3, prefix, "a.csv", ROWS["a.csv"])
    write_output(s3, prefix, "nested/b.csv", ROWS["nested/b.csv"])
    write_output(s3, prefix, "c.csv", ROWS["c.csv"] - 1)
    with pytest.raises(AirflowException) as e:
        op(prefix).execute(context(run))
    assert "2 of 4 object(s) incomplete" in str(e.value)
    assert f"s3://{prefix}/in/c.csv: 2 record(s) in, 1 line(s)" in str(e.value)
    job2 = jobs[0] + "-g2"
    d = sm.describe_transform_job(TransformJobName=job2)
    src = d["TransformInput"]["DataSource"]["S3DataSource"]
    assert src["S3DataType"] == "ManifestFile"
    bucket, key = src["S3Uri"][len("s3://"):].split("/", 1)
    assert json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read()) == [
        {"prefix": f"s3://{prefix}/in/"}, "c.csv", "d.csv"]

    write_output(s3, prefix, "c.csv", ROWS["c.csv"])
    write_output(s3, prefix, "d.csv", ROWS["d.csv"])
    summary = op(prefix).execute(context(run))
    assert summary["complete"] and summary["processed"] == 0 and summary["jobs"] == []
    assert summary["records"] == sum(ROWS.values())
    with pytest.raises(Exception):
        sm.describe_transform_job(TransformJobName=jobs[0] + "-g3")  # nothing missing: no third job
    assert summary["outputs"][f"s3://{prefix}/in/nested/b.csv"] == f"s3://{prefix}/out/nested/b.csv.out"


def test_processing_fan_out_sends_a_sharded_processing_job_and_uploads_the_runner(backend, prefix, s3, sm):
    run = f"run-{uuid.uuid4().hex}"
    for key, n in ROWS.items():
        write_output(s3, prefix, key, n)
    s3.delete_object(Bucket=prefix, Key="out/d.csv.out")
    with pytest.raises(AirflowException, match="1 of 4"):
        op(prefix, fan_out="processing", task_id="score_p").execute(context(run, "score_p"))
    listed = sm.list_processing_jobs(NameContains="smdist-batch-score-p")["ProcessingJobSummaries"]
    name = listed[0]["ProcessingJobName"]
    d = sm.describe_processing_job(ProcessingJobName=name)
    inputs = {i["InputName"]: i["S3Input"] for i in d["ProcessingInputs"]}
    assert inputs["data"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert inputs["data"]["S3DataType"] == "ManifestFile"  # only d.csv was missing
    assert inputs["model"]["S3Uri"] == f"s3://{prefix}/model/model.tar.gz"
    assert d["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 2
    assert d["AppSpecification"]["ImageUri"] == IMAGE
    bucket, key = inputs["code"]["S3Uri"][len("s3://"):].split("/", 1)
    assert key.endswith(RUNNER_NAME)
    with open(inference.__file__, "rb") as f:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == f.read()


def test_planner_writes_shard_manifests_a_mapped_shard_job_reads(backend, prefix, s3, sm):
    run = f"run-{uuid.uuid4().hex}"
    plan = SageMakerBatchShardPlanOperator(task_id="plan", backend="sagemaker", input_uri=f"s3://{prefix}/in/",
                                           output_uri=f"s3://{prefix}/out/", shards=2, accept="text/csv")
    shards = plan.execute(context(run, "plan"))
    assert len(shards) == 2 and sum(s["objects"] for s in shards) == 4
    listed = []
    for s in shards:
        bucket, key = s["manifest_uri"][len("s3://"):].split("/", 1)
        entries = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        assert entries[0] == {"prefix": f"s3://{prefix}/in/"}
        listed += entries[1:]
    assert sorted(listed) == sorted(ROWS)
    for key in json.loads(s3.get_object(Bucket=prefix, Key=shards[0]["manifest_uri"].split("/", 3)[3])["Body"]
                          .read())[1:]:
        write_output(s3, prefix, key, ROWS[key])
    result = op(prefix, fan_out="jobs", task_id="shard", shard=shards[0]).execute(context(run, "shard", 0))
    assert result["complete"] and result["processed"] == 0  # its outputs were there: no job
    with pytest.raises(AirflowException, match="incomplete"):
        op(prefix, fan_out="jobs", task_id="shard", shard=shards[1]).execute(context(run, "shard", 1))
    name = sm.list_transform_jobs(NameContains="smdist-batch-shard")["TransformJobSummaries"][0]["TransformJobName"]
    src = sm.describe_transform_job(TransformJobName=name)["TransformInput"]["DataSource"]["S3DataSource"]
    assert src == {"S3DataType": "ManifestFile", "S3Uri": shards[1]["manifest_uri"]}


def test_kill_stops_the_running_job(backend, prefix, sm):
    task = op(prefix, wait_for_completion=False)
    result = task.execute(context(f"run-{uuid.uuid4().hex}"))
    name = result["jobs"][0]["job_name"]
    set_job_status("transform", name, "InProgress")
    task._running_job = name
    task.on_kill()
    assert sm.describe_transform_job(TransformJobName=name)["TransformJobStatus"] == "Stopped"


def test_sensor_waits_then_checks_completeness(backend, prefix, s3):
    task = op(prefix, wait_for_completion=False)
    name = task.execute(context(f"run-{uuid.uuid4().hex}"))["jobs"][0]["job_name"]
    set_job_status("transform", name, "InProgress")
    sensor = SageMakerShardedBatchInferenceSensor(task_id="wait", job_names=[name], backend="sagemaker",
                                                  input_uri=f"s3://{prefix}/in/", output_uri=f"s3://{prefix}/out/",
                                                  record_settings={"split_type": "Line", "assemble_with": "Line",
                                                                   "batch_strategy": "MultiRecord",
                                                                   "accept": "text/csv"})
    assert sensor.poke({}) is False
    set_job_status("transform", name, "Completed")
    with pytest.raises(AirflowException, match="4 of 4 object"):
        sensor.poke({})
    for key, n in ROWS.items():
        write_output(s3, prefix, key, n)
    done = sensor.poke({})
    assert done.is_done and done.xcom_value["complete"] and done.xcom_value["records"] == sum(ROWS.values())
    set_job_status("transform", name, "Failed", failure_reason="AlgorithmError: boom")
    with pytest.raises(AirflowException, match="ended Failed: AlgorithmError: boom"):
        sensor.poke({})


def test_the_model_carries_the_operators_tags(backend, prefix, sm):
    """As the SDK tags the model it creates for a transform job (Model.create(tags=...)), the sharded
    inference operator sends its tags on CreateModel too, not only on the transform jobs."""
    with pytest.raises(AirflowException):  # moto writes no outputs: incomplete, after the model and jobs exist
        op(prefix, tags={"team": "ml"}).execute(context(f"run-{uuid.uuid4().hex}"))
    models = sm.list_models(NameContains="smdist")["Models"]
    tagged = [m for m in models if {"Key": "team", "Value": "ml"} in sm.list_tags(ResourceArn=m["ModelArn"])["Tags"]]
    assert tagged, models


@pytest.mark.parametrize("fan_out", ["transform", "processing", "jobs"])
def test_a_bad_job_request_is_refused_before_the_model_is_created(backend, prefix, s3, sm, fan_out):
    """The transform or processing request is built and validated before CreateModel and before the model's
    code or the shard plans are uploaded: a bad one leaves no orphan model and names the field."""
    task_id = f"bad_{fan_out}_{uuid.uuid4().hex[:6]}"
    ctx = context(f"run-{uuid.uuid4().hex}", task_id)
    task = op(prefix, fan_out=fan_out, task_id=task_id, environment={"bad key": "x"})
    with pytest.raises(SpecError, match=r"Environment\['bad key'\]"):
        task.execute(ctx)
    model = task.model_name_for(ctx)
    assert describe_model(backend, model) is None
    assert model not in [m["ModelName"] for m in sm.list_models()["Models"]]
    assert "Contents" not in s3.list_objects_v2(Bucket=prefix, Prefix="out/")  # no code, runner or plans


def wait_for_shard_jobs(prefix, s3, sm, moto_server, **kw):
    """Run a fan_out="jobs" operator over three shard jobs that stay InProgress, each with a log line, until
    the test completes them one by one; returns (operator, the jobs, the task's outcome)."""
    operator = op(prefix, fan_out="jobs", shards=3, poll_interval=0.1, print_logs=True, **kw)
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = operator.execute(context(f"run-{uuid.uuid4().hex}"))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome["error"] = exc

    def names() -> set[str]:  # from moto's backend: no call to the server that would count among the task's
        return {name for name in sagemaker_backend().transform_jobs if name.startswith("smdist-batch-score")}

    def rounds_pass(n: int) -> None:  # the task's wait makes n more status calls
        def made() -> int:
            return sum(operator.lifecycle.calls.get(what, 0) for what in ("list", "describe"))

        target = made() + n
        while made() < target and task.is_alive():
            time.sleep(0.02)

    earlier = names()
    with new_jobs_in_progress("transform"):
        task = threading.Thread(target=run)
        task.start()
        deadline = time.monotonic() + 60
        jobs: list[str] = []
        while len(jobs) < 3 and time.monotonic() < deadline and task.is_alive():
            jobs = sorted(names() - earlier)
            time.sleep(0.05)
        assert len(jobs) == 3, outcome
        for job in jobs:
            seed_log_stream(moto_server, "/aws/sagemaker/TransformJobs", f"{job}/i-0abc-1700000000",
                            [(int(time.time() * 1000), f"scored the shard of {job}")])
        for key, n in ROWS.items():  # what the jobs write before they complete
            write_output(s3, prefix, key, n)
        rounds_pass(6)  # every job in progress for six rounds
        for job in jobs:
            set_job_status("transform", job, "Completed")
            rounds_pass(2)
        task.join(60)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"]["complete"]
    return operator, jobs


def test_shard_jobs_in_one_task_are_waited_for_with_one_list_and_one_log_call_a_round(backend, prefix, s3, sm,
                                                                                        moto_server, capfd):
    """fan_out="jobs" waits for its shard jobs in the task: per round one ListTransformJobs for all of them and
    one FilterLogEvents for all their streams, and one Describe per job, when it has ended (polling each job
    would describe every job and read its streams every round)."""
    moto_throttle.install()
    moto_throttle.reset()
    moto_throttle.throttle("ListTransformJobs", 2)  # a throttled round backs off; it does not give up listing
    operator, jobs = wait_for_shard_jobs(prefix, s3, sm, moto_server)
    served = moto_throttle.calls
    # choose() looks for each shard's job once before creating it, and each job is described when it ended
    assert served["DescribeTransformJob"] == 2 * len(jobs), served
    calls = operator.lifecycle.calls
    assert served["ListTransformJobs"] >= 9 and calls["list"] >= 9, (served, calls)  # one List a round
    assert calls.get("logs", 0) <= calls["list"] + len(jobs), calls  # one log read a round (+ the last lines)
    printed = capfd.readouterr().out
    for job in jobs:
        assert f"{job} " in printed and f"scored the shard of {job}" in printed
        assert printed.count(f"scored the shard of {job}") == 1  # each line once, though every round re-reads


def test_a_role_that_may_not_list_jobs_waits_for_its_shard_jobs_one_by_one(backend, prefix, s3, sm, moto_server,
                                                                          capfd):
    """Without sagemaker:ListTransformJobs (AccessDenied) the task says so once and describes each job every
    round, as it would have without coalescing; the jobs' outcome is the same."""
    moto_throttle.install()
    moto_throttle.reset()
    moto_throttle.fail("ListTransformJobs", 1, "AccessDeniedException",
                       "User is not authorized to perform: sagemaker:ListTransformJobs")
    operator, jobs = wait_for_shard_jobs(prefix, s3, sm, moto_server)
    served = moto_throttle.calls
    assert served["ListTransformJobs"] == 1, served  # refused once: not asked again
    assert served["DescribeTransformJob"] > 3 * len(jobs), served  # every job, every round
    printed = capfd.readouterr().out
    assert printed.count("describing each job every round instead") == 1
    assert "sagemaker:ListTransformJobs" in printed
