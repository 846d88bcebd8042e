"""The SageMaker Spark container's own PySpark test app, unmodified (tests/fixtures/sagemaker_examples/README.md:
source, commit, license, md5), in a local PySparkProcessor job on 2 hosts of its image (sagemaker-spark-processing
3.5), as the container's integration test runs it on SageMaker: ``--input s3://.../data.jsonl --output
s3://...`` read and written by Spark itself (the container's S3A file system behind ``s3://``), its
``hello_py_spark_udfs.py`` shipped with ``submit_py_files``.

S3 is the moto server on loopback; the job gets keys for it through its ``Environment`` (a local job never gets
the worker's credentials). The app sleeps 60 s (its own ``time.sleep(60)``, there to watch the event log grow on
SageMaker): the job took about 80 s here (2 cores), 95 s with the Spark runtime's build; not gated, as CI builds
the Spark runtime anyway."""

from __future__ import annotations

import json
import os
import sys
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.specs.processing import build_pyspark_processing, upload_plan
from airflow_smdist.storage import Storage
from jobs import wait

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(os.path.dirname(HERE), "fixtures", "sagemaker_examples", "spark_hello_py_spark")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


def _sales(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.slow
@pytest.mark.skipif(launcher.namespace_prefix() is None, reason="two hosts with their own names and /opt/ml "
                    f"({launcher.namespaces_available()})")
def test_spark_containers_hello_app_reads_and_writes_s3_from_spark_on_two_hosts(moto_server, s3_bucket, tmp_path,
                                                                                  monkeypatch):
    """hello_py_spark_app.py reads its input and writes its output with Spark at s3:// URIs (no ProcessingInput
    or ProcessingOutput), as on SageMaker: the local Spark has the S3A file system behind s3:// and s3a:// (the
    container's core-site.xml), pointed at the job's S3 endpoint; the doubled sales it writes are in the bucket."""
    if sys.version_info >= (3, 13):  # a runtime is built on the worker's Python
        pytest.skip("the Spark 3.5 image's runtime does not build on Python 3.13 here (test_local_processing.py)")
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    storage = Storage(endpoint_url=moto_server)
    data_uri = f"s3://{s3_bucket}/spark/input/data.jsonl"
    output_uri = f"s3://{s3_bucket}/spark/output/sales/{uuid.uuid4().hex[:8]}"
    with open(os.path.join(APP, "data.jsonl"), "rb") as f:
        storage.write_bytes(f.read(), data_uri)
    name = f"hello-py-spark-{uuid.uuid4().hex[:8]}"
    plan = build_pyspark_processing(
        job_name=name, role=ROLE, submit_app=os.path.join(APP, "hello_py_spark_app.py"),
        submit_py_files=[os.path.join(APP, "hello_py_spark_udfs.py")], framework_version="3.5",
        instance_type="ml.c5.xlarge", instance_count=2, code_location=f"s3://{s3_bucket}/code",
        arguments=["--input", data_uri, "--output", output_uri],
        spark_event_logs_s3_uri=f"s3://{s3_bucket}/spark/spark-events/{name}",
        env={"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    upload_plan(plan, storage)
    backend = LocalBackend(tmp_path / "jobs", s3_endpoint_url=moto_server)
    backend.submit("processing", plan.request)
    d = wait(backend, "processing", name, timeout=900)
    events, _ = backend.log_events("processing", name)
    said = {h: [e.message for e in events if e.host == h] for h in ("platform", "algo-1", "algo-2")}
    assert d["ProcessingJobStatus"] == "Completed", (d.get("FailureReason"), said["algo-1"][-30:])
    app = said["algo-1"]
    for line in ("Hello World, this is PySpark!", "Created spark context", "Loaded data", "Calculated data",
                 "Saved data"):
        assert line in app, (line, app[-30:])
    assert any("smspark-submit: worker host of the Spark cluster" in m for m in said["algo-2"]), said["algo-2"]
    platform = said["platform"]
    assert any(m.startswith("Spark's s3:// and s3a:// file system: S3A (hadoop-aws ") and moto_server in m
               for m in platform), platform
    # what Spark wrote (part files of JSON lines) is in the bucket: every sale, and its double by the app's UDF
    out = tmp_path / "out"
    parts = [o for o in storage.list(output_uri + "/") if o.uri.endswith(".json")]
    assert parts, [o.uri for o in storage.list(output_uri + "/")]
    storage.download_prefix(output_uri + "/", out, parts)
    written = [r for p in sorted(out.rglob("*.json")) for r in _sales(str(p))]
    sales = _sales(os.path.join(APP, "data.jsonl"))
    assert len(written) == len(sales), (len(written), len(sales))
    assert sorted((r["date"], r["sale"]) for r in written) == sorted((s["date"], s["sale"]) for s in sales)
    assert all(r["sale_double"] == 2 * r["sale"] for r in written)
