"""What a supervisor killed with SIGKILL leaves is gone when the next job starts (issue 34, hole 7): the tar being
packed (``<job dir>/pack.tmp``), a partial file:// object (``<obj>.<pid>-<hex>.smdist-partial``) and an S3
multipart upload never completed (billed until a lifecycle rule runs).

Each kill is at a known point: ``SMDIST_TEST_PAUSE=<pack|copy|multipart>:<flag file>`` makes the supervisor write
the flag file there and wait; the test kills it then."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import boto3
import pytest
from jobs import wait

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training
from airflow_smdist.storage import Storage

REPO = Path(__file__).resolve().parents[2]
LINKS = REPO / "tests" / "fixtures" / "links"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
pytestmark = pytest.mark.slow


def submit(backend: LocalBackend, output_path: str, size: int, storage: Storage | None = None) -> str:
    name = f"litter-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=output_path, entry_point="big_model.py",
                          source_dir=str(LINKS), image_uri=IMAGE, instance_type="ml.m5.large",
                          hyperparameters={"size": str(size)})
    upload_source(plan.source_dir, "big_model.py", plan.source_uri, storage)
    backend.submit("training", plan.request)
    return name


def kill_at(backend: LocalBackend, monkeypatch, tmp_path: Path, point: str, output_path: str, size: int,
            storage: Storage | None = None) -> Path:
    """Run a job until its supervisor reaches ``point``, kill -9 it there; its job directory."""
    flag = tmp_path / f"paused-{point}"
    monkeypatch.setenv("SMDIST_TEST_PAUSE", f"{point}:{flag}")
    name = submit(backend, output_path, size, storage)
    monkeypatch.delenv("SMDIST_TEST_PAUSE")
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert time.monotonic() < deadline, (backend.job_dir("training", name) / "supervisor.log").read_text()[-2000:]
        time.sleep(0.05)
    time.sleep(0.05)  # (the flag's writer has finished writing its pid)
    pid = int(flag.read_text())
    assert pid == int((backend.job_dir("training", name) / "supervisor.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    while backend._supervisor_pid(backend.job_dir("training", name)) is not None:
        time.sleep(0.05)
    return backend.job_dir("training", name)


def next_job(backend: LocalBackend, output_path: str, storage: Storage | None = None) -> None:
    """Another job, started after the kill: its supervisor reclaims the litter when it starts."""
    name = submit(backend, output_path, 16, storage)
    d = wait(backend, "training", name, timeout=120)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")


def test_a_supervisor_killed_while_packing_leaves_no_tar_once_the_next_job_started(tmp_path, monkeypatch):
    backend = LocalBackend(tmp_path / "jobs")
    out = f"file://{tmp_path}/out"
    job_dir = kill_at(backend, monkeypatch, tmp_path, "pack", out, 2 * 1024 * 1024)
    left = list((job_dir / "pack.tmp").iterdir())
    assert [p.name for p in left] == ["model.tar.gz"] and left[0].stat().st_size > 2 * 1024 * 1024
    next_job(backend, out)
    assert not (job_dir / "pack.tmp").exists()


def test_a_supervisor_killed_while_copying_leaves_no_partial_object_once_the_next_job_started(tmp_path, monkeypatch):
    backend = LocalBackend(tmp_path / "jobs")
    out = f"file://{tmp_path}/out"
    job_dir = kill_at(backend, monkeypatch, tmp_path, "copy", out, 3 * 1024 * 1024)
    partial = list((tmp_path / "out").rglob("*.smdist-partial"))
    assert len(partial) == 1 and partial[0].name.startswith("model.tar.gz."), partial
    next_job(backend, out)
    assert not list((tmp_path / "out").rglob("*.smdist-partial"))
    assert not (job_dir / "pack.tmp").exists()
    assert not (tmp_path / "out" / job_dir.name / "output" / "model.tar.gz").exists()  # never half an object


def test_a_supervisor_killed_during_a_multipart_upload_leaves_none_once_the_next_job_started(
        tmp_path, monkeypatch, moto_server, s3_bucket):
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    storage = Storage(endpoint_url=moto_server)
    backend = LocalBackend(tmp_path / "jobs", s3_endpoint_url=moto_server)
    out = f"s3://{s3_bucket}/out"
    job_dir = kill_at(backend, monkeypatch, tmp_path, "multipart", out, 9 * 1024 * 1024, storage)
    uploads = s3.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", [])
    assert [u["Key"] for u in uploads] == [f"out/{job_dir.name}/output/model.tar.gz"]
    next_job(backend, out, storage)
    assert s3.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []
    assert not (job_dir / "pack.tmp").exists()
    assert "Contents" not in s3.list_objects_v2(Bucket=s3_bucket, Prefix=f"out/{job_dir.name}/output/")
