"""The bounds of a simulated host (airflow_smdist.backends.local.job.bounds): the instance types' memory, the
storage sizes, and what a worker without a writable cgroup hierarchy is told."""

from __future__ import annotations

import os

import pytest

from airflow_smdist.backends.local.job import bounds

GiB = 2**30


@pytest.mark.parametrize(("instance_type", "gib"), [
    ("ml.m5.xlarge", 16), ("ml.m5.large", 8), ("ml.c5.2xlarge", 16), ("ml.c5.large", 4), ("ml.r5.4xlarge", 128),
    ("ml.t3.medium", 4), ("ml.t3.xlarge", 16), ("ml.g4dn.xlarge", 16), ("ml.g5.12xlarge", 192),
    ("ml.p3.2xlarge", 61), ("ml.p3.16xlarge", 488), ("ml.p4d.24xlarge", 1152), ("ml.trn1.32xlarge", 512),
    ("ml.m5d.24xlarge", 384)])
def test_an_instance_types_memory_is_what_aws_lists(instance_type, gib):
    assert bounds.instance_memory(instance_type) == gib * GiB


@pytest.mark.parametrize("instance_type", ["local", "ml.m5", "ml.zz9.xlarge", "ml.m5.metal", "m5.xlarge"])
def test_an_unknown_instance_type_has_no_memory_here(instance_type):
    assert bounds.instance_memory(instance_type) is None


def test_a_host_gets_the_smaller_of_its_instance_and_the_jobs_cap_never_below_the_floor():
    assert bounds.host_memory("ml.t3.medium", 12 * GiB) == 4 * GiB
    assert bounds.host_memory("ml.m5.4xlarge", 12 * GiB) == 12 * GiB
    assert bounds.host_memory("local", 3 * GiB) == 3 * GiB
    assert bounds.host_memory("ml.m5.xlarge", 1) == bounds.MIN_HOST_MEMORY


def test_storage_is_the_volume_at_most_half_the_memory():
    assert bounds.tmpfs_bytes(30, 16 * GiB) == 8 * GiB
    assert bounds.tmpfs_bytes(1, 16 * GiB) == 1 * GiB
    assert bounds.tmpfs_bytes(None, 4 * GiB) == 2 * GiB


@pytest.mark.parametrize(("setting", "value", "says"), [
    ("SMDIST_LOCAL_MEMORY_SHARE", "0", "above 0 and at most 1"), ("SMDIST_LOCAL_MEMORY_SHARE", "half", "above 0"),
    ("SMDIST_LOCAL_PIDS_MAX", "8", "at least 16"), ("SMDIST_LOCAL_PIDS_MAX", "-1", "whole number")])
def test_a_malformed_setting_is_named_with_its_fix(monkeypatch, setting, value, says):
    monkeypatch.setenv(setting, value)
    with pytest.raises(ValueError, match=f"{setting}={value!r}.*{says}"):
        bounds.JobBounds.make("/nonexistent/job", None)


def test_a_worker_that_cannot_write_its_cgroups_is_told_what_is_not_bounded(monkeypatch, tmp_path):
    """A non-root worker: its cgroup directories exist but are not writable; the job runs, unbounded, and says so."""
    own = bounds._own_cgroups()
    dirs = [tmp_path / c / own.get(c, "/").lstrip("/") for c in ("memory", "pids")]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(bounds, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(bounds.os, "access", lambda path, mode: False)
    made = bounds.JobBounds.make(str(tmp_path / "job"), 30)
    assert made.version is None and made.host("algo-1", "ml.m5.xlarge") is None
    assert made.unbounded == [f"memory and process count (cgroup v1: {dirs[0]}, {dirs[1]} not writable by this "
                              "user)"]


def test_only_the_cgroups_of_supervisors_that_are_gone_are_swept(tmp_path):
    """A job's cgroup carries its supervisor's PID: another job's sweep removes it once that process is gone,
    never while it lives (even while it has no host between its install and its training)."""
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    mine = tmp_path / f"smdist-aaaaaaaaaaaa-{os.getpid()}"
    dead = tmp_path / f"smdist-bbbbbbbbbbbb-{gone.pid}"
    for d in (mine / "algo-1", dead / "algo-1", tmp_path / "other"):
        d.mkdir(parents=True)
    bounds.sweep({tmp_path / f"smdist-cccccccccccc-{os.getpid()}"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, "other"])
    assert (mine / "algo-1").is_dir()
