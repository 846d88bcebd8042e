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
    assert not client.list_models(NameContains=model)["Models"]
    assert keys(moto_server, s3_bucket) == ["in/a.csv"]
