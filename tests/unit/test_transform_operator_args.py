"""The batch inference operator and its planner and merge steps: arguments declared once (one table each), from
which their signatures, attributes and template fields come."""

from __future__ import annotations

import inspect

from airflow_smdist.operators import transform
from airflow_smdist.operators.transform import (
    BATCH_ARGS,
    BATCH_OPERATOR_ARGS,
    BATCH_OPTIONS,
    RECORD_ARGS,
    STEP_OPERATOR_ARGS,
    SageMakerBatchInferenceMergeOperator,
    SageMakerBatchShardPlanOperator,
    SageMakerShardedBatchInferenceOperator,
)
from airflow_smdist.specs.arguments import REQUIRED


def _distinct_values(table):
    """A value per argument that no default has, so that each attribute shows where it came from."""
    return {a.name: f"value-of-{a.name}" for a in table}


def test_the_operator_takes_each_argument_of_its_table_as_an_attribute():
    params = inspect.signature(SageMakerShardedBatchInferenceOperator.__init__).parameters
    assert [p for p in params if p not in ("self", "kwargs")] == [a.name for a in BATCH_OPERATOR_ARGS]
    for a in BATCH_OPERATOR_ARGS:
        assert params[a.name].default == (inspect.Parameter.empty if a.default is REQUIRED else a.default), a.name
    values = {**_distinct_values(BATCH_OPERATOR_ARGS), "fan_out": "jobs", "shard": None}
    op = SageMakerShardedBatchInferenceOperator(task_id="b", **values)
    assert {a.name: getattr(op, a.name) for a in BATCH_OPERATOR_ARGS} == values
    defaults = SageMakerShardedBatchInferenceOperator(task_id="d", input_uri="s3://b/i", output_uri="s3://b/o")
    assert {a.name: getattr(defaults, a.name) for a in BATCH_OPERATOR_ARGS if a.default is not REQUIRED} == {
        a.name: a.default for a in BATCH_OPERATOR_ARGS if a.default is not REQUIRED}
    assert defaults.kind == "transform"
    processing = SageMakerShardedBatchInferenceOperator(task_id="p", input_uri="s3://b/i", output_uri="s3://b/o",
                                                        fan_out="processing")
    assert processing.kind == "processing"


def test_the_templated_arguments_are_the_table_less_the_options():
    fields = SageMakerShardedBatchInferenceOperator.template_fields
    assert fields == ("job_name", "backend", "deferrable", *(a.name for a in BATCH_ARGS), *RECORD_ARGS)
    assert not {a.name for a in BATCH_OPTIONS} & set(fields)  # program, shard_retries, ... are not templated
    assert fields[3:9] == ("input_uri", "output_uri", "fan_out", "model_name", "model_data", "image_uri")


def test_the_steps_take_every_record_setting_and_their_own_arguments():
    values = {**_distinct_values(STEP_OPERATOR_ARGS), "model": None}
    for cls in (SageMakerBatchShardPlanOperator, SageMakerBatchInferenceMergeOperator):
        op = cls(task_id="s", **values)
        assert {a.name: getattr(op, a.name) for a in STEP_OPERATOR_ARGS} == values, cls.__name__
    assert transform._STEP_ARGS == ("backend", "smdist_conn_id", "aws_conn_id", "region_name", "check_records")


def test_default_args_reach_the_table_arguments():
    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk import DAG
    else:
        from airflow import DAG
    with DAG("d", schedule=None, default_args={"instance_count": 3, "split_type": "Line", "shard_retries": 5}):
        op = SageMakerShardedBatchInferenceOperator(task_id="t", input_uri="s3://b/i", output_uri="s3://b/o")
    assert (op.instance_count, op.split_type, op.shard_retries) == (3, "Line", 5)
