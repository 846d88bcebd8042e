"""The XGBoost framework image in script mode (``framework="xgboost"``, ``1.7-1``, ``entry_point``): the
container's own test script (tests/fixtures/sagemaker_examples/README.md: source, commit, license, md5), unmodified,
imports ``sagemaker_xgboost_container`` (distributed.rabit_run, data_utils.get_dmatrix), which the local backend
stands in for (backends/local/inhost/xgbcontainer/), and ``sagemaker_containers.entry_point``: on two hosts both
join one Rabit ring and the master alone writes the model; on one host it trains alone; a scikit-learn job cannot
import the package, as on SageMaker.

Real local jobs in the image's runtime (xgboost 1.7.x), as the scikit-learn real-script test runs its script
(test_image_manifests.py): the request from ``build_training``, the code uploaded, the job submitted."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training

pytestmark = pytest.mark.slow

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
SCRIPT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures",
                          "sagemaker_examples", "xgboost_abalone_distributed")
ENTRY = "abalone_distributed.py"
HPS = {"max_depth": 4, "eta": 0.3, "gamma": 0, "min_child_weight": 1, "subsample": 1.0,
       "objective": "reg:squarederror", "num_round": 8}


@pytest.fixture(autouse=True)
def image_runtime(monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")


def abalone(path, rows: int, seed: int) -> None:
    """Abalone-like LIBSVM rows: rings from 8 features (sex coded 1-3, lengths, weights), 1-based indexes."""
    import random

    rng = random.Random(seed)
    lines = []
    for _ in range(rows):
        sex, length = rng.choice((1, 2, 3)), rng.uniform(0.1, 0.8)
        feats = [sex, length, length * 0.8, length * 0.3, length ** 3 * 2, length ** 3, length ** 3 * 0.4,
                 length ** 3 * 0.6]
        rings = round(3 + 20 * length + sex + rng.uniform(-1, 1))
        lines.append(f"{rings} " + " ".join(f"{i + 1}:{v:.4f}" for i, v in enumerate(feats)))
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def data(tmp_path):
    for split, parts in (("train", 2), ("validation", 1)):
        (tmp_path / split).mkdir()
        for i in range(parts):
            abalone(tmp_path / split / f"abalone.{split}_{i}", 120, seed=len(split) * 10 + i)
    return tmp_path


def run_job(tmp_path, *, source_dir, entry, instance_count, framework="xgboost", version="1.7-1", inputs=None,
            hyperparameters=None):
    backend = LocalBackend(tmp_path / "jobs")
    name = f"xgb-sm-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point=entry,
                          source_dir=source_dir, instance_type="ml.m5.xlarge", instance_count=instance_count,
                          framework=framework, framework_version=version, hyperparameters=hyperparameters or {},
                          inputs=inputs or {})
    upload_source(plan.source_dir, entry, plan.source_uri)
    started = time.time()
    backend.submit("training", plan.request)
    while (d := backend.describe("training", name))["TrainingJobStatus"] not in ("Completed", "Failed", "Stopped"):
        assert time.time() < started + 600
        time.sleep(0.3)
    print(f"{name}: {d['TrainingJobStatus']} in {time.time() - started:.1f}s")
    return backend, name, d


def host_lines(backend, name, host):
    path = backend.job_dir("training", name) / "logs" / f"{host}.jsonl"
    return [json.loads(line)["m"] for line in path.read_text().splitlines()]


def inputs_of(data, train_distribution):
    return {"train": {"s3_uri": f"file://{data}/train", "distribution": train_distribution,
                      "content_type": "text/libsvm"},
            "validation": {"s3_uri": f"file://{data}/validation", "content_type": "text/libsvm"}}


def load_model(backend, name, path) -> int:
    """Rounds of the pickled booster, loaded by the job's own runtime (xgboost 1.7, as in the image)."""
    state = json.loads((backend.job_dir("training", name) / "state.json").read_text())
    out = subprocess.run([state["runtime"]["python"], "-c", "import pickle, sys; "
                          "print(pickle.load(open(sys.argv[1], 'rb')).num_boosted_rounds())", str(path)],
                         capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


def test_the_script_is_the_containers_unmodified():
    with open(os.path.join(SCRIPT_DIR, ENTRY), "rb") as f:
        assert hashlib.md5(f.read()).hexdigest() == "9f4dac30a0f707eb2deab1e07c1f81bf"


def test_two_hosts_join_one_rabit_ring_and_the_master_alone_writes_the_model(tmp_path, data):
    backend, name, d = run_job(tmp_path, source_dir=SCRIPT_DIR, entry=ENTRY, instance_count=2, hyperparameters=HPS,
                               inputs=inputs_of(data, "ShardedByS3Key"))
    lines = [e.message for e in backend.log_events("training", name)[0]]
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-40:])
    job = backend.job_dir("training", name)
    # each host has its own share of the training data (one file each)
    assert [len(os.listdir(job / "hosts" / h / "input" / "data" / "train")) for h in ("algo-1", "algo-2")] == [1, 1]
    logs = {h: host_lines(backend, name, h) for h in ("algo-1", "algo-2")}
    # both hosts join both rings (who has data, then training), through the master's tracker, with ranks 0 and 1
    for port in (9099, 9100):
        joined = {h: [m for m in logs[h] if "joined the Rabit ring of 2 hosts (algo-1, algo-2) through the tracker "
                      f"on algo-1:{port} as rank" in m] for h in logs}
        assert all(len(v) == 1 for v in joined.values()), (port, logs)
        assert sorted(m.split(" as rank ")[1] for v in joined.values() for m in v) == ["0 of 2", "1 of 2"]
    # ... as xgboost's own workers say it, once per ring
    for host, rank in (("algo-1", 0), ("algo-2", 1)):
        assert len([m for m in logs[host] if m.endswith(f"] task {rank:06d} got new rank {rank}")]) == 2, logs[host]
    # the tracker runs on the master: the worker's request reaches it there, and xgboost's evaluation lines
    # (sent to the tracker by rank 0) are printed there only
    assert any(m == "RabitTracker: algo-2 reached the tracker" for m in logs["algo-1"]), logs["algo-1"][-30:]
    evals = [m for m in logs["algo-1"] if m.startswith("[7]\ttrain-rmse:")]
    assert len(evals) == 1 and "\tvalidation-rmse:" in evals[0], logs["algo-1"][-30:]
    assert not [m for m in logs["algo-2"] if "train-rmse" in m]
    # the master alone writes the model (is_master from rabit_run), and it is the artifact
    assert os.listdir(job / "hosts" / "algo-1" / "model") == ["xgboost-model"]
    assert os.listdir(job / "hosts" / "algo-2" / "model") == []
    with tarfile.open(d["ModelArtifacts"]["S3ModelArtifacts"][len("file://"):]) as tar:
        assert tar.getnames() == ["xgboost-model"]
    assert load_model(backend, name, job / "hosts" / "algo-1" / "model" / "xgboost-model") == 8
    # the runtime's log says what stands in for the container's package
    assert any(m.startswith("left out: sagemaker-xgboost-container: ") and "instead: script mode: the project's "
               "stand-in" in m for m in lines), [m for m in lines if m.startswith("left out")]
    runtime = next(m for m in lines if m.startswith("runtime: sagemaker-xgboost:1.7-1"))
    assert "xgboost 1.7." in runtime


