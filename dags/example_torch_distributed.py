"""Seed option 2: PyTorch data-parallel training with torch_distributed, scaled learning rate, checkpoints.

Trigger it from the UI with Params, or run it end to end here:

    airflow dags test smdist_torch_distributed

The default backend is ``local`` (runs on this machine: two simulated hosts, torchrun, gloo). Set the
``smdist_default`` connection's extra to {"backend": "sagemaker"} (or SMDIST_BACKEND=sagemaker), and the
``data_uri`` / ``output_uri`` / ``role`` params to your S3 prefixes and execution role, to run the same DAG
on SageMaker.
"""

from __future__ import annotations

import os

import pendulum

try:  # Airflow 3
    from airflow.sdk import DAG, Param, task
except ImportError:  # Airflow 2.10 / 2.11
    from airflow import DAG
    from airflow.decorators import task
    from airflow.models.param import Param

from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
from airflow_smdist.params import (
    deferrable_param,
    instance_type_param,
    role_param,
    storage_param,
)

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL_DATA = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "smdist-data")

with DAG(
    dag_id="smdist_torch_distributed",
    description="PyTorch torch_distributed training on 2 hosts with the linear LR scaling rule and checkpoints",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smdist", "option-2", "pytorch"],
    params={
        "data_uri": storage_param(f"{LOCAL_DATA}/regression",
                                  "Prefix the generated training data is written to and read from."),
        "output_uri": storage_param(f"{LOCAL_DATA}/output", "S3OutputPath of the training job (model, checkpoints)."),
        "role": role_param(),
        "instance_type": instance_type_param("ml.m5.xlarge"),
        "instance_count": Param(2, type="integer", minimum=1, maximum=16, description="Hosts (scale up before out)."),
        "epochs": Param(4, type="integer", minimum=1, description="Passes over the training data."),
        "per_device_batch_size": Param(32, type="integer", minimum=1,
                                       description="Batch size of each worker process; the global batch is this "
                                                   "x the world size (hosts x processes per host)."),
        "base_learning_rate": Param(0.01, type="number", exclusiveMinimum=0,
                                    description="Learning rate tuned at base_batch_size; scaled for the global batch."),
        "base_batch_size": Param(32, type="integer", minimum=1,
                                 description="Batch size base_learning_rate was tuned at; the learning rate is "
                                             "scaled by global batch / base_batch_size (linear scaling rule)."),
        "deferrable": deferrable_param(),
        "rows": Param(4000, type="integer", minimum=100, description="Generated training rows."),
        "files": Param(8, type="integer", minimum=1, description="Generated CSV objects (sharded over hosts)."),
    },
    render_template_as_native_obj=True,
) as dag:

    @task
    def generate_data(data_uri: str, rows: int, files: int) -> str:
        """y = 3 x0 - 2 x1 + 0.5 x2 + noise, written as several CSV objects under data_uri."""
        import random

        from airflow_smdist.storage import Storage, join_uri

        rng = random.Random(42)
        storage = Storage()
        per_file = rows // files
        for part in range(files):
            lines = []
            for _ in range(per_file):
                x = [rng.uniform(-1, 1) for _ in range(3)]
                y = 3 * x[0] - 2 * x[1] + 0.5 * x[2] + rng.gauss(0, 0.05)
                lines.append(",".join(f"{v:.6f}" for v in [*x, y]))
            storage.write_bytes(("\n".join(lines) + "\n").encode(), join_uri(data_uri, f"part-{part:04d}.csv"))
        return data_uri

    data = generate_data("{{ params.data_uri }}", "{{ params.rows }}", "{{ params.files }}")

    train = SageMakerDistributedTrainingOperator(
        task_id="train",
        entry_point="train.py",
        source_dir=os.path.join(HERE, "scripts", "torch_ddp"),
        framework="pytorch",
        framework_version="2.5",
        py_version="py311",
        instance_type="{{ params.instance_type }}",
        instance_count="{{ params.instance_count }}",
        distribution={"torch_distributed": {"enabled": True}},
        inputs={"train": {"s3_uri": "{{ ti.xcom_pull(task_ids='generate_data') }}", "distribution": "ShardedByS3Key"}},
        output_path="{{ params.output_uri }}",
        checkpoint_s3_uri="{{ params.output_uri }}/checkpoints/{{ run_id | replace(':', '-') | replace('+', '-') }}",
        role="{{ params.role }}",
        hyperparameters={"epochs": "{{ params.epochs }}", "batch_size": "{{ params.per_device_batch_size }}"},
        lr_scaling={"base_learning_rate": "{{ params.base_learning_rate }}",
                    "base_batch_size": "{{ params.base_batch_size }}",
                    "per_device_batch_size": "{{ params.per_device_batch_size }}", "warmup_epochs": 1},
        metric_definitions=[{"Name": "train:loss", "Regex": r"train_loss=([0-9.eE+-]+)"}],
        max_run=3600,
        poll_interval=2,
        deferrable="{{ params.deferrable }}",  # chosen per run in the trigger form
    )
    data >> train

    @task
    def report(result: dict) -> dict:
        """Check the artifact landed and the loss went down; this is what a downstream task consumes."""
        from airflow_smdist.storage import Storage

        if not Storage().exists(result["model_artifacts"]):
            raise RuntimeError(f"model artifact missing: {result['model_artifacts']}")
        print(f"job {result['job_name']}: {result['final_metrics']} -> {result['model_artifacts']}")
        print(f"learning rate scaled for world size: {result.get('lr_scaling')}")
        return {"model": result["model_artifacts"], "loss": result["final_metrics"].get("train:loss")}

    report(train.output)
