"""SageMakerBackend against a moto server over HTTP (no mocked methods), through the Airflow connection."""

from __future__ import annotations

import copy
import json
import time
import uuid

import boto3
import pytest

from airflow_smdist.backends.base import BackendError, JobNotFound, LogEvent
from airflow_smdist.backends.sagemaker import SageMakerBackend, host_of_stream
from airflow_smdist.specs.errors import SpecError
from moto_server import (
    REGION,
    sagemaker_backend,
    seed_log_stream,
    set_job_status,
    set_training_job_status,
)

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-cpu-py311"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def training_request(name: str, bucket: str = "smdist-data") -> dict:
    return {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingImage": IMAGE,
            "TrainingInputMode": "File",
            "MetricDefinitions": [{"Name": "train:loss", "Regex": "loss=([0-9.]+)"}],
        },
        "RoleArn": ROLE,
        "InputDataConfig": [{
            "ChannelName": "train",
            "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": f"s3://{bucket}/train/",
                "S3DataDistributionType": "ShardedByS3Key",
            }},
        }],
        "OutputDataConfig": {"S3OutputPath": f"s3://{bucket}/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "HyperParameters": {"epochs": "3", "lr": "0.01"},
    }


def processing_request(name: str, bucket: str = "smdist-data") -> dict:
    return {
        "ProcessingJobName": name,
        "ProcessingResources": {"ClusterConfig": {
            "InstanceCount": 2, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 30}},
        "AppSpecification": {"ImageUri": IMAGE, "ContainerEntrypoint": ["python3", "/opt/ml/processing/code/prep.py"]},
        "RoleArn": ROLE,
        "ProcessingInputs": [{"InputName": "raw", "S3Input": {
            "S3Uri": f"s3://{bucket}/raw/", "LocalPath": "/opt/ml/processing/input",
            "S3DataType": "S3Prefix", "S3InputMode": "File", "S3DataDistributionType": "ShardedByS3Key"}}],
        "ProcessingOutputConfig": {"Outputs": [{"OutputName": "clean", "S3Output": {
            "S3Uri": f"s3://{bucket}/clean/", "LocalPath": "/opt/ml/processing/output", "S3UploadMode": "EndOfJob"}}]},
        "StoppingCondition": {"MaxRuntimeInSeconds": 1800},
        "Environment": {"STAGE": "prep"},
    }


def transform_request(name: str, bucket: str = "smdist-data") -> dict:
    return {
        "TransformJobName": name,
        "ModelName": "my-model",
        "BatchStrategy": "MultiRecord",
        "MaxPayloadInMB": 6,
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/batch/"}},
            "ContentType": "text/csv",
            "SplitType": "Line",
        },
        "TransformOutput": {"S3OutputPath": f"s3://{bucket}/predictions/", "AssembleWith": "Line"},
        "TransformResources": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2},
    }


def tuning_request(name: str, bucket: str = "smdist-data") -> dict:
    definition = training_request("unused", bucket)
    for key in ("TrainingJobName", "HyperParameters", "AlgorithmSpecification"):
        definition.pop(key)
    definition["AlgorithmSpecification"] = {"TrainingImage": IMAGE, "TrainingInputMode": "File",
                                            "MetricDefinitions": [{"Name": "val:acc", "Regex": "acc=([0-9.]+)"}]}
    definition["StaticHyperParameters"] = {"epochs": "3"}
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": "Bayesian",
            "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "val:acc"},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 2},
            "ParameterRanges": {"ContinuousParameterRanges": [
                {"Name": "lr", "MinValue": "0.0001", "MaxValue": "0.1", "ScalingType": "Logarithmic"}]},
        },
        "TrainingJobDefinition": definition,
    }


@pytest.fixture
def backend(moto_server):
    return SageMakerBackend()  # aws_default: the connection the moto_server fixture defines


@pytest.fixture
def raw_sagemaker(moto_server):
    return boto3.client("sagemaker", endpoint_url=moto_server, region_name=REGION)


