"""A real TensorFlow MultiWorkerMirroredStrategy job on one and on two simulated hosts, in the TensorFlow image's local
runtime (tensorflow-cpu at the image's version, the code's requirements.txt with tf_keras installed by the
toolkit's pre-run step), as on SageMaker: TF_CONFIG from the toolkit, gRPC between the hosts' own network
stacks (both bind port 8890), the chief saves."""

from __future__ import annotations

import json
import os
import tarfile
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training
from jobs import wait

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MWMS = os.path.join(REPO, "tests", "fixtures", "tensorflow", "mwms")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"

pytestmark = pytest.mark.skipif(launcher.namespace_prefix() is None,
                                reason=f"hosts cannot be namespaced here: {launcher.namespaces_available()}")


@pytest.mark.slow
@pytest.mark.parametrize("hosts", [1, 2], ids=["one-host", "two-hosts"])
def test_tensorflow_mwms_job_trains_one_model(tmp_path, monkeypatch, hosts):
    """2 hosts: one model across both (each host's value reaches the other). 1 host: the toolkit sets TF_CONFIG
    for any host count with MWMS (a cluster of one worker), and MultiWorkerMirroredStrategy() trains on it."""
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    backend = LocalBackend(tmp_path / "jobs")
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.csv").write_text("1\n")
    name = f"tf-mwms-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point="train.py",
                          source_dir=MWMS, framework="tensorflow", framework_version="2.16", py_version="py310",
                          instance_type="ml.m5.xlarge", instance_count=hosts, inputs={"train": f"file://{data}"},
                          distribution={"multi_worker_mirrored_strategy": {"enabled": True}})
    upload_source(plan.source_dir, "train.py", plan.source_uri)
    backend.submit("training", plan.request)
    d = wait(backend, "training", name, timeout=1200)  # a cold runtime cache downloads tensorflow-cpu once
    events = backend.log_events("training", name)[0]
    lines = [(e.host, e.message) for e in events]
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-40:])
    names = [f"algo-{i + 1}" for i in range(hosts)]
    by_host = {h: [m for hh, m in lines if hh == h] for h in names}
    assert "Running distributed training job with multi_worker_mirrored_strategy setup" in [m for _h, m in lines]
    versions = next(m for m in by_host["algo-1"] if m.startswith("tensorflow="))
    assert versions.startswith("tensorflow=2.16.") and " tf_keras=2.16." in versions, versions
    for index, host in enumerate(names):
        tf_config = json.loads(next(m for m in by_host[host] if m.startswith("TF_CONFIG="))[len("TF_CONFIG="):])
        assert tf_config["cluster"]["worker"] == [f"{h}:8890" for h in names], tf_config
        assert tf_config["task"] == {"index": index, "type": "worker"}, tf_config
        assert f"replicas={hosts} workers={hosts} index={index}" in by_host[host], by_host[host][-20:]
        assert f"allreduce={float(sum(range(1, hosts + 1)))}" in by_host[host]  # each host's value reached every host
    first, last = (float(v) for v in next(m for m in by_host["algo-1"] if m.startswith("loss="))[5:].split("->"))
    assert last < first / 10, (first, last)
    with tarfile.open(d["ModelArtifacts"]["S3ModelArtifacts"][len("file://"):]) as tar:
        weights = json.load(tar.extractfile("weights.json"))
    assert len(weights[0]) == 8
