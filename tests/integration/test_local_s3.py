"""The local backend reads channels from and writes artifacts to s3:// (moto's server on loopback)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import uuid

import boto3
import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training
from airflow_smdist.storage import Storage
from jobs import wait

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTRACT = os.path.join(REPO, "tests", "fixtures", "contract")




@pytest.fixture
def s3(moto_server):
    return boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")


def run(moto_server, tmp_path, bucket, name, inputs, **kw):
    storage = Storage(endpoint_url=moto_server)
    plan = build_training(job_name=name, role="arn:aws:iam::123456789012:role/R", output_path=f"s3://{bucket}/out",
                          entry_point="dump_env.py", source_dir=CONTRACT, instance_count=2,
                          image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", inputs=inputs,
                          environment={"SMDIST_REPO": REPO}, **kw)
    upload_source(plan.source_dir, plan.entry_point, plan.source_uri, storage)
    backend = LocalBackend(tmp_path / "jobs", s3_endpoint_url=moto_server)
    backend.submit("training", plan.request)
    return backend, wait(backend, "training", name)


@pytest.mark.slow
def test_channels_from_s3_and_model_to_s3(moto_server, s3_bucket, s3, tmp_path):
    for i in range(5):
        s3.put_object(Bucket=s3_bucket, Key=f"data/train/part-{i}.csv", Body=f"{i}\n".encode())
    s3.put_object(Bucket=s3_bucket, Key="data/train/nested/deep.csv", Body=b"9\n")
    name = f"s3-{uuid.uuid4().hex[:8]}"
    _backend, d = run(moto_server, tmp_path, s3_bucket, name,
                      {"train": {"s3_uri": f"s3://{s3_bucket}/data/train", "distribution": "ShardedByS3Key"}},
                      checkpoint_s3_uri=f"s3://{s3_bucket}/ckpt/{name}")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    key = f"out/{name}/output/model.tar.gz"
    assert d["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://{s3_bucket}/{key}"
    body = s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        hosts = [json.load(tar.extractfile(f"contract-{r}.json")) for r in range(2)]
    files = sorted(f for h in hosts for f in h["channels"]["train"])
    # six objects, three per host, none twice; the nested key keeps its sub-folder
    assert files == ["nested", "part-0.csv", "part-1.csv", "part-2.csv", "part-3.csv", "part-4.csv"]
    assert s3.list_objects_v2(Bucket=s3_bucket, Prefix=f"out/{name}/source/")["KeyCount"] == 1


@pytest.mark.slow
def test_a_key_with_dotdot_fails_the_job_and_writes_nothing_outside(moto_server, s3_bucket, s3, tmp_path):
    s3.put_object(Bucket=s3_bucket, Key="evil/ok.csv", Body=b"1\n")
    s3.put_object(Bucket=s3_bucket, Key="evil/../../../escaped.csv", Body=b"pwned\n")
    name = f"evil-{uuid.uuid4().hex[:8]}"
    backend, d = run(moto_server, tmp_path, s3_bucket, name, {"train": f"s3://{s3_bucket}/evil/"})
    assert d["TrainingJobStatus"] == "Failed"
    assert "'..'" in d["FailureReason"] and "escaped.csv" in d["FailureReason"]
    assert not list(tmp_path.rglob("escaped.csv"))
    assert "ModelArtifacts" not in d


@pytest.mark.slow
def test_missing_input_prefix_is_a_clear_failure(moto_server, s3_bucket, tmp_path):
    name = f"empty-{uuid.uuid4().hex[:8]}"
    _backend, d = run(moto_server, tmp_path, s3_bucket, name, {"train": f"s3://{s3_bucket}/nothing-here/"})
    assert d["TrainingJobStatus"] == "Failed"
    assert d["FailureReason"].startswith("ClientError: No S3 objects found under S3 URL")  # as SageMaker words it
