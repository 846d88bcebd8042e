"""file:// storage faults (issue 12, Data): links do not lead out of a prefix; a failed write leaves no
temporary file in the output prefix."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training
from airflow_smdist.storage import Storage

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTRACT = os.path.join(REPO, "tests", "fixtures", "contract")


@pytest.mark.slow
def test_a_file_channel_does_not_follow_links_out_of_its_prefix(tmp_path):
    outside = tmp_path / "private"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text("not for the job\n")
    (outside / "dir" / "more.txt").write_text("nor this\n")
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    (data / "part-0.csv").write_text("1,2\n")
    os.symlink(outside / "secret.txt", data / "linked.txt")
    os.symlink(outside / "dir", data / "linked-dir")
    assert [o.key.rsplit("/", 1)[-1] for o in Storage().list(f"file://{data}")] == ["part-0.csv"]

    backend = LocalBackend(tmp_path / "jobs")
    name = f"links-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role="arn:aws:iam::123456789012:role/R", output_path=f"file://{tmp_path}/out",
                          entry_point="dump_env.py", source_dir=CONTRACT, instance_type="ml.m5.xlarge",
                          image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                          inputs={"train": f"file://{data}"}, environment={"SMDIST_REPO": REPO})
    upload_source(plan.source_dir, "dump_env.py", plan.source_uri)
    backend.submit("training", plan.request)
    deadline = time.time() + 120
    while (d := backend.describe("training", name))["TrainingJobStatus"] not in ("Completed", "Failed", "Stopped"):
        assert time.time() < deadline
        time.sleep(0.3)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    import tarfile

    with tarfile.open(d["ModelArtifacts"]["S3ModelArtifacts"][len("file://"):]) as tar:
        seen = json.loads(tar.extractfile("contract-0.json").read())
    assert seen["channels"]["train"] == ["part-0.csv"]


def test_a_failed_write_leaves_no_partial_file(tmp_path):
    out = tmp_path / "out"
    (out / "a.csv.out").mkdir(parents=True)  # the key is taken by a directory: the rename fails
    (out / "a.csv.out" / "x").write_text("")
    src = tmp_path / "model.tar.gz"
    src.write_bytes(b"model")
    for write in (lambda: Storage().write_bytes(b"1\n", f"file://{out}/a.csv.out"),
                  lambda: Storage().upload(src, f"file://{out}/a.csv.out")):
        with pytest.raises(OSError):
            write()
        assert not list(out.rglob("*.smdist-partial"))
    (out / "left.smdist-partial").write_text("from a crash")  # and one left by a crash is not an object
    assert [o.key.rsplit("/", 1)[-1] for o in Storage().list(f"file://{out}")] == ["x"]
