"""Secret hyperparameters never reach the UI's Rendered Template (rendered_task_instance_fields), on every
Airflow line (issue 12, Secrets). The task runner sends the rendered fields right after rendering, BEFORE
execute(): render a real task instance's templates and serialize its fields as each line's runner does."""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timezone

from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS
from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rendered_fields(op, params: dict) -> dict:
    """What the worker stores as the task instance's rendered fields (shown as Rendered Template)."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance, _serialize_rendered_fields

        ti = RuntimeTaskInstance.model_construct(task=op, task_id=op.task_id, dag_id="secret_render", run_id="r",
                                                 try_number=1, map_index=-1, id=uuid.uuid4())
        ti.render_templates(context={"ti": ti, "params": params, "task": op})
        return json.loads(json.dumps(_serialize_rendered_fields(ti.task)))
    from airflow.models import DAG, TaskInstance  # Airflow 2
    from airflow.models.renderedtifields import RenderedTaskInstanceFields

    dag = DAG(dag_id="secret_render", schedule=None, start_date=datetime(2024, 1, 1, tzinfo=timezone.utc))
    dag.add_task(op)
    ti = TaskInstance(task=op, run_id="r")
    ti.render_templates(context={"ti": ti, "params": params, "task": op})
    return json.loads(json.dumps(RenderedTaskInstanceFields(ti=ti, render_templates=False).rendered_fields))


def test_secret_hyperparameters_are_masked_in_the_rendered_template_fields():
    secret = f"pin-{uuid.uuid4().hex}"  # never registered with the masker before rendering
    op = SageMakerDistributedTrainingOperator(
        task_id="train", entry_point="echo_args.py", source_dir=os.path.join(REPO, "tests", "fixtures", "faults"),
        image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", output_path="file:///tmp/out",
        hyperparameters={"licence_code": "{{ params.pin }}", "epochs": 2}, secret_hyperparameters=["licence_code"])
    fields = _rendered_fields(op, {"pin": secret})
    # the job itself gets the value: the request is built from the task's training arguments (no connection
    # lookup here: this test runs without a metadata database)
    from airflow_smdist.specs.training import build_training

    arguments = {**op.training_arguments(), "role": "arn:aws:iam::123456789012:role/R"}
    request = build_training(job_name="j", region="us-east-1", **arguments).request
    assert request["HyperParameters"]["licence_code"] == json.dumps(secret)
    assert fields["hyperparameters"] == {"licence_code": "***", "epochs": 2}
    # Airflow 3.0's runner sends serialize_template_field(getattr(task, field)) unredacted: the field itself
    # must not hold the value
    assert secret not in json.dumps(op.hyperparameters)
    assert secret not in json.dumps(fields)
