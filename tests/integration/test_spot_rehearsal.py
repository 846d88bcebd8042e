"""Rehearsed managed spot interruptions and instance failures on real local jobs (issue 33).

A 2-host script checkpoints from its first host and is interrupted on purpose
(``SMDIST_LOCAL_SPOT_INTERRUPTIONS``): its hosts are lost, checkpoints synced and restored, the secondary
status goes ``Interrupted`` and back, and it ends with the same loss as an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import tarfile
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend, launcher
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training

from jobs import wait

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPOT = os.path.join(REPO, "tests", "fixtures", "spot")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
METRICS = [{"Name": "step", "Regex": r"step=(\d+)"}, {"Name": "loss", "Regex": r"loss=([0-9.]+)"}]
#: the loss is computed step by step from the checkpoint's full value: resumed, it is the same to the bit
LOSS_TOLERANCE = 1e-12
needs_namespaces = pytest.mark.skipif(launcher.namespace_prefix() is None,
                                      reason=f"hosts cannot be namespaced here: {launcher.namespaces_available()}")


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(tmp_path / "jobs")


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_CAPACITY_WAIT", "0.5")
    monkeypatch.setenv("SMDIST_LOCAL_CHECKPOINT_SYNC", "1")
    monkeypatch.delenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", raising=False)
    monkeypatch.delenv("SMDIST_LOCAL_INSTANCE_FAILURES", raising=False)


def plan(tmp_path, *, hps=None, spot=True, checkpoint=True, instance_count=2, entry="ckpt_train.py", **kw):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "x.csv").write_text("1\n")
    name = f"spot-{uuid.uuid4().hex[:8]}"
    if spot:
        kw.setdefault("max_wait", 600)
    built = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point=entry,
                           source_dir=SPOT, image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                           instance_type="ml.m5.xlarge", instance_count=instance_count, hyperparameters=hps or {},
                           inputs={"train": f"file://{data}"}, metric_definitions=METRICS, max_run=300,
                           use_spot_instances=spot,
                           checkpoint_s3_uri=f"file://{tmp_path}/ckpt/{name}" if checkpoint else None, **kw)
    upload_source(built.source_dir, entry, built.source_uri)
    return built


def run(backend, tmp_path, **kw) -> tuple[str, dict]:
    built = plan(tmp_path, **kw)
    backend.submit("training", built.request)
    name = built.request["TrainingJobName"]
    return name, wait(backend, "training", name, timeout=120)


def final(d) -> dict:
    with tarfile.open(d["ModelArtifacts"]["S3ModelArtifacts"][len("file://"):]) as tar:
        return json.loads(tar.extractfile("final.json").read())


def statuses(d) -> list[str]:
    return [t["Status"] for t in d["SecondaryStatusTransitions"]]


def messages(backend, name) -> list[str]:
    return [e.message for e in backend.log_events("training", name)[0]]


@needs_namespaces
def test_two_interruptions_resume_from_rank0_checkpoints_and_end_with_the_uninterrupted_loss(backend, tmp_path,
                                                                                              monkeypatch):
    _, clean = run(backend, tmp_path)
    assert clean["TrainingJobStatus"] == "Completed", clean.get("FailureReason")
    assert "Interrupted" not in statuses(clean)

    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "1.5,1.5")
    name, d = run(backend, tmp_path)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert statuses(d) == ["Starting", "Downloading", "Training", "Interrupted", "Starting", "Downloading",
                           "Training", "Interrupted", "Starting", "Downloading", "Training", "Uploading", "Completed"]
    assert final(d)["step"] == final(clean)["step"] == 16
    assert abs(final(d)["loss"] - final(clean)["loss"]) <= LOSS_TOLERANCE
    log = messages(backend, name)
    resumes = [m for m in log if m.startswith("algo-") and "resumed from checkpoint at step" in m]
    assert len(resumes) == 4, log  # both hosts, after each of the two interruptions
    assert all(int(m.rsplit(" ", 1)[1]) > 0 for m in resumes)
    # the hosts were lost: the request is the one submitted, the billable time leaves out the capacity waits
    assert d["EnableManagedSpotTraining"] is True
    assert d["BillableTimeInSeconds"] <= d["TrainingTimeInSeconds"]
    waits = sum((t["EndTime"] - t["StartTime"]).total_seconds() for t in d["SecondaryStatusTransitions"][3:]
                if t["Status"] in ("Interrupted", "Starting"))
    assert waits >= 1.0
    assert d["TrainingTimeInSeconds"] - d["BillableTimeInSeconds"] >= int(waits) - 1

    from airflow_smdist import insight

    summary, digest = insight.job_insight(backend, d)
    lost = summary["interruptions"]
    assert len(lost) == 2 and all(i["resumed_from"] > 1 for i in lost), lost
    assert all(0 <= i["lost"] <= 3 for i in lost), lost
    assert not any("same checkpoint key" in f for f in summary["findings"]), summary["findings"]