def test_one_host_trains_alone(tmp_path, data):
    backend, name, d = run_job(tmp_path, source_dir=SCRIPT_DIR, entry=ENTRY, instance_count=1, hyperparameters=HPS,
                               inputs=inputs_of(data, "FullyReplicated"))
    lines = [e.message for e in backend.log_events("training", name)[0]]
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-40:])
    logs = host_lines(backend, name, "algo-1")
    assert not [m for m in logs if "Rabit" in m]  # one host: the script trains without rabit_run
    assert [m for m in logs if m.startswith("[7]\ttrain-rmse:")], logs[-20:]
    job = backend.job_dir("training", name)
    assert load_model(backend, name, job / "hosts" / "algo-1" / "model" / "xgboost-model") == 8


RABIT_SCRIPT = '''
import json, os, sys
from sagemaker_xgboost_container import distributed
from sagemaker_xgboost_container.constants import xgb_constants
from sagemaker_xgboost_container.data_utils import get_content_type

hosts, me = json.loads(os.environ["SM_HOSTS"]), os.environ["SM_CURRENT_HOST"]
distributed.wait_hostname_resolution(hosts)
assert get_content_type("text/x-libsvm") == "libsvm" and get_content_type("text/csv;label_size=1") == "csv"
assert xgb_constants.MODEL_NAME == "xgboost-model"

def run(is_master, ring):
    from xgboost import collective
    print(f"RING {me} {ring} is_master={is_master} rank={collective.get_rank()} "
          f"world={collective.get_world_size()}", flush=True)

# the last host has no data: it leaves after the first ring; the others train in the second
distributed.rabit_run(exec_fun=run, args={"ring": "all"}, include_in_training=me != sorted(hosts)[-1], hosts=hosts,
                      current_host=me, update_rabit_args=True)
# one host: no tracker, no ring
with distributed.Rabit(hosts=[me], current_host=me, port=9300) as alone:
    print(f"ALONE {me} is_master={alone.is_master} rank={alone.rank} {alone.synchronize({'x': 1})}", flush=True)
'''


def test_a_host_without_data_leaves_the_ring_and_one_host_needs_no_tracker(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "rabit.py").write_text(RABIT_SCRIPT)
    backend, name, d = run_job(tmp_path, source_dir=str(code), entry="rabit.py", instance_count=3)
    lines = [e.message for e in backend.log_events("training", name)[0]]
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-40:])
    logs = {h: host_lines(backend, name, h) for h in ("algo-1", "algo-2", "algo-3")}
    rings = sorted(m for v in logs.values() for m in v if m.startswith("RING "))
    assert rings == ["RING algo-1 all is_master=True rank=0 world=2", "RING algo-2 all is_master=False rank=1 world=2"]
    assert any("Host algo-3 not being used for distributed training." in m for m in logs["algo-3"]), logs["algo-3"]
    assert [m for m in logs["algo-3"] if "joined the Rabit ring of 3 hosts" in m]
    assert not [m for m in logs["algo-3"] if "joined the Rabit ring of 2 hosts" in m]
    assert sorted(m for v in logs.values() for m in v if m.startswith("ALONE ")) == [
        "ALONE algo-1 is_master=True rank=0 [{'x': 1}]", "ALONE algo-2 is_master=True rank=0 [{'x': 1}]"]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="no scikit-learn 1.2 wheel for this Python (and the 1.4-2 "
                    "image's packages do not resolve together here)")
def test_a_scikit_learn_job_cannot_import_the_xgboost_containers_package(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("from sagemaker_xgboost_container import distributed\n")
    backend, name, d = run_job(tmp_path, source_dir=str(code), entry="train.py", instance_count=1,
                               framework="sklearn", version="1.2-1")
    assert d["TrainingJobStatus"] == "Failed"
    assert ("ModuleNotFoundError: No module named 'sagemaker_xgboost_container'"
            in d["FailureReason"]), d["FailureReason"]
