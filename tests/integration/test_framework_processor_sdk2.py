"""SDK 2's FrameworkProcessor with source_dir: our request, and what we upload (sourcedir.tar.gz, runproc.sh,
read back from the moto server's S3), against what SageMaker Python SDK 2.x sent and uploaded for the same
arguments (tests/fixtures/sdk_v2_requests.json, made by scripts/make_sdk_fixtures.sh)."""

from __future__ import annotations

import copy
import io
import json
import pathlib
import tarfile

import boto3
import pytest
from moto_server import REGION

from airflow_smdist.specs.processing import build_processing, upload_plan
from airflow_smdist.storage import Storage

FIXTURES = json.loads((pathlib.Path(__file__).parents[1] / "fixtures" / "sdk_v2_requests.json").read_text())
CASE = FIXTURES["cases"]["framework_processor"]
BUCKET = FIXTURES["bucket"]


def sdk_request() -> dict:
    """What SDK 2 sent, as it sent it (``AppManaged: false`` on every input and output included)."""
    return copy.deepcopy(CASE["request"])


@pytest.fixture
def s3(moto_server, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    client = boto3.client("s3", endpoint_url=moto_server, region_name=REGION)
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    return client


def test_request_and_uploads_are_what_the_sdk2_framework_processor_sends(s3, tmp_path):
    for rel, text in FIXTURES["sources"].items():
        (tmp_path / rel).write_text(text)
    plan = build_processing(job_name="fw-proc", role=FIXTURES["role"], framework="pytorch", framework_version="2.3.0",
                            py_version="py311", instance_type="ml.m5.xlarge", instance_count=2,
                            code="process.py", source_dir=str(tmp_path), code_location=f"s3://{BUCKET}/code",
                            env={"STAGE": "prep"}, arguments=["--rows", 100],
                            outputs={"out": {"source": "/opt/ml/processing/output",
                                             "destination": f"s3://{BUCKET}/processed"}},
                            region=REGION, allow_local_uris=False)
    assert plan.request == sdk_request()

    written = upload_plan(plan, Storage())
    assert sorted(written) == sorted(CASE["uploads"])
    for uri, expected in CASE["uploads"].items():
        body = s3.get_object(Bucket=BUCKET, Key=uri.split("/", 3)[3])["Body"].read()
        if "tar" in expected:
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
                got = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
            assert got == expected["tar"]
        else:
            assert body.decode() == expected["text"]
