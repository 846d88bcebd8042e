"""The operators' argument tables (specs/arguments.py) say what the builders' dataclasses say."""

from __future__ import annotations

import dataclasses
import inspect

from airflow_smdist.specs import arguments


def test_the_tables_are_what_the_dataclasses_generate():
    with open(arguments.__file__) as f:
        text = f.read()
    assert arguments.current_tables(text) == arguments.generated_tables(), (
        "specs/arguments.py is stale: run python -m airflow_smdist.specs.arguments")


def test_each_table_matches_its_dataclass_fields_one_by_one():
    for table, fields in arguments._sources().items():
        rows = getattr(arguments, table)
        assert [(a.name, a.default, a.type) for a in rows] == [(f.name, f.default, f.type) for f in fields], table


def test_operator_signatures_come_from_the_tables():
    from airflow_smdist.operators.processing import SageMakerPySparkProcessingOperator
    from airflow_smdist.operators.training import TRAINING_ARGS, SageMakerDistributedTrainingOperator
    from airflow_smdist.specs.training import TRAINING_ARGS as BUILDER_ARGS

    assert TRAINING_ARGS == BUILDER_ARGS
    params = inspect.signature(SageMakerDistributedTrainingOperator.__init__).parameters
    assert params["instance_type"].default == "ml.m5.xlarge" and params["volume_size"].default == 30
    assert params["role"].default is None  # the operator's own default (require_role checks it per backend)
    assert params["output_path"].default is inspect.Parameter.empty  # required, as in the builder
    spark = inspect.signature(SageMakerPySparkProcessingOperator.__init__).parameters
    assert spark["submit_app"].default is inspect.Parameter.empty
    assert arguments.REQUIRED is dataclasses.MISSING
