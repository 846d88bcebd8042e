"""The training operator takes every argument of the request builder, templated, and hands it on."""

from __future__ import annotations

import inspect
import json

import pytest

from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
from airflow_smdist.specs.training import TRAINING_ARGS, build_training


def test_every_builder_argument_is_an_operator_argument_and_template_field():
    operator = inspect.signature(SageMakerDistributedTrainingOperator.__init__).parameters
    assert set(TRAINING_ARGS) <= set(operator), sorted(set(TRAINING_ARGS) - set(operator))
    assert set(TRAINING_ARGS) <= set(SageMakerDistributedTrainingOperator.template_fields)
    assert operator["output_path"].default is inspect.Parameter.empty  # required, as in the builder
    assert operator["instance_count"].default == 1 and operator["role"].default is None
    with pytest.raises(TypeError, match="unexpected keyword argument 'instance_cnt'"):
        build_training(job_name="j", role="r", output_path="s3://b/o", image_uri="i", instance_cnt=2)


def test_default_args_reach_the_training_arguments():
    """Airflow applies default_args to the arguments the signature names: the spec's are among them."""
    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk import DAG
    else:
        from airflow import DAG
    with DAG("d", schedule=None, default_args={"instance_count": 3, "output_path": "s3://b/o"}):
        op = SageMakerDistributedTrainingOperator(task_id="t", image_uri="i")
    assert op.instance_count == 3 and op.output_path == "s3://b/o"


def test_log_level_model_dir_and_a_v3_distributed_config_reach_the_request(tmp_path):
    op = SageMakerDistributedTrainingOperator(
        task_id="t", output_path="s3://b/out", entry_point="train.py", source_dir="s3://b/src/sourcedir.tar.gz",
        framework="tensorflow", framework_version="2.16", py_version="py310", instance_type="ml.c5.xlarge",
        container_log_level=10, model_dir="s3://b/models", distributed=None,
        role="arn:aws:iam::123456789012:role/R")
    hps = op.plan("job-1", "sagemaker").request["HyperParameters"]
    assert hps["sagemaker_container_log_level"] == "10" and json.loads(hps["model_dir"]) == "s3://b/models"

    Torchrun = pytest.importorskip("sagemaker.train.distributed").Torchrun  # the SDK's v3 config, where installed
    op = SageMakerDistributedTrainingOperator(
        task_id="t2", output_path="s3://b/out", entry_point="train.py", source_dir="s3://b/src/sourcedir.tar.gz",
        image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", instance_count=2, distributed=Torchrun(),
        role="arn:aws:iam::123456789012:role/R")
    assert op.distributed == {"torchrun": {}}  # plain data on the operator (templated, serialized with the DAG)
    hps = op.plan("job-2", "sagemaker").request["HyperParameters"]
    assert hps["sagemaker_torch_distributed_enabled"] == "true"


@pytest.mark.parametrize("names, tag", [(["hf_auth"], "hf_auth"), (["hf_auth", "db.key"], "hf_auth db.key"),
                                        (["bad,name"], "*"), ([f"n{i:03d}" for i in range(70)], "*")])
def test_the_job_records_its_secret_hyperparameters_names_and_the_cli_masks_them(names, tag):
    """The request carries the declared names in a tag SageMaker accepts (botocore's model: a value of at most 256
    of its characters; "*", every hyperparameter, where the names cannot be written there), and the CLI's and the
    job page's masking (cli.jobs.masked, secret_values) hides their values whatever the names look like."""
    from airflow_smdist.cli.jobs import masked, secret_values
    from airflow_smdist.specs.validate import validate_request

    hps = {**{n: f"value-of-{n}" for n in names}, "epochs": 3}
    op = SageMakerDistributedTrainingOperator(
        task_id="t", output_path="s3://b/out", image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
        role="arn:aws:iam::123456789012:role/R", hyperparameters=hps, secret_hyperparameters=names)
    request = op.plan("job-1", "sagemaker").request
    assert {"Key": "smdist:secret-hyperparameters", "Value": tag} in request["Tags"]
    validate_request("CreateTrainingJob", request)
    shown = masked(request)["HyperParameters"]
    assert all(shown[n] == "***" for n in names)
    assert (shown["epochs"] == "***") == (tag == "*")
    assert set(secret_values(request)) >= {f"value-of-{n}" for n in names}
