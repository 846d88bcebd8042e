"""Requests built here against the requests SageMaker Python SDK 2.x sends for the same intent.

The SDK 2 requests are fixtures (``tests/fixtures/sdk_v2_requests.json``) captured from the SDK's own
botocore clients by ``scripts/make_sdk_fixtures.sh`` (SDK 2 cannot share the test venv with SDK 3, which the
other oracle tests import live); the file names the SDK version that made it. What SDK 2 adds and this
project leaves out on purpose is removed by :func:`sdk_request`, each with its reason.
"""

from __future__ import annotations

import copy
import json
import pathlib

import pytest

from airflow_smdist.specs.training import build_training
from airflow_smdist.specs.tuning import build_tuning

OWN_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own-trainer:1"  # scripts/sdk_fixtures_v2.py's
FIXTURES = json.loads((pathlib.Path(__file__).parents[1] / "fixtures" / "sdk_v2_requests.json").read_text())
ROLE, BUCKET, REGION = FIXTURES["role"], FIXTURES["bucket"], FIXTURES["region"]


def sdk_request(case: str) -> dict:
    """The SDK 2 request, less what it adds and this project does not send:

    * ``DebugHookConfig`` / ``ProfilerConfig`` / ``EnableSageMakerMetricsTimeSeries``: SageMaker Debugger
      and the profiler, which the estimators switch on by default (SDK 3's ModelTrainer does not);
    * ``sagemaker_estimator_class_name`` / ``_module``: the SDK's own bookkeeping to re-create the estimator
      from a tuning job (``HyperparameterTuner.attach``);
    * ``HyperParameterTuningResourceConfig``: the tuner moves ``ResourceConfig`` there; SageMaker takes both
      shapes, and the training definition keeps the training job's ``ResourceConfig`` here;
    * an empty list of one kind of parameter range (``"IntegerParameterRanges": []``): the tuner sends all three
      kinds; the builder sends the kinds it has, which SageMaker reads the same.
    """
    request = copy.deepcopy(FIXTURES["cases"][case]["request"])
    for key in ("DebugHookConfig", "ProfilerConfig"):
        request.pop(key, None)
    request.get("AlgorithmSpecification", {}).pop("EnableSageMakerMetricsTimeSeries", None)
    definition = request.get("TrainingJobDefinition")
    if definition:
        for key in ("sagemaker_estimator_class_name", "sagemaker_estimator_module"):
            definition["StaticHyperParameters"].pop(key, None)
        definition["ResourceConfig"] = definition.pop("HyperParameterTuningResourceConfig")
        ranges = request["HyperParameterTuningJobConfig"]["ParameterRanges"]
        for kind in [k for k, v in ranges.items() if v == []]:
            del ranges[kind]
    return request


@pytest.fixture
def source_dir(tmp_path):
    for rel, text in FIXTURES["sources"].items():
        (tmp_path / rel).write_text(text)
    return str(tmp_path)


def tensorflow(source_dir, **kwargs):
    args = {"role": ROLE, "output_path": f"s3://{BUCKET}/out", "code_location": f"s3://{BUCKET}",
                "entry_point": "train.py", "source_dir": source_dir, "framework": "tensorflow",
                "framework_version": "2.16", "py_version": "py310",
                "hyperparameters": {"epochs": 3, "optimizer": "adam"}, "inputs": {"train": f"s3://{BUCKET}/data/train"},
                "region": REGION, "allow_local_uris": False}
    args.update(kwargs)
    return args


def test_the_fixtures_name_the_sdk_that_made_them():
    assert FIXTURES["sdk"].startswith("sagemaker==2.")


@pytest.mark.parametrize("case,job,instance_type,distribution", [
    ("tf_training", "tf-plain", "ml.c5.xlarge", None),
    ("tf_mpi", "tf-mpi", "ml.p4d.24xlarge", {"mpi": {"enabled": True, "processes_per_host": 8}}),
])
def test_tensorflow_training_sends_model_dir_as_the_sdk_does(source_dir, case, job, instance_type, distribution):
    ours = build_training(**tensorflow(source_dir, job_name=job, instance_type=instance_type, instance_count=2,
                                       distribution=distribution)).request
    assert ours == sdk_request(case)
    expected = "/opt/ml/model" if distribution else f"s3://{BUCKET}/out/{job}/model"
    assert json.loads(ours["HyperParameters"]["model_dir"]) == expected


def test_tensorflow_model_dir_can_be_given_or_switched_off(source_dir):
    given = build_training(**tensorflow(source_dir, job_name="tf-x", model_dir="s3://b/m")).request
    assert given["HyperParameters"]["model_dir"] == '"s3://b/m"'
    off = build_training(**tensorflow(source_dir, job_name="tf-x", model_dir=False)).request
    assert "model_dir" not in off["HyperParameters"]


