"""The built-in SageMaker XGBoost algorithm runs on the local backend for real: sharded over 2 hosts, one model."""

from __future__ import annotations

import json
import os
import tarfile
import time
import uuid

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost")

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.specs.builtin_algorithms import metric_definitions
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.training import build_training

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
PARAMS = {"max_depth": 4, "eta": 0.3, "objective": "reg:squarederror"}
ROUNDS = 25


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(tmp_path / "jobs")


def target(x):
    return np.sin(2 * x[:, 0]) + x[:, 1] - 0.5 * x[:, 2]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Four train objects, each over its own range of x0 (so one host's share says nothing about the other's),
    and two validation objects; label first, no header."""
    root = tmp_path_factory.mktemp("xgb-data")
    rng = np.random.default_rng(0)
    for split, n in (("train", 150), ("validation", 40)):
        (root / split).mkdir()
        for i in range(4 if split == "train" else 2):
            x = np.column_stack([rng.uniform(i, i + 1, n), rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)])
            np.savetxt(root / split / f"part-{i}.csv", np.column_stack([target(x), x]), delimiter=",", fmt="%.6f")
    return root


def load(paths):
    block = np.vstack([np.loadtxt(p, delimiter=",", dtype=np.float32, ndmin=2) for p in paths])
    return block[:, 1:], block[:, 0]


def rmse(booster, x, y) -> float:
    return float(np.sqrt(np.mean((booster.predict(xgb.DMatrix(x)) - y) ** 2)))


def plan_for(tmp_path, data, *, name, hps, instance_count=2, validation="ShardedByS3Key", train_uri=None, **kw):
    inputs = {"train": {"s3_uri": train_uri or f"file://{data}/train", "distribution": "ShardedByS3Key",
                        "content_type": "text/csv"},
              "validation": {"s3_uri": f"file://{data}/validation", "distribution": validation,
                             "content_type": "text/csv"}}
    return build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", algorithm="xgboost",
                          algorithm_version="1.7-1", instance_type="ml.m5.xlarge", instance_count=instance_count,
                          hyperparameters=hps, inputs=inputs, **kw)


def run(backend, plan, timeout=180):
    name = backend.submit("training", plan.request)
    deadline = time.time() + timeout
    while time.time() < deadline:
        d = backend.describe("training", name)
        if d["TrainingJobStatus"] in ("Completed", "Failed", "Stopped"):
            return d
        time.sleep(0.3)
    raise AssertionError(f"{name} still running: {(backend.job_dir('training', name) / 'supervisor.log').read_text()}")


def log_lines(backend, name, host):
    path = backend.job_dir("training", name) / "logs" / f"{host}.jsonl"
    return [json.loads(line)["m"] for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_two_hosts_train_one_model_over_every_shard(backend, tmp_path, data):
    name = unique("xgb")
    plan = plan_for(tmp_path, data, name=name, hps={"num_round": ROUNDS, **PARAMS})
    assert "MetricDefinitions" not in plan.request["AlgorithmSpecification"]  # SageMaker refuses them
    d = run(backend, plan)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert [t["Status"] for t in d["SecondaryStatusTransitions"]] == [
        "Starting", "Downloading", "Training", "Uploading", "Completed"]

    # ShardedByS3Key: keys sorted, the i-th to host i % 2; each host reads only its share
    job = backend.job_dir("training", name)
    shares = {h: sorted(os.listdir(job / "hosts" / h / "input" / "data" / "train")) for h in ("algo-1", "algo-2")}
    assert shares == {"algo-1": ["part-0.csv", "part-2.csv"], "algo-2": ["part-1.csv", "part-3.csv"]}

    # the model lands as model.tar.gz with xgboost-model only (the master saves it) and loads
    uri = d["ModelArtifacts"]["S3ModelArtifacts"]
    assert uri == f"file://{tmp_path}/out/{name}/output/model.tar.gz"
    with tarfile.open(uri[len("file://"):]) as tar:
        assert tar.getnames() == ["xgboost-model"]
        booster = xgb.Booster()
        booster.load_model(bytearray(tar.extractfile("xgboost-model").read()))
    assert booster.num_boosted_rounds() == ROUNDS
    assert os.listdir(job / "hosts" / "algo-2" / "model") == []

    # the container's evaluation lines, printed by the master, reach FinalMetricDataList through the
    # algorithm's own metric definitions, which DescribeTrainingJob shows as SageMaker does
    master = log_lines(backend, name, "algo-1")
    last = [line for line in master if line.startswith(f"[{ROUNDS - 1}]#011")]
    assert len(last) == 1 and last[0].startswith(f"[{ROUNDS - 1}]#011train-rmse:")
    assert "#011validation-rmse:" in last[0]
    assert not [line for line in log_lines(backend, name, "algo-2") if "#011train-rmse:" in line]
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert set(metrics) == {"train:rmse", "validation:rmse"}
    assert metrics["validation:rmse"] == float(last[0].split("#011validation-rmse:")[1])
    assert d["AlgorithmSpecification"]["MetricDefinitions"] == metric_definitions("xgboost")

    # one model over all shards: it fits each host's share, which a model of one share cannot do ...
    x0, y0 = load([data / "train" / f for f in shares["algo-1"]])
    x1, y1 = load([data / "train" / f for f in shares["algo-2"]])
    assert rmse(booster, x0, y0) < 0.1 * np.std(y0) and rmse(booster, x1, y1) < 0.1 * np.std(y1)
    host1_only = xgb.train(PARAMS, xgb.DMatrix(x0, label=y0), ROUNDS)
    assert rmse(host1_only, x1, y1) > 10 * rmse(booster, x1, y1)
    # ... and it is the model one process trains on the union (histograms all-reduced across the hosts)
    xu, yu = load(sorted((data / "train").glob("*.csv")))
    union = xgb.train(PARAMS, xgb.DMatrix(xu, label=yu), ROUNDS)
    assert np.allclose(booster.predict(xgb.DMatrix(xu)), union.predict(xgb.DMatrix(xu)), atol=1e-4)
    # the validation metric is over both hosts' validation shares, as the all-reduce computes it
    xv, yv = load(sorted((data / "validation").glob("*.csv")))
    assert abs(rmse(booster, xv, yv) - metrics["validation:rmse"]) < 1e-4


@pytest.mark.parametrize("hps, message", [
    ({"max_depth": 3}, "Missing required hyperparameter: num_round"),
    ({"num_round": 5, "eta": 1.5}, "Hyperparameter eta: 1.5 is not in [0, 1]"),
    ({"num_round": 5, "max_detph": 3}, "Extraneous hyperparameter found: max_detph"),
])
@pytest.mark.slow
def test_invalid_hyperparameters_fail_with_the_containers_message(backend, tmp_path, data, hps, message):
    name = unique("xgb-bad")
    d = run(backend, plan_for(tmp_path, data, name=name, hps=hps))
    assert d["TrainingJobStatus"] == "Failed"
    reason = d["FailureReason"]
    assert reason.startswith("AlgorithmError: framework error: \n")
    assert reason.endswith(f"sagemaker_algorithm_toolkit.exceptions.UserError: {message}\n\n{message}")
    assert "ModelArtifacts" not in d
    # the host that failed first wrote output/failure (the platform then ends the other one)
    failures = [(backend.job_dir("training", name) / "hosts" / h / "output" / "failure") for h in ("algo-1", "algo-2")]
    assert any(f.exists() and f.read_text().endswith(message) for f in failures)


@pytest.mark.slow
def test_a_host_without_data_leaves_and_the_others_train(backend, tmp_path, data):
    # three hosts, two objects: the third host's ShardedByS3Key share is empty
    two = tmp_path / "two"
    two.mkdir()
    for i in (0, 1):
        (two / f"part-{i}.csv").write_bytes((data / "train" / f"part-{i}.csv").read_bytes())
    name = unique("xgb-3")
    d = run(backend, plan_for(tmp_path, data, name=name, hps={"num_round": 10, **PARAMS}, instance_count=3,
                              validation="FullyReplicated", train_uri=f"file://{two}"))
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    third = log_lines(backend, name, "algo-3")
    assert any("does not have training data" in line for line in third)
    assert any("not being used for distributed training" in line for line in third)
    assert {m["MetricName"] for m in d["FinalMetricDataList"]} == {"train:rmse", "validation:rmse"}


def test_what_the_local_backend_refuses(backend, tmp_path, data):
    # other built-in algorithms still need their own container
    kmeans = build_training(job_name=unique("km"), role=ROLE, output_path=f"file://{tmp_path}/out", algorithm="kmeans",
                            instance_type="ml.m5.xlarge", hyperparameters={"k": 3, "feature_dim": 3},
                            inputs={"train": f"file://{data}/train"})
    with pytest.raises(SpecError, match="runs its own container code"):
        backend.submit("training", kmeans.request)
    # SageMaker refuses MetricDefinitions for its own algorithms; so does the local backend
    with pytest.raises(SpecError, match="You can't override the metric definitions for Amazon SageMaker algorithms"):
        backend.submit("training", plan_for(tmp_path, data, name=unique("xgb-md"), hps={"num_round": 5},
                                            metric_definitions=[{"Name": "x", "Regex": "x=(.*)"}]).request)
    # formats the emulation does not read are refused up front
    protobuf = plan_for(tmp_path, data, name=unique("xgb-pb"), hps={"num_round": 5}).request
    protobuf["InputDataConfig"][0]["ContentType"] = "application/x-recordio-protobuf"
    with pytest.raises(SpecError, match="not emulated"):
        backend.submit("training", protobuf)
