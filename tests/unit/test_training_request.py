"""training_request: the SDK's request shape, validated against botocore's model, errors that name the fix."""

from __future__ import annotations

import json

import pytest

from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.training import build_training, training_request
from airflow_smdist.specs.validate import validate_request

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
BASE = dict(job_name="job-1", role=ROLE, output_path="s3://bucket/out")


def script(**kw):
    args = dict(BASE, entry_point="train.py", source_dir="/src", framework="pytorch", framework_version="2.5.1",
                py_version="py311", instance_type="ml.g5.12xlarge", instance_count=2)
    args.update(kw)
    return build_training(**args)


def test_script_mode_request_fields():
    """Where each argument of a torch_distributed script-mode job lands, written out by hand; the comparison
    with the SDK's own request for the same intent is test_sdk_v2_parity.test_pytorch_torchrun_matches_the_sdk."""
    plan = script(hyperparameters={"epochs": 3, "lr": 0.1, "optimizer": "adam", "amp": True},
                  inputs={"train": {"s3_uri": "s3://bucket/train", "distribution": "ShardedByS3Key",
                                    "input_mode": "FastFile"},
                          "validation": "s3://bucket/val"},
                  checkpoint_s3_uri="s3://bucket/ckpt",
                  metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
                  distribution={"torch_distributed": {"enabled": True}}, region="eu-west-1")
    req = plan.request
    assert req["AlgorithmSpecification"] == {
        "TrainingImage": "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311",
        "TrainingInputMode": "File", "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]}
    hps = req["HyperParameters"]
    # every value JSON-encoded (script mode)
    assert hps["epochs"] == "3" and hps["lr"] == "0.1" and hps["optimizer"] == '"adam"' and hps["amp"] == "true"
    assert hps["sagemaker_program"] == '"train.py"'
    assert json.loads(hps["sagemaker_submit_directory"]) == "s3://bucket/out/job-1/source/sourcedir.tar.gz"
    assert hps["sagemaker_container_log_level"] == "20" and hps["sagemaker_region"] == '"eu-west-1"'
    assert hps["sagemaker_job_name"] == '"job-1"'
    assert hps["sagemaker_torch_distributed_enabled"] == "true"
    assert hps["sagemaker_instance_type"] == '"ml.g5.12xlarge"'
    assert req["ResourceConfig"] == {"InstanceType": "ml.g5.12xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30}
    train, val = req["InputDataConfig"]
    assert train == {"ChannelName": "train", "InputMode": "FastFile", "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": "s3://bucket/train", "S3DataDistributionType": "ShardedByS3Key"}}}
    assert val["DataSource"]["S3DataSource"]["S3DataDistributionType"] == "FullyReplicated"
    assert req["CheckpointConfig"] == {"S3Uri": "s3://bucket/ckpt"}
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400}
    assert plan.source_dir == "/src" and plan.source_uri == "s3://bucket/out/job-1/source/sourcedir.tar.gz"
    validate_request("CreateTrainingJob", req, allow_local_uris=False)


def test_entry_point_alone_is_packed_by_itself():
    plan = build_training(**BASE, entry_point="/home/me/scripts/train.py",
                          image_uri="1.dkr.ecr.us-east-1.amazonaws.com/x:1")
    assert plan.request["HyperParameters"]["sagemaker_program"] == '"train.py"'
    assert plan.source_dir == "/home/me/scripts/train.py"


def test_code_location_and_s3_source_dir():
    plan = script(code_location="s3://code-bucket/prefix")
    assert plan.source_uri == "s3://code-bucket/prefix/job-1/source/sourcedir.tar.gz"
    plan = script(source_dir="s3://b/src/sourcedir.tar.gz")
    assert plan.source_dir is None  # nothing to upload
    assert json.loads(plan.request["HyperParameters"]["sagemaker_submit_directory"]) == "s3://b/src/sourcedir.tar.gz"


def test_network_isolation_moves_the_code_into_a_channel():
    req = script(enable_network_isolation=True, encrypt_inter_container_traffic=True).request
    assert req["EnableNetworkIsolation"] is True and req["EnableInterContainerTrafficEncryption"] is True
    assert (json.loads(req["HyperParameters"]["sagemaker_submit_directory"])
            == "/opt/ml/input/data/code/sourcedir.tar.gz")
    code = req["InputDataConfig"][0]
    assert code["ChannelName"] == "code"
    assert code["DataSource"]["S3DataSource"]["S3Uri"] == "s3://bucket/out/job-1/source/sourcedir.tar.gz"


