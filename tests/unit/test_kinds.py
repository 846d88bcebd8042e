"""The job-kind registry against botocore's SageMaker service model, and each kind's local module against
the LocalJobKind protocol: a typo in a registry entry fails here, not in a DAG."""

from __future__ import annotations

import botocore.session
import pytest

from airflow_smdist.backends.local import LocalBackend, LocalJobKind
from airflow_smdist.kinds import GENERIC_SENSOR_MODULE, KINDS, JobKindInfo, kind_info, load

MODEL = botocore.session.get_session().get_service_model("sagemaker")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_operation_and_key_is_the_service_models(kind):
    info = KINDS[kind]
    assert set(MODEL.operation_names) >= {info.create_op, info.describe_op, info.stop_op, info.list_op}
    assert info.name_key in MODEL.operation_model(info.create_op).input_shape.members
    described = MODEL.operation_model(info.describe_op).output_shape.members
    assert {info.name_key, info.status_key, info.arn_key} <= set(described)
    listed = MODEL.operation_model(info.list_op).output_shape.members
    assert info.summaries_key in listed
    summary = listed[info.summaries_key].member.members
    assert {info.name_key, info.status_key} <= set(summary)
    assert info.method("list") == {"training": "list_training_jobs", "processing": "list_processing_jobs",
                                   "transform": "list_transform_jobs",
                                   "tuning": "list_hyper_parameter_tuning_jobs"}[kind]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_named_piece_of_code_exists(kind):
    info = KINDS[kind]
    module = load(info.local_module)
    assert isinstance(module, LocalJobKind)
    assert module.OPERATION == info.create_op
    assert callable(load(info.result_function)) and callable(load(info.lineage_function))
    for link in info.links:
        module_name, _, cls = link.rpartition(".")
        assert getattr(load(module_name), cls).name
    assert load(info.sensor_module)
    operators = load(info.operator)
    assert any(getattr(v, "kind", None) == kind for v in vars(operators).values() if isinstance(v, type))


def test_the_provider_info_lists_the_registrys_operators_and_sensors():
    from airflow_smdist import get_provider_info

    info = get_provider_info()
    operators = info["operators"][0]["python-modules"]
    assert operators == [k.operator for k in KINDS.values()] + ["airflow_smdist.operators.workflows"]
    assert info["sensors"][0]["python-modules"] == [k.sensor for k in KINDS.values()]


def test_a_kind_with_only_the_required_facts_gets_a_result_no_lineage_and_the_generic_sensor(tmp_path):
    """What a new kind gets before it writes its own result, lineage or sensor (here: a bare entry for the
    training API, and a description shaped as DescribeTrainingJob answers)."""
    from airflow_smdist.sensors.base import SmdistJobSensor

    bare = JobKindInfo(name="training", noun="TrainingJob", log_group="/aws/sagemaker/TrainingJobs",
                       arn_resource="training-job", local_module="airflow_smdist.backends.local.job.training",
                       operator="airflow_smdist.operators.training")
    description = {"TrainingJobName": "j", "TrainingJobArn": "arn:x", "TrainingJobStatus": "Failed",
                   "FailureReason": "AlgorithmError: boom", "InputDataConfig": []}
    assert bare.result(description, LocalBackend(tmp_path)) == {
        "job_name": "j", "job_arn": "arn:x", "status": "Failed", "backend": "local",
        "failure_reason": "AlgorithmError: boom"}
    assert bare.lineage(description) == ([], [])
    assert bare.sensor_module == GENERIC_SENSOR_MODULE == SmdistJobSensor.__module__
    sensor = SmdistJobSensor(task_id="watch", job_name="j", kind="processing")
    assert sensor.kind == "processing"
    with pytest.raises(ValueError, match="'endpoint' is not one of"):
        SmdistJobSensor(task_id="watch2", job_name="j", kind="endpoint")


def test_an_unknown_kind_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="'endpoint' is not one of"):
        kind_info("endpoint")
    with pytest.raises(ValueError, match="'endpoint' is not one of"):
        LocalBackend(tmp_path).describe("endpoint", "x")
    arn = LocalBackend(tmp_path, region_name="eu-west-1").arn("tuning", "HPO-1")
    assert arn == "arn:aws:sagemaker:eu-west-1:000000000000:hyper-parameter-tuning-job/hpo-1"
