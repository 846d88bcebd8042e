"""Issue 43: a simulated host is bounded as an instance is: its memory, its process count and its writable storage.
Hostile jobs try to take more, beside a job that must complete; each is read where users meet it: the job's
FailureReason and its log."""

from __future__ import annotations

import os
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import bounds, launcher
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training
from jobs import wait

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(REPO, "tests", "fixtures", "bounds")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
MiB = 2**20
needs_cgroups = pytest.mark.skipif(bounds.hierarchy()[0] is None, reason=f"no cgroups here: {bounds.hierarchy()[1]}")
needs_namespaces = pytest.mark.skipif(launcher.namespace_prefix() is None,
                                      reason=f"hosts cannot be namespaced here: {launcher.namespaces_available()}")


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(tmp_path / "jobs")


def submit(backend, tmp_path, entry, hps, *, instance_type="ml.m5.xlarge", **kw) -> str:
    name = f"{entry.split('.')[0].replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point=entry,
                          source_dir=SOURCE, image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                          instance_type=instance_type, instance_count=1, hyperparameters=hps, **kw)
    upload_source(plan.source_dir, entry, plan.source_uri)
    backend.submit("training", plan.request)
    return name


def share_for(job_bytes: int) -> str:
    """SMDIST_LOCAL_MEMORY_SHARE that gives a job ``job_bytes`` of this machine's memory."""
    return f"{job_bytes / bounds.machine_memory():.6f}"


def log_of(backend, name) -> str:
    """The job's platform lines, as its log stream shows them."""
    import json

    path = backend.job_dir("training", name) / "logs" / "platform.jsonl"
    return "\n".join(json.loads(line)["m"] for line in path.read_text().splitlines())


@pytest.mark.slow
@needs_cgroups
def test_a_host_that_allocates_past_its_memory_fails_out_of_memory_beside_a_job_that_completes(
        backend, tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_MEMORY_SHARE", share_for(384 * MiB))
    hungry = submit(backend, tmp_path, "eat_memory.py", {"mb": 4096})
    monkeypatch.delenv("SMDIST_LOCAL_MEMORY_SHARE")
    other = submit(backend, tmp_path, "hello.py", {})
    d = wait(backend, "training", hungry, timeout=120)
    assert d["TrainingJobStatus"] == "Failed"
    assert d["FailureReason"].startswith(bounds.OOM_REASON), d["FailureReason"]
    limit = bounds.host_memory("ml.m5.xlarge", int(float(share_for(384 * MiB)) * bounds.machine_memory()))
    assert f"Host algo-1 (ml.m5.xlarge) ran out of memory (its limit here: {limit / 2**30:.2f} GiB)" in d[
        "FailureReason"]
    assert "allocated all of it" not in log_of(backend, hungry)
    assert wait(backend, "training", other, timeout=120)["TrainingJobStatus"] == "Completed"
    assert "is bounded as an ml.m5.xlarge instance: memory 0.4 GiB (the instance type's 16 GiB;" in log_of(
        backend, hungry)


@pytest.mark.slow
@needs_cgroups
@pytest.mark.parametrize("instance_type", ["ml.t3.medium", "ml.m5.large"])
def test_a_host_gets_its_instance_types_memory_under_the_machines_share(backend, tmp_path, monkeypatch,
                                                                         instance_type):
    """The smaller of the two bounds a host: the instance type's memory (t3.medium: 4 GiB, m5.large: 8 GiB) under
    a share of 6 GiB; read from the job's log and from the host's own cgroup, as the script sees it."""
    monkeypatch.setenv("SMDIST_LOCAL_MEMORY_SHARE", share_for(6 * 2**30))
    name = submit(backend, tmp_path, "hello.py", {}, instance_type=instance_type)
    assert wait(backend, "training", name)["TrainingJobStatus"] == "Completed"
    expected = {"ml.t3.medium": "4.0", "ml.m5.large": "6.0"}[instance_type]
    assert f"is bounded as an {instance_type} instance: memory {expected} GiB" in log_of(backend, name)


@pytest.mark.slow
@needs_cgroups
@needs_namespaces
@pytest.mark.parametrize("path", ["/tmp/fill", "/dev/shm/fill"])
def test_a_host_that_fills_its_storage_fails_with_no_space_left_naming_the_path(backend, tmp_path, monkeypatch,
                                                                               path):
    """/tmp and /dev/shm hold the volume, at most half the host's memory (here 512 MiB of memory: 256 MiB each):
    a 512 MB write fails with ENOSPC at the path, and the worker's memory never held it."""
    monkeypatch.setenv("SMDIST_LOCAL_MEMORY_SHARE", share_for(512 * MiB))
    name = submit(backend, tmp_path, "fill_disk.py", {"path": path, "mb": 512})
    d = wait(backend, "training", name, timeout=120)
    assert d["TrainingJobStatus"] == "Failed"
    memory = bounds.host_memory("ml.m5.xlarge", int(float(share_for(512 * MiB)) * bounds.machine_memory()))
    size = bounds.tmpfs_bytes(30, memory) // MiB  # (build_training's default volume: 30 GB)
    assert f"No space left on device: the host's {os.path.dirname(path)} is full ({size} MiB" in d[
        "FailureReason"], d["FailureReason"]
    assert not d["FailureReason"].startswith(bounds.OOM_REASON)


@pytest.mark.slow
@needs_cgroups
def test_a_host_cannot_start_more_processes_than_its_bound(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_PIDS_MAX", "48")
    name = submit(backend, tmp_path, "many_processes.py", {"count": 200})
    d = wait(backend, "training", name, timeout=120)
    assert d["TrainingJobStatus"] == "Failed"
    assert "Resource temporarily unavailable" in d["FailureReason"], d["FailureReason"]
    assert "started 200 processes" not in log_of(backend, name)
    monkeypatch.delenv("SMDIST_LOCAL_PIDS_MAX")
    fine = submit(backend, tmp_path, "many_processes.py", {"count": 20})
    assert wait(backend, "training", fine)["TrainingJobStatus"] == "Completed"


@pytest.mark.slow
@pytest.mark.parametrize(("setting", "value"), [("SMDIST_LOCAL_MEMORY_SHARE", "1.5"),
                                                 ("SMDIST_LOCAL_PIDS_MAX", "many")])
def test_a_malformed_bound_setting_fails_the_job_naming_it(backend, tmp_path, monkeypatch, setting, value):
    monkeypatch.setenv(setting, value)
    name = submit(backend, tmp_path, "hello.py", {})
    d = wait(backend, "training", name)
    assert d["TrainingJobStatus"] == "Failed"
    assert f"{setting}={value!r}" in d["FailureReason"], d["FailureReason"]
