"""Hardening of the sagemaker backend against the moto server on loopback (issue 12): no job without a role,
nothing uploaded first."""

from __future__ import annotations

import os
import uuid
from types import SimpleNamespace

import boto3
import pytest

from airflow_smdist.specs.errors import SpecError

REGION = "us-east-1"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAULTS = os.path.join(REPO, "tests", "fixtures", "faults")


def ctx(task_id):
    return {"ti": SimpleNamespace(dag_id="d", task_id=task_id, map_index=-1), "run_id": uuid.uuid4().hex}


def keys(moto_server, bucket):
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name=REGION)
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


@pytest.mark.parametrize("role", [None, "arn:aws:iam::000000000000:role/SageMakerExecutionRole"])
def test_training_without_a_role_is_refused_before_any_upload(moto_server, s3_bucket, role):
    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    name = f"norole-{uuid.uuid4().hex[:8]}"
    op = SageMakerDistributedTrainingOperator(
        task_id="train", backend="sagemaker", job_name=name, entry_point="deep_fail.py", source_dir=FAULTS,
        image_uri=IMAGE, output_path=f"s3://{s3_bucket}/out", **({"role": role} if role else {}))
    with pytest.raises(SpecError) as info:
        op.execute(ctx("train"))
    assert info.value.field == "role" and "IAM role" in str(info.value)
    assert keys(moto_server, s3_bucket) == []  # sourcedir.tar.gz was not uploaded
    client = boto3.client("sagemaker", endpoint_url=moto_server, region_name=REGION)
    assert not client.list_training_jobs(NameContains=name)["TrainingJobSummaries"]


def test_sharded_inference_without_a_role_creates_no_model(moto_server, s3_bucket):
    from airflow_smdist.operators.transform import SageMakerShardedBatchInferenceOperator

    s3 = boto3.client("s3", endpoint_url=moto_server, region_name=REGION)
    s3.put_object(Bucket=s3_bucket, Key="in/a.csv", Body=b"1,2\n")
    model = f"norole-model-{uuid.uuid4().hex[:8]}"
    op = SageMakerShardedBatchInferenceOperator(
        task_id="score", backend="sagemaker", input_uri=f"s3://{s3_bucket}/in/", output_uri=f"s3://{s3_bucket}/out/",
        model_data=f"s3://{s3_bucket}/model.tar.gz", model_name=model, image_uri=IMAGE, entry_point="deep_fail.py",
        source_dir=FAULTS)
    with pytest.raises(SpecError, match="role"):
        op.execute(ctx("score"))
    client = boto3.client("sagemaker", endpoint_url=moto_server, region_name=REGION)
    # (moto's ListModels ignores NameContains: match by name here)
    assert model not in [m["ModelName"] for m in client.list_models(NameContains=model)["Models"]]
    assert keys(moto_server, s3_bucket) == ["in/a.csv"]


def test_a_sagemaker_job_is_tagged_with_its_task_instance_and_refused_to_others(moto_server, s3_bucket):
    from airflow_smdist.lifecycle import ForeignJob
    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    name = f"owned-{uuid.uuid4().hex[:8]}"

    def op():
        return SageMakerDistributedTrainingOperator(
            task_id="train", backend="sagemaker", job_name=name, image_uri=IMAGE, output_path=f"s3://{s3_bucket}/out",
            role="arn:aws:iam::123456789012:role/R", poll_interval=0.05, print_logs=False)

    ctx_a = {"ti": SimpleNamespace(dag_id="dag_a", task_id="train", map_index=-1), "run_id": "run-1"}
    assert op().execute(ctx_a)["status"] == "Completed"
    client = boto3.client("sagemaker", endpoint_url=moto_server, region_name=REGION)
    arn = client.describe_training_job(TrainingJobName=name)["TrainingJobArn"]
    tags = {t["Key"]: t["Value"] for t in client.list_tags(ResourceArn=arn)["Tags"]}
    assert tags["smdist:task-instance"] == "dag_a/train/run-1/-1" and tags["smdist:try"] == "1"
    assert op().execute(ctx_a)["job_name"] == name  # its own task instance gets it back
    with pytest.raises(ForeignJob, match="belongs to task instance dag_a/train/run-1/-1"):
        op().execute({"ti": SimpleNamespace(dag_id="dag_b", task_id="train", map_index=-1), "run_id": "run-1"})
    assert len(client.list_training_jobs(NameContains=name)["TrainingJobSummaries"]) == 1


def test_a_sagemaker_job_made_elsewhere_is_not_adopted(moto_server, s3_bucket):
    from airflow_smdist.lifecycle import ForeignJob
    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
    from airflow_smdist.specs.training import training_request

    name = f"console-{uuid.uuid4().hex[:8]}"
    client = boto3.client("sagemaker", endpoint_url=moto_server, region_name=REGION)
    client.create_training_job(**training_request(job_name=name, role="arn:aws:iam::123456789012:role/R",
                                                  image_uri=IMAGE, output_path=f"s3://{s3_bucket}/out"))
    op = SageMakerDistributedTrainingOperator(task_id="train", backend="sagemaker", job_name=name, image_uri=IMAGE,
                                              output_path=f"s3://{s3_bucket}/out",
                                              role="arn:aws:iam::123456789012:role/R")
    with pytest.raises(ForeignJob, match="no task of this provider"):
        op.execute(ctx("train"))