def test_spot_vpc_retry_environment_tags():
    req = script(use_spot_instances=True, max_run=3600, max_wait=7200, checkpoint_s3_uri="s3://b/c",
                 subnets=["subnet-1"], security_group_ids=["sg-1"], max_retry_attempts=2,
                 environment={"A": 1}, tags={"team": "ml"}).request
    assert req["EnableManagedSpotTraining"] is True
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200}
    assert req["VpcConfig"] == {"Subnets": ["subnet-1"], "SecurityGroupIds": ["sg-1"]}
    assert req["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    assert req["Environment"] == {"A": "1"} and req["Tags"] == [{"Key": "team", "Value": "ml"}]


def test_builtin_algorithm_image_and_plain_hyperparameters():
    req = training_request(**BASE, algorithm="xgboost", algorithm_version="1.7-1", instance_type="ml.m5.xlarge",
                           instance_count=2, hyperparameters={"max_depth": 5, "objective": "reg:squarederror"},
                           inputs={"train": "s3://b/train"})
    assert req["AlgorithmSpecification"]["TrainingImage"] == \
        "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"
    assert req["HyperParameters"] == {"max_depth": "5", "objective": "reg:squarederror"}  # not JSON-quoted


def test_builtin_algorithm_that_cannot_scale_out_is_refused():
    with pytest.raises(SpecError) as info:
        training_request(**BASE, algorithm="object2vec", instance_type="ml.p3.2xlarge", instance_count=2)
    assert "instance_count" in str(info.value)


def test_jinja_rendered_strings_are_coerced():
    req = script(instance_count="4", max_run="7200", volume_size="50").request
    assert req["ResourceConfig"]["InstanceCount"] == 4 and req["StoppingCondition"]["MaxRuntimeInSeconds"] == 7200
    assert req["ResourceConfig"]["VolumeSizeInGB"] == 50
    req = script(framework_version=2.5, py_version="py311").request  # native rendering made it a float
    assert req["AlgorithmSpecification"]["TrainingImage"].endswith("pytorch-training:2.5-gpu-py311")


def test_learning_rate_scaled_with_the_global_batch():
    plan = script(instance_type="ml.g5.12xlarge", instance_count=2,
                  distribution={"torch_distributed": {"enabled": True}},
                  # torchrun: 4 GPUs x 2 hosts = 8 workers
                  lr_scaling={"base_learning_rate": 0.1, "base_batch_size": 256, "per_device_batch_size": 64,
                              "warmup_epochs": 5, "hyperparameter": "lr"})
    assert plan.world_size == 8
    assert plan.lr_scaling.global_batch_size == 512
    assert plan.lr_scaling.learning_rate == pytest.approx(0.2)
    hps = plan.request["HyperParameters"]
    assert float(hps["lr"]) == pytest.approx(0.2) and float(hps["warmup_epochs"]) == 5
    with pytest.raises(SpecError, match="also computed by lr_scaling"):
        script(hyperparameters={"learning_rate": 1.0},
               lr_scaling={"base_learning_rate": 0.1, "base_batch_size": 256, "per_device_batch_size": 64})


def test_multi_host_spot_job_without_checkpoints_warns(caplog):
    caplog.set_level("WARNING", logger="airflow_smdist.specs")
    plan = script(instance_count=2, use_spot_instances=True)
    assert any(a.code == "no-checkpoint" and "managed spot job" in a.message for a in plan.advice)
    assert "checkpoint" in caplog.text
    plan = script(instance_count=2, use_spot_instances=True, checkpoint_s3_uri="s3://b/ckpt")
    assert not any("checkpoint_s3_uri" in a.message for a in plan.advice)
    # an on-demand job is told after a long run (insight), not warned before every short one
    assert not any(a.code == "no-checkpoint" for a in script(instance_count=2).advice)


@pytest.mark.parametrize("kwargs, field, fragment", [
    (dict(inputs={"train": {"s3_uri": "s3://b/t", "distribution": "Sharded"}}), "inputs['train'].distribution",
     "not a distribution type"),
    (dict(inputs={"train": {"s3uri": "s3://b/t"}}), "inputs['train'].s3uri", "did you mean 's3_uri'"),
    (dict(inputs={"train": {"s3_uri": "s3://b/t", "input_mode": "Stream"}}), "inputs['train'].input_mode", "File"),
    (dict(image_uri="x"), "image_uri", "exactly one of"),
    (dict(instance_count="two"), "instance_count", "not an integer"),
    (dict(instance_count=0), "instance_count", "below 1"),
    (dict(instance_type="ml.g5.13xlarge"), "instance_type", "did you mean 'ml.g5."),
    (dict(use_spot_instances=True, max_run=7200, max_wait=3600), "max_wait", "max_run"),
    (dict(max_wait=3600), "max_wait", "spot"),
    (dict(subnets=["subnet-1"]), "security_group_ids", "both"),
    (dict(hyperparameters={"sagemaker_program": "x.py"}), "hyperparameters['sagemaker_program']", "set by the builder"),
    (dict(entry_point="../outside.py"), "entry_point", "inside source_dir"),
    (dict(job_name="bad_name!"), "CreateTrainingJob.TrainingJobName", "pattern"),
    (dict(output_path="bucket/out"), "CreateTrainingJob.OutputDataConfig.S3OutputPath", "s3://"),
])
def test_bad_input_names_the_field_and_the_fix(kwargs, field, fragment):
    with pytest.raises(SpecError) as info:
        script(**kwargs)
    message = str(info.value)
    assert field in message and fragment in message, message
    assert "Fix:" in message


def test_file_uris_only_pass_for_the_local_backend():
    plan = script(inputs={"train": "file:///data/train"}, output_path="file:///out")
    with pytest.raises(SpecError, match="s3://"):
        validate_request("CreateTrainingJob", plan.request, allow_local_uris=False)


def test_validation_reports_every_problem_at_once():
    req = script().request
    req["ResourceConfig"]["InstanceType"] = "ml.nope"
    req["AlgorithmSpecification"]["TrainingInputMode"] = "Stream"
    req["Bogus"] = 1
    with pytest.raises(SpecError) as info:
        validate_request("CreateTrainingJob", req)
    fields = sorted(e.field for e in info.value.errors)
    assert fields == ["CreateTrainingJob.AlgorithmSpecification.TrainingInputMode", "CreateTrainingJob.Bogus",
                      "CreateTrainingJob.ResourceConfig.InstanceType"]


@pytest.mark.parametrize("framework, version, extra", [
    ("pytorch", "2.5.1", {}), ("tensorflow", "2.16", {}),
    ("huggingface", "4.49.0", {"base_framework_version": "pytorch2.5.1", "instance_type": "ml.g5.xlarge"})])
def test_a_framework_image_without_py_version_is_refused_as_the_sdk_refuses_it(framework, version, extra):
    """The SDK's estimators (fw_utils.validate_version_or_image_args) refuse framework_version without py_version
    and without image_uri; so does the builder, before any request exists, naming the image's Python."""
    fw_utils = pytest.importorskip("sagemaker.core.fw_utils")
    with pytest.raises(ValueError, match="py_version was None"):
        fw_utils.validate_version_or_image_args(version, None, None)
    with pytest.raises(SpecError) as info:
        script(framework=framework, framework_version=version, py_version=None, **extra)
    assert info.value.field == "py_version"
    assert "is required with framework=" in info.value.problem and "py_version=" in info.value.fix, str(info.value)
    fw_utils.validate_version_or_image_args(version, "py311", None)  # with it, both accept
    script(framework=framework, framework_version=version, py_version="py311" if framework != "tensorflow" else
           "py310", **extra)


def test_scikit_learn_and_xgboost_images_default_their_python_as_the_sdk_does():
    for framework, version in (("sklearn", "1.2-1"), ("xgboost", "1.7-1")):
        plan = script(framework=framework, framework_version=version, py_version=None, instance_type="ml.m5.xlarge",
                      instance_count=1)
        image = plan.request["AlgorithmSpecification"]["TrainingImage"]
        assert image.endswith(f":{version}-cpu-py3" if framework == "sklearn" else f"sagemaker-xgboost:{version}")
