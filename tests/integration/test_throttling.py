"""One throttling backoff for every waiting path: the operators' blocking wait, a sensor's poke and the stop on
kill all outlast a ThrottlingException storm longer than botocore's own retries (moto's server, throttling as
SageMaker does through moto_throttle). The triggers' path is test_faults' storm test."""

from __future__ import annotations

import json
import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moto_throttle
from moto_server import set_training_job_status

from airflow_smdist import lifecycle
from airflow_smdist.backends.sagemaker import SageMakerBackend
from airflow_smdist.lifecycle import JobLifecycle
from airflow_smdist.sensors.training import SageMakerDistributedTrainingSensor
from airflow_smdist.specs.training import training_request


def _started(backend) -> str:
    name = f"throttle-{uuid.uuid4().hex[:8]}"
    backend.submit("training", training_request(
        job_name=name, role="arn:aws:iam::123456789012:role/R", output_path="s3://b/out",
        image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1", instance_type="ml.m5.xlarge"))
    set_training_job_status(name, "InProgress")
    return name


def _throttled_backend(moto_server, monkeypatch) -> SageMakerBackend:
    """A connection whose botocore gives up after 2 attempts, so our backoff has to take over."""
    monkeypatch.setattr(lifecycle, "MAX_BACKOFF_SECONDS", 0.05)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_THROTTLED", json.dumps({"conn_type": "aws", "extra": {
        "endpoint_url": moto_server, "region_name": "us-east-1",
        "config_kwargs": {"retries": {"mode": "standard", "max_attempts": 2}}}}))
    moto_throttle.reset()
    return SageMakerBackend("aws_throttled", "us-east-1")


def test_the_blocking_wait_outlasts_a_describe_storm(moto_server, monkeypatch):
    backend = _throttled_backend(moto_server, monkeypatch)
    name = _started(backend)
    set_training_job_status(name, "Completed")
    moto_throttle.throttle("DescribeTrainingJob", 8)  # four times botocore's budget here
    lc = JobLifecycle(backend, "training", poll_interval=0.05, print_logs=False)
    assert lc.wait(name)["TrainingJobStatus"] == "Completed"
    assert moto_throttle.calls["DescribeTrainingJob"] == 9  # 8 throttled + the answer, none lost or doubled
    assert lc.calls["throttled"] >= 2  # botocore gave up at least twice; our backoff carried on


def test_a_poke_in_a_storm_waits_for_the_next_poke_and_then_succeeds(moto_server, monkeypatch):
    backend = _throttled_backend(moto_server, monkeypatch)
    name = _started(backend)
    set_training_job_status(name, "Completed")
    sensor = SageMakerDistributedTrainingSensor(task_id="wait", job_name=name, backend="sagemaker",
                                                aws_conn_id="aws_throttled", region_name="us-east-1",
                                                poke_interval=0.5)
    moto_throttle.throttle("DescribeTrainingJob", 10_000)
    assert sensor.poke({}) is False  # not done, not failed: the service asked us to slow down
    moto_throttle.reset()
    done = sensor.poke({})
    assert done.is_done and done.xcom_value["status"] == "Completed" and done.xcom_value["job_name"] == name


def test_stop_on_kill_gets_through_a_storm_on_stop_and_describe(moto_server, monkeypatch):
    backend = _throttled_backend(moto_server, monkeypatch)
    name = _started(backend)
    lc = JobLifecycle(backend, "training", poll_interval=0.05, print_logs=False)
    lc.track(name)
    moto_throttle.throttle("StopTrainingJob", 5)
    moto_throttle.throttle("DescribeTrainingJob", 5)
    lc.stop()
    assert backend.describe("training", name)["TrainingJobStatus"] == "Stopped"
    assert moto_throttle.calls["StopTrainingJob"] == 6 and lc.running == []
