"""The tuning operator: its search declared once (specs.tuning.TuningSearch), its training job composed from the
training spec's arguments (as the training operator holds them), not inherited from the training operator."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

from airflow_smdist.operators.training import (
    TRAINING_ARGS,
    SageMakerDistributedTrainingOperator,
    TrainingSpecOperator,
)
from airflow_smdist.operators.tuning import TUNING_ARGS, SmdistTuningOperator
from airflow_smdist.specs.tuning import TuningSearch, build_tuning

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
METRICS = [{"Name": "validation:rmse", "Regex": r"val_rmse=([0-9.eE+-]+)"}]
RANGES = {"learning_rate": {"type": "continuous", "min": 1e-3, "max": 0.5}, "loss": ["a", "b"]}


def operator(**kw):
    args = dict(task_id="tune", role=ROLE, output_path="s3://bucket/out", image_uri=IMAGE,
                entry_point="train.py", source_dir="s3://bucket/src/sourcedir.tar.gz", metric_definitions=METRICS,
                objective_metric_name="validation:rmse", hyperparameter_ranges=RANGES)
    args.update(kw)
    return SmdistTuningOperator(**args)


def test_the_search_is_declared_once_and_the_operator_takes_and_templates_it():
    fields = dataclasses.fields(TuningSearch)
    assert TUNING_ARGS == tuple(f.name for f in fields)
    assert SmdistTuningOperator.template_fields == ("job_name", "backend", "deferrable", *TRAINING_ARGS, *TUNING_ARGS,
                                                    "results_path")
    params = inspect.signature(SmdistTuningOperator.__init__).parameters
    for f in fields:  # the builder's defaults; the required ones are required
        expected = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        assert params[f.name].default == expected, f.name
    # and the training job's arguments are the training operator's (the signature Airflow reads default_args by)
    assert set(TRAINING_ARGS) <= set(params) and params["output_path"].default is inspect.Parameter.empty
    assert {"secret_hyperparameters", "include_runtime", "plot", "results_path"} <= set(params)
    with pytest.raises(TypeError, match="missing required keyword argument 'hyperparameter_ranges'"):
        build_tuning(job_name="j", role=ROLE, output_path="s3://b/o", image_uri=IMAGE, metric_definitions=METRICS,
                     objective_metric_name="validation:rmse")


def test_tuning_composes_the_training_spec_instead_of_inheriting_the_training_operator():
    """The training operator's after-job insight (which describes a training job: a tuning job has no
    TrainingJobName) is no part of the tuning operator, so a failed tuning job logs no "No insight"."""
    assert issubclass(SmdistTuningOperator, TrainingSpecOperator)
    assert not issubclass(SmdistTuningOperator, SageMakerDistributedTrainingOperator)
    op = operator(plot=False)
    assert not hasattr(op, "insight") and not hasattr(op, "job_insight")
    assert op.draws_after_job() is False and operator().draws_after_job() is True  # the objective plot


def test_the_operator_builds_the_tuning_request_of_its_training_and_search_arguments():
    op = operator(instance_count=2, max_run=1200, hyperparameters={"epochs": 3, "token": "s3cr3t"},
                  secret_hyperparameters=["token"], strategy="random", max_jobs="6", max_parallel_jobs=2)
    op.hide_secrets()  # as rendering does: the value leaves the template field, not the request
    assert op.hyperparameters["token"] == "***"
    request = op.plan("hpo-1", "sagemaker").request
    definition = request["TrainingJobDefinition"]
    assert definition["ResourceConfig"]["InstanceCount"] == 2
    assert definition["StoppingCondition"]["MaxRuntimeInSeconds"] == 1200
    assert definition["StaticHyperParameters"]["token"] == json.dumps("s3cr3t")
    cfg = request["HyperParameterTuningJobConfig"]
    assert cfg["Strategy"] == "Random"
    assert cfg["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 6, "MaxParallelTrainingJobs": 2}
    built = build_tuning(job_name="hpo-1", region=op.hook.region_name, allow_local_uris=False,
                         **op.training_arguments(), **op.search_arguments()).request
    # and the job records which hyperparameters are secret (names only), for the job page and the CLI
    secret_tag = {"Key": "smdist:secret-hyperparameters", "Value": "token"}
    assert request == {**built, "Tags": [*built.get("Tags", []), secret_tag]}


def test_default_args_reach_the_search_and_the_training_arguments():
    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk import DAG
    else:
        from airflow import DAG
    with DAG("d", schedule=None, default_args={"max_parallel_jobs": 3, "instance_count": 2,
                                               "output_path": "s3://b/o"}):
        op = SmdistTuningOperator(task_id="t", image_uri=IMAGE, objective_metric_name="m",
                                  hyperparameter_ranges=RANGES)
    assert op.max_parallel_jobs == 3 and op.instance_count == 2 and op.output_path == "s3://b/o"


def test_the_training_attributes_the_base_class_types_have_the_builders_types():
    from airflow_smdist.specs.arguments import TRAINING

    types = {a.name: a.type for a in TRAINING}
    declared = {n: t for n, t in TrainingSpecOperator.__annotations__.items() if n in types}
    assert declared and declared == {n: types[n] for n in declared}