def test_tensorflow_tuning_matches_the_sdk_tuner(source_dir):
    """model_dir in the trials' static hyperparameters, and numbers in a categorical range sent as the
    JSON encoding of their text ("\\"32\\""), as HyperparameterTuner sends them for framework estimators."""
    ours = build_tuning(**tensorflow(source_dir, job_name="tf-tune", instance_type="ml.c5.xlarge", instance_count=1,
                                     metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}]),
                        objective_metric_name="loss", objective_type="Minimize", max_jobs=4, max_parallel_jobs=2,
                        strategy="Random",
                        hyperparameter_ranges={"batch_size": [32, 64], "optimizer": ["adam", "sgd"],
                                               "layers": {"type": "integer", "min": 1, "max": 4},
                                               "lr": {"type": "continuous", "min": 0.001, "max": 0.1}}).request
    assert ours == sdk_request("tf_tuning")
    (batch,) = [r for r in ours["HyperParameterTuningJobConfig"]["ParameterRanges"]["CategoricalParameterRanges"]
                if r["Name"] == "batch_size"]
    assert batch["Values"] == ['"32"', '"64"']


def test_own_image_tuning_sends_categorical_values_as_plain_text(source_dir):
    """The user's own image in script mode (the SDK's plain ``Estimator`` with ``image_uri`` + ``entry_point``):
    the static hyperparameters are JSON-encoded (script mode), the categorical values are not (``"32"``): the
    tuner JSON-encodes them only for Framework estimators (``framework=`` here)."""
    ours = build_tuning(role=ROLE, output_path=f"s3://{BUCKET}/out", code_location=f"s3://{BUCKET}",
                        job_name="own-tune", entry_point="train.py", source_dir=source_dir, image_uri=OWN_IMAGE,
                        instance_type="ml.c5.xlarge", instance_count=1,
                        hyperparameters={"epochs": 3, "optimizer": "adam", "schedule": "cosine"},
                        inputs={"train": f"s3://{BUCKET}/data/train"}, region=REGION, allow_local_uris=False,
                        metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
                        objective_metric_name="loss", objective_type="Minimize", max_jobs=4, max_parallel_jobs=2,
                        strategy="Random",
                        hyperparameter_ranges={"batch_size": [32, 64], "optimizer": ["adam", "sgd"],
                                               "lr": {"type": "continuous", "min": 0.001, "max": 0.1}}).request
    assert ours == sdk_request("generic_tuning")
    categorical = ours["HyperParameterTuningJobConfig"]["ParameterRanges"]["CategoricalParameterRanges"]
    assert [r["Values"] for r in categorical] == [["32", "64"], ["adam", "sgd"]]
    assert ours["TrainingJobDefinition"]["StaticHyperParameters"]["schedule"] == '"cosine"'


def pytorch(source_dir, **kwargs):
    return build_training(role=ROLE, output_path=f"s3://{BUCKET}/out", code_location=f"s3://{BUCKET}",
                          entry_point="train.py", source_dir=source_dir, framework="pytorch", framework_version="2.5.1",
                          py_version="py311", instance_count=2, region=REGION, allow_local_uris=False,
                          inputs={"train": {"s3_uri": f"s3://{BUCKET}/data/train", "distribution": "ShardedByS3Key",
                                            "input_mode": "FastFile"},
                                  "validation": f"s3://{BUCKET}/data/val"}, **kwargs).request


def test_pytorch_torchrun_matches_the_sdk(source_dir):
    """PyTorch with ``torch_distributed`` (torchrun): hyperparameters (every value JSON-encoded), the
    distribution's, a sharded FastFile channel beside a replicated one, the checkpoint and metrics."""
    ours = pytorch(source_dir, job_name="pt-torchrun", instance_type="ml.g5.12xlarge",
                   distribution={"torch_distributed": {"enabled": True}},
                   hyperparameters={"epochs": 3, "lr": 0.1, "optimizer": "adam", "amp": True},
                   checkpoint_s3_uri=f"s3://{BUCKET}/ckpt",
                   metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}])
    assert ours == sdk_request("pytorch_torchrun")


def test_pytorch_mpi_matches_the_sdk(source_dir):
    ours = pytorch(source_dir, job_name="pt-mpi", instance_type="ml.p4d.24xlarge", hyperparameters={"epochs": 3},
                   distribution={"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": "-verbose"}})
    assert ours == sdk_request("pytorch_mpi")


def test_smp_v2_runs_in_the_model_parallelism_image(source_dir):
    distribution = {"torch_distributed": {"enabled": True},
                    "smdistributed": {"modelparallel": {"enabled": True, "parameters": {"hybrid_shard_degree": 8}}}}
    ours = build_training(role=ROLE, output_path=f"s3://{BUCKET}/out", code_location=f"s3://{BUCKET}",
                          job_name="smp-v2", entry_point="train.py", source_dir=source_dir, framework="pytorch",
                          framework_version="2.3.0", py_version="py310", instance_type="ml.p4d.24xlarge",
                          instance_count=2, hyperparameters={"epochs": 3}, distribution=distribution,
                          inputs={"train": f"s3://{BUCKET}/data/train"}, region=REGION,
                          allow_local_uris=False).request
    assert ours == sdk_request("smp_v2")
    assert "/smdistributed-modelparallel:" in ours["AlgorithmSpecification"]["TrainingImage"]