# -- throttling in every waiting path (moto_throttle answers ThrottlingException as SageMaker does) ------------
def _running_job(s3_bucket, name):
    from moto_server import set_training_job_status

    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    def op():
        return SageMakerDistributedTrainingOperator(
            task_id="train", backend="sagemaker", job_name=name, image_uri=IMAGE, output_path=f"s3://{s3_bucket}/out",
            role="arn:aws:iam::123456789012:role/R", poll_interval=0.05, print_logs=False)

    first = op()
    first.wait_for_completion = False
    first.execute(ctx_of(name))
    set_training_job_status(name, "InProgress")
    return op


def ctx_of(name):
    return {"ti": SimpleNamespace(dag_id="d", task_id="train", map_index=-1), "run_id": name}


@pytest.fixture
def fast_backoff(monkeypatch):
    import moto_throttle

    from airflow_smdist import lifecycle
    from airflow_smdist.backends import sagemaker

    monkeypatch.setattr(lifecycle, "MAX_BACKOFF_SECONDS", 0.02)
    # one botocore attempt per call (its adaptive retries would only make the storm slower): what is left is
    # the lifecycle's own backoff, the one that must carry every waiting path through the storm
    monkeypatch.setattr(sagemaker, "DEFAULT_RETRIES", {"mode": "standard", "max_attempts": 1})
    moto_throttle.reset()
    yield moto_throttle
    moto_throttle.reset()


def test_a_throttling_storm_slows_the_worker_wait_but_does_not_fail_it(moto_server, s3_bucket, fast_backoff):
    import threading

    from moto_server import set_training_job_status

    name = f"storm-wait-{uuid.uuid4().hex[:8]}"
    op = _running_job(s3_bucket, name)
    fast_backoff.throttle("DescribeTrainingJob", 12)  # more than botocore's own retries
    threading.Timer(1.0, lambda: set_training_job_status(name, "Completed")).start()
    assert op().execute(ctx_of(name))["status"] == "Completed"
    assert fast_backoff.calls["DescribeTrainingJob"] >= 13


def test_a_throttled_sensor_poke_is_not_a_failure(moto_server, s3_bucket, fast_backoff):
    from moto_server import set_training_job_status

    from airflow_smdist.sensors.training import SageMakerDistributedTrainingSensor

    name = f"storm-poke-{uuid.uuid4().hex[:8]}"
    _running_job(s3_bucket, name)
    sensor = SageMakerDistributedTrainingSensor(task_id="watch", job_name=name, backend="sagemaker", poke_interval=0.2)
    fast_backoff.throttle("DescribeTrainingJob", 1000)  # throttled for the whole poke interval
    assert sensor.poke({}) is False
    fast_backoff.reset()
    set_training_job_status(name, "Completed")
    assert sensor.poke({}).is_done


def test_on_kill_under_throttling_still_stops_the_job(moto_server, s3_bucket, fast_backoff):
    name = f"storm-kill-{uuid.uuid4().hex[:8]}"
    op = _running_job(s3_bucket, name)()
    op.own(ctx_of(name))
    op.lifecycle.track(name)
    fast_backoff.throttle("StopTrainingJob", 12)
    fast_backoff.throttle("DescribeTrainingJob", 12)
    op.on_kill()
    client = boto3.client("sagemaker", endpoint_url=moto_server, region_name=REGION)
    assert client.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "Stopped"
    assert fast_backoff.calls["StopTrainingJob"] >= 13


def test_the_tuning_result_reads_its_best_trial_through_a_throttling_storm(moto_server, s3_bucket, fast_backoff):
    """The tuning operator's and sensor's result describes the best trial: that call backs off too."""
    from airflow_smdist.operators.tuning import tuning_result

    name = f"storm-best-{uuid.uuid4().hex[:8]}"
    backend = _running_job(s3_bucket, name)().get_backend()
    fast_backoff.throttle("DescribeTrainingJob", 12)
    description = {"HyperParameterTuningJobName": "hpo", "HyperParameterTuningJobStatus": "Completed",
                   "HyperParameterTuningJobConfig": {"Strategy": "Bayesian"},
                   "BestTrainingJob": {"TrainingJobName": name, "TunedHyperParameters": {"lr": "0.1"}}}
    out = tuning_result(description, backend)
    assert (out["best_training_job"], out["training_image"], out["best_hyperparameters"]) == (name, IMAGE, {"lr": 0.1})
    assert fast_backoff.calls["DescribeTrainingJob"] >= 13