# ---- wiring ------------------------------------------------------------------------------------------------
def test_clients_come_from_the_airflow_connection(backend, moto_server):
    assert backend.client.meta.endpoint_url == moto_server
    assert backend.logs_client.meta.endpoint_url == moto_server
    assert backend.client.meta.region_name == REGION
    # botocore keeps retries' max_attempts (10 retries) as total_max_attempts (11 attempts in all)
    assert backend.client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 11}
    assert backend.logs_client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 11}


def test_connection_config_kwargs_win_over_the_default_retries(moto_server, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SMDIST_STANDARD", json.dumps({"conn_type": "aws", "extra": {
        "endpoint_url": moto_server, "region_name": REGION,
        "config_kwargs": {"retries": {"mode": "standard", "max_attempts": 3}}}}))
    client = SageMakerBackend(aws_conn_id="smdist_standard").client
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 4}
    assert client.meta.endpoint_url == moto_server


# ---- submit / describe ---------------------------------------------------------------------------------------
def test_training_submit_and_describe(backend, s3_bucket):
    name = unique("train")
    request = training_request(name, s3_bucket)
    assert backend.submit("training", copy.deepcopy(request)) == name

    described = backend.describe("training", name)
    assert "ResponseMetadata" not in described
    assert described["TrainingJobName"] == name
    assert described["TrainingJobArn"] == f"arn:aws:sagemaker:{REGION}:123456789012:training-job/{name}"
    assert described["TrainingJobStatus"] == "Completed"  # moto finishes every job at once
    assert described["ResourceConfig"] == request["ResourceConfig"]
    assert described["HyperParameters"] == {"epochs": "3", "lr": "0.01"}
    channel = described["InputDataConfig"][0]
    assert channel["DataSource"]["S3DataSource"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert described["AlgorithmSpecification"]["MetricDefinitions"] == request["AlgorithmSpecification"][
        "MetricDefinitions"]  # moto would have replaced them; the server extension keeps the request's
    assert described["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://{s3_bucket}/output/{name}/output/model.tar.gz"


def test_file_uri_is_rejected_before_any_call(backend, raw_sagemaker):
    name = unique("local-uri")
    request = training_request(name)
    request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] = "file:///data/train"
    request["OutputDataConfig"]["S3OutputPath"] = "file:///tmp/out"

    with pytest.raises(SpecError) as info:
        backend.submit("training", request)
    fields = [e.field for e in info.value.errors]
    assert fields == [
        "CreateTrainingJob.InputDataConfig[0].DataSource.S3DataSource.S3Uri",
        "CreateTrainingJob.OutputDataConfig.S3OutputPath",
    ]
    assert all("only work on the local backend" in e.problem for e in info.value.errors)
    assert "backend='local'" in str(info.value)

    # nothing reached the server
    assert name not in sagemaker_backend().training_jobs
    listed = raw_sagemaker.list_training_jobs(NameContains=name)["TrainingJobSummaries"]
    assert listed == []
    with pytest.raises(JobNotFound):
        backend.describe("training", name)


def test_file_uri_and_other_mistakes_are_reported_together(backend):
    request = training_request(unique("mixed"))
    request["OutputDataConfig"]["S3OutputPath"] = "file:///tmp/out"
    request["ResourceConfig"]["InstanceType"] = "ml.m5.xlage"
    with pytest.raises(SpecError) as info:
        backend.submit("training", request)
    by_field = {e.field: e for e in info.value.errors}
    assert set(by_field) == {"CreateTrainingJob.OutputDataConfig.S3OutputPath",
                             "CreateTrainingJob.ResourceConfig.InstanceType"}
    assert "local backend" in by_field["CreateTrainingJob.OutputDataConfig.S3OutputPath"].problem
    assert "ml.m5.xlarge" in by_field["CreateTrainingJob.ResourceConfig.InstanceType"].fix


def test_unknown_field_is_rejected_with_its_name(backend):
    name = unique("typo")
    request = training_request(name)
    request["ResourceConfig"]["InstanceCont"] = request["ResourceConfig"].pop("InstanceCount")
    with pytest.raises(SpecError) as info:
        backend.submit("training", request)
    fields = [e.field for e in info.value.errors]
    assert len(fields) == 1  # (InstanceCount itself is optional: InstanceGroups may replace it)
    assert fields[0] == "CreateTrainingJob.ResourceConfig.InstanceCont"
    assert "did you mean 'InstanceCount'?" in str(info.value)
    assert name not in sagemaker_backend().training_jobs


def test_nested_field_path_has_single_dots(backend):
    request = training_request(unique("typo"))
    request["ResourceConfig"]["InstanceCont"] = 2
    with pytest.raises(SpecError) as info:
        backend.submit("training", request)
    assert [e.field for e in info.value.errors] == ["CreateTrainingJob.ResourceConfig.InstanceCont"]


def test_bad_enum_is_rejected_with_its_name(backend):
    name = unique("enum")
    request = training_request(name)
    request["AlgorithmSpecification"]["TrainingInputMode"] = "Fast"
    with pytest.raises(SpecError) as info:
        backend.submit("training", request)
    assert [e.field for e in info.value.errors] == ["CreateTrainingJob.AlgorithmSpecification.TrainingInputMode"]
    assert "'Fast' is not one of" in str(info.value)
    assert name not in sagemaker_backend().training_jobs


@pytest.mark.parametrize("kind, build", [
    ("training", training_request), ("processing", processing_request),
    ("transform", transform_request), ("tuning", tuning_request),
])
def test_duplicate_name_keeps_the_service_error_code(backend, kind, build):
    name = unique(f"dup-{kind}")
    backend.submit(kind, build(name))
    with pytest.raises(BackendError) as info:
        backend.submit(kind, build(name))
    err = info.value
    assert err.code == "ResourceInUse"
    assert err.operation == {"training": "CreateTrainingJob", "processing": "CreateProcessingJob",
                             "transform": "CreateTransformJob", "tuning": "CreateHyperParameterTuningJob"}[kind]
    assert "already exists" in str(err)
    assert str(err).startswith(f"{err.operation} failed (ResourceInUse): ")


def test_server_validation_error_keeps_code_and_message(backend):
    # botocore does not check enums client-side; moto's own ListTrainingJobs handler rejects this one.
    with pytest.raises(BackendError) as info:
        backend.list_jobs("training", status="Running")
    assert info.value.code == "ValidationException"
    assert info.value.operation == "ListTrainingJobs"
    assert "Member must satisfy enum value set" in str(info.value)


@pytest.mark.parametrize("kind", ["training", "processing", "transform", "tuning"])
def test_describe_missing_job_raises_job_not_found(backend, kind):
    name = unique("missing")
    with pytest.raises(JobNotFound) as info:
        backend.describe(kind, name)
    assert (info.value.kind, info.value.name) == (kind, name)


@pytest.mark.parametrize("kind", ["training", "transform", "tuning"])
def test_stop_missing_job_raises_job_not_found(backend, kind):
    with pytest.raises(JobNotFound):
        backend.stop(kind, unique("missing"))


def test_processing_round_trip(backend, s3_bucket):
    name = unique("prep")
    request = processing_request(name, s3_bucket)
    assert backend.submit("processing", copy.deepcopy(request)) == name
    described = backend.describe("processing", name)
    assert "ResponseMetadata" not in described
    assert described["ProcessingJobName"] == name
    assert described["ProcessingJobStatus"] == "Completed"
    assert described["ProcessingJobArn"].endswith(f":processing-job/{name}")
    assert described["ProcessingResources"] == request["ProcessingResources"]
    assert described["ProcessingInputs"] == request["ProcessingInputs"]
    assert described["AppSpecification"] == request["AppSpecification"]
    assert described["Environment"] == {"STAGE": "prep"}


def test_transform_round_trip(backend, s3_bucket):
    name = unique("batch")
    request = transform_request(name, s3_bucket)
    assert backend.submit("transform", copy.deepcopy(request)) == name
    described = backend.describe("transform", name)
    assert "ResponseMetadata" not in described
    assert described["TransformJobName"] == name
    assert described["TransformJobStatus"] == "Completed"
    assert described["TransformInput"] == request["TransformInput"]
    assert described["TransformOutput"] == request["TransformOutput"]
    assert described["TransformResources"] == request["TransformResources"]
    assert described["MaxPayloadInMB"] == 6


def test_tuning_round_trip(backend):
    name = unique("hpo")
    request = tuning_request(name)
    assert backend.submit("tuning", copy.deepcopy(request)) == name
    described = backend.describe("tuning", name)
    assert described["HyperParameterTuningJobName"] == name
    assert described["HyperParameterTuningJobStatus"] == "Completed"
    assert described["HyperParameterTuningJobConfig"]["Strategy"] == "Bayesian"


# ---- stop ------------------------------------------------------------------------------------------------------
def test_stop_in_progress_training_job_goes_stopping_then_stopped(backend):
    name = unique("stop")
    backend.submit("training", training_request(name))
    set_training_job_status(name, "InProgress", "Training")
    described = backend.describe("training", name)
    assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == ("InProgress", "Training")
    assert "TrainingEndTime" not in described

    backend.stop("training", name)
    first = backend.describe("training", name)
    assert (first["TrainingJobStatus"], first["SecondaryStatus"]) == ("Stopping", "Stopping")
    second = backend.describe("training", name)
    assert (second["TrainingJobStatus"], second["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert "TrainingEndTime" in second
    assert [t["Status"] for t in second["SecondaryStatusTransitions"]][-3:] == ["Training", "Stopping", "Stopped"]

    backend.stop("training", name)  # stopping a stopped job: no error, nothing changes
    assert backend.describe("training", name)["TrainingJobStatus"] == "Stopped"


def test_stop_of_a_finished_job_is_not_an_error(backend, raw_sagemaker):
    name = unique("done")
    backend.submit("training", training_request(name))
    set_training_job_status(name, "Failed", failure_reason="AlgorithmError: boom")
    backend.stop("training", name)
    described = backend.describe("training", name)
    assert described["TrainingJobStatus"] == "Failed"
    assert described["FailureReason"] == "AlgorithmError: boom"
    # what the extended server answers a direct Stop of a finished job, as the real service does
    with pytest.raises(raw_sagemaker.exceptions.ClientError) as info:
        raw_sagemaker.stop_training_job(TrainingJobName=name)
    assert info.value.response["Error"]["Code"] == "ValidationException"
    assert "training job is in status Failed" in info.value.response["Error"]["Message"]


@pytest.mark.parametrize("kind, build", [
    ("processing", processing_request), ("transform", transform_request), ("tuning", tuning_request),
])
def test_stop_in_progress_other_kinds(backend, kind, build):
    name = unique(f"stop-{kind}")
    backend.submit(kind, build(name))
    set_job_status(kind, name, "InProgress")
    status_key = {"processing": "ProcessingJobStatus", "transform": "TransformJobStatus",
                  "tuning": "HyperParameterTuningJobStatus"}[kind]
    assert backend.describe(kind, name)[status_key] == "InProgress"
    backend.stop(kind, name)
    assert backend.describe(kind, name)[status_key] == "Stopping"
    assert backend.describe(kind, name)[status_key] == "Stopped"


# ---- logs ------------------------------------------------------------------------------------------------------
def test_host_of_stream():
    assert host_of_stream("job", "job/algo-1-1700000000") == "algo-1"
    assert host_of_stream("job", "job/algo-12-1700000000") == "algo-12"
    assert host_of_stream("job", "job/i-0abc123-1700000000/data-log") == "i-0abc123/data-log"


def test_log_events_merge_hosts_by_time_and_cursor_returns_only_new(backend, moto_server):
    name = unique("logs")
    group = "/aws/sagemaker/TrainingJobs"
    t0 = int(time.time() * 1000) - 60_000
    seed_log_stream(moto_server, group, f"{name}/algo-1-1700000000",
                    [(t0 + 0, "a1 start"), (t0 + 20, "a1 epoch 1"), (t0 + 40, "a1 epoch 2")])
    seed_log_stream(moto_server, group, f"{name}/algo-2-1700000000",
                    [(t0 + 10, "a2 start"), (t0 + 30, "a2 epoch 1")])
    # another job whose name starts the same: not ours
    seed_log_stream(moto_server, group, f"{name}-2/algo-1-1700000000", [(t0 + 5, "other job")])

    events, cursor = backend.log_events("training", name)
    assert events == [
        LogEvent(timestamp=(t0 + 0) / 1000, host="algo-1", message="a1 start"),
        LogEvent(timestamp=(t0 + 10) / 1000, host="algo-2", message="a2 start"),
        LogEvent(timestamp=(t0 + 20) / 1000, host="algo-1", message="a1 epoch 1"),
        LogEvent(timestamp=(t0 + 30) / 1000, host="algo-2", message="a2 epoch 1"),
        LogEvent(timestamp=(t0 + 40) / 1000, host="algo-1", message="a1 epoch 2"),
    ]
    cursor = json.loads(json.dumps(cursor))  # a trigger carries it as JSON

    again, same = backend.log_events("training", name, cursor)
    assert again == []
    assert same == cursor

    seed_log_stream(moto_server, group, f"{name}/algo-2-1700000000", [(t0 + 50, "a2 epoch 2")])
    seed_log_stream(moto_server, group, f"{name}/algo-1-1700000000", [(t0 + 60, "a1 done")])
    seed_log_stream(moto_server, group, f"{name}/algo-3-1700000001", [(t0 + 55, "a3 late start")])
    new, cursor2 = backend.log_events("training", name, cursor)
    assert [(e.host, e.message) for e in new] == [
        ("algo-2", "a2 epoch 2"), ("algo-3", "a3 late start"), ("algo-1", "a1 done")]
    assert set(cursor2) == {f"{name}/algo-1-1700000000", f"{name}/algo-2-1700000000",
                            f"{name}/algo-3-1700000001"}
    assert cursor == json.loads(json.dumps(cursor))  # the caller's cursor is not modified
    assert backend.log_events("training", name, cursor2)[0] == []


def test_log_events_without_streams_or_group(backend, moto_server):
    seed_log_stream(moto_server, "/aws/sagemaker/TrainingJobs", f"{unique('someone')}/algo-1-1", [])
    assert backend.log_events("training", unique("quiet")) == ([], {})
    # no job ever wrote to the transform log group on this server
    assert backend.log_events("transform", unique("nogroup"), {"x": "f/1"}) == ([], {"x": "f/1"})


# ---- list ------------------------------------------------------------------------------------------------------
def test_list_jobs_filters_by_name_and_status(backend):
    prefix = unique("listed")
    names = [f"{prefix}-{i}" for i in range(3)]
    for n in names:
        backend.submit("training", training_request(n))
    backend.submit("training", training_request(unique("unrelated")))
    set_training_job_status(names[1], "InProgress")

    listed = backend.list_jobs("training", name_contains=prefix)
    assert sorted(s["TrainingJobName"] for s in listed) == names
    running = backend.list_jobs("training", name_contains=prefix, status="InProgress")
    assert [(s["TrainingJobName"], s["TrainingJobStatus"]) for s in running] == [(names[1], "InProgress")]
    assert backend.list_jobs("training", name_contains=unique("nothing")) == []


def test_list_jobs_reads_every_page(backend):
    prefix = unique("paged")
    for i in range(105):  # the backend asks for 100 a page
        backend.submit("processing", processing_request(f"{prefix}-{i:03d}"))
    listed = backend.list_jobs("processing", name_contains=prefix)
    assert sorted(s["ProcessingJobName"] for s in listed) == [f"{prefix}-{i:03d}" for i in range(105)]


def test_list_jobs_of_transform_and_tuning(backend):
    t, h = unique("lt"), unique("lh")
    backend.submit("transform", transform_request(t))
    backend.submit("tuning", tuning_request(h))
    assert [s["TransformJobName"] for s in backend.list_jobs("transform", name_contains=t)] == [t]
    assert [s["HyperParameterTuningJobName"] for s in backend.list_jobs("tuning", name_contains=h)] == [h]
