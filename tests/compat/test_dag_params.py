"""The example DAGs' trigger forms explain themselves (issue 18) and let a run choose deferral (issue 16).

Reads the Params as the UI form gets them (the DAG's ParamsDict: value, schema, description)."""

from __future__ import annotations

import inspect
import os
from types import SimpleNamespace

import pytest

try:  # Airflow 3
    from airflow.sdk.exceptions import ParamValidationError
except ImportError:  # Airflow 2
    from airflow.exceptions import ParamValidationError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(REPO, "dags")


@pytest.fixture(scope="module")
def bag():
    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow >= 3.1
    except ImportError:
        from airflow.models.dagbag import DagBag
    extra = {"include_examples": False} if "include_examples" in inspect.signature(DagBag).parameters else {}
    bag = DagBag(dag_folder=DAGS, **extra)
    assert bag.import_errors == {}
    return bag


def params_of(dag):
    return {name: dag.params.get_param(name) for name in dag.params}


def test_every_param_of_every_example_dag_has_a_description(bag):
    missing = [f"{dag_id}.{name}" for dag_id, dag in bag.dags.items()
               for name, param in params_of(dag).items() if not (param.description or "").strip()]
    assert missing == []


def test_instance_types_offer_choices_with_gpu_types_and_every_choice_is_a_sagemaker_type(bag):
    from airflow_smdist.specs.instances import check_instance_type, is_gpu

    seen = 0
    for dag_id, dag in bag.dags.items():
        for name, param in params_of(dag).items():
            if name != "instance_type":
                continue
            seen += 1
            choices = param.schema.get("examples") or param.schema.get("enum")
            assert choices and param.value in choices, f"{dag_id}: a list to pick from, with the default in it"
            assert any(is_gpu(t) for t in choices), f"{dag_id}: GPU types are among the choices"
            for t in choices:
                check_instance_type(t, f"{dag_id}.instance_type", "training")
            with pytest.raises(ParamValidationError):  # a typo is refused by the form's schema
                param.resolve("ml.m5.xlarg e")
    assert seen >= 5


def test_file_defaults_say_they_are_the_local_backends_scratch_space(bag):
    for dag_id, dag in bag.dags.items():
        for name, param in params_of(dag).items():
            if str(param.value).startswith("file://"):
                assert "local backend's scratch space" in param.description, f"{dag_id}.{name}"
                assert "s3://" in param.description, f"{dag_id}.{name}: says what to give for SageMaker"


@pytest.mark.parametrize("dag_id,task_ids", [("smdist_torch_distributed", ["train"]),
                                             ("smdist_many_jobs", ["fan_out", "long_training"])])
def test_a_run_chooses_deferrable_through_a_param(bag, dag_id, task_ids):
    from airflow_smdist.specs.errors import SpecError

    dag = bag.dags[dag_id]
    assert dag.params.get_param("deferrable").schema["type"] == "boolean"
    for task_id in task_ids:
        task = dag.get_task(task_id)
        assert "deferrable" in task.template_fields
        raw = task.partial_kwargs["deferrable"] if hasattr(task, "partial_kwargs") else task.deferrable
        assert raw == "{{ params.deferrable }}"
    task = dag.get_task(task_ids[0])
    if hasattr(task, "partial_kwargs"):
        return  # a mapped task renders the same template field in each mapped instance
    for chosen, expected in ((True, True), (False, False), ("false", False)):
        op = task.prepare_for_execution() if hasattr(task, "prepare_for_execution") else task
        op.deferrable = "{{ params.deferrable }}"
        ti = SimpleNamespace(xcom_pull=lambda **kwargs: "file:///tmp/data")
        op.render_template_fields({"params": {**dag.params, "deferrable": chosen}, "ti": ti, "run_id": "r"})
        op.pre_execute({"params": {"deferrable": chosen}})
        assert op.deferrable is expected
    op.deferrable = "maybe"
    with pytest.raises(SpecError, match="deferrable"):
        op.pre_execute({})
