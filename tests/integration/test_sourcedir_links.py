"""sourcedir.tar.gz stores what symbolic links point to, as the SDK's create_tar_file does (issue 18)."""

from __future__ import annotations

import os
import tarfile
import time
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.sourcedir import pack_source_dir, upload_source
from airflow_smdist.specs.training import build_training


def _source_with_links(tmp_path):
    shared = tmp_path / "shared"
    (shared / "pkg").mkdir(parents=True)
    (shared / "helper.py").write_text("VALUE = 41\n")
    (shared / "pkg" / "__init__.py").write_text("ONE = 1\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text("from helper import VALUE\nfrom pkg import ONE\nprint('answer', VALUE + ONE)\n")
    os.symlink(shared / "helper.py", src / "helper.py")  # a link out of the source dir
    os.symlink(shared / "pkg", src / "pkg")  # a linked directory
    return src


def test_links_are_stored_as_their_targets_like_the_sdk(tmp_path):
    create_tar_file = pytest.importorskip("sagemaker.core.common_utils").create_tar_file  # the oracle (the SDK)

    src = _source_with_links(tmp_path)
    ours = tmp_path / "ours.tar.gz"
    pack_source_dir(str(src), ours)
    sdk = create_tar_file([str(src / n) for n in sorted(os.listdir(src))], str(tmp_path / "sdk.tar.gz"))

    def files(path):
        with tarfile.open(path) as tar:
            return {m.name: (m.type, tar.extractfile(m).read()) for m in tar.getmembers() if not m.isdir()}

    assert files(ours) == files(sdk)
    assert files(ours)["helper.py"] == (tarfile.REGTYPE, b"VALUE = 41\n")


@pytest.mark.slow
def test_a_job_whose_source_links_out_of_its_directory_runs(tmp_path):
    backend = LocalBackend(tmp_path / "jobs")
    name = f"links-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role="arn:aws:iam::123456789012:role/R", output_path=f"file://{tmp_path}/out",
                          entry_point="main.py", source_dir=str(_source_with_links(tmp_path)),
                          instance_type="ml.m5.xlarge",
                          image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1")
    upload_source(plan.source_dir, "main.py", plan.source_uri)
    backend.submit("training", plan.request)
    deadline = time.time() + 120
    while (d := backend.describe("training", name))["TrainingJobStatus"] not in ("Completed", "Failed", "Stopped"):
        assert time.time() < deadline
        time.sleep(0.3)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    events, _ = backend.log_events("training", name)
    assert any(e.message == "answer 42" for e in events)
