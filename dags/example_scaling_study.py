"""Seed option 2: does scaling out pay? The torch_distributed example job on 1, 2 and 4 hosts, compared.

Trigger it from the UI, or run it end to end here:

    airflow dags test smdist_scaling_study

Each configuration is a real, short training job (the same script as ``smdist_torch_distributed``), with
the learning rate rescaled for its global batch by the linear scaling rule. Every job's result carries its
insight (loss curve, per-host CPU and bytes read, a PNG next to its output); the ``study.report`` task
compares throughput (the script's ``samples_per_sec``), scaling efficiency (speed-up / hosts), time to a
target loss and cost per run, logs a table, draws speed-up and efficiency against hosts, and returns the
recommended configuration. On a laptop or a small worker, every simulated host shares the same few cores, so
the numbers say more about the machine than about SageMaker: run the study on SageMaker (backend and URI
params) to choose instances; run it here to check the DAG.
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

from airflow_smdist.operators.scaling import scaling_study
from airflow_smdist.params import deferrable_param, role_param, storage_param

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL_DATA = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "smdist-data")
#: on-demand $/hour of the instance types in the study (yours: from the AWS price list; never fetched here)
PRICES = {"ml.m5.xlarge": 0.23, "ml.c5.2xlarge": 0.408, "ml.g5.xlarge": 1.408}

with DAG(
    dag_id="smdist_scaling_study",
    description="The same training job on 1, 2 and 4 hosts: speed-up, scaling efficiency, time to target, cost",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smdist", "option-2", "pytorch", "scaling"],
    params={
        "data_uri": storage_param(f"{LOCAL_DATA}/scaling",
                                  "Prefix the generated training data is written to and read from."),
        "output_uri": storage_param(f"{LOCAL_DATA}/scaling-output",
                                    "S3OutputPath of every job of the study, and of the study's report and plot."),
        "role": role_param(),
        "deferrable": deferrable_param(),
        "epochs": Param(2, type="integer", minimum=1, description="Epochs of every job in the study."),
        "per_device_batch_size": Param(32, type="integer", minimum=1,
                                       description="Batch size per process; the global batch grows with the hosts."),
        "target_loss": Param(0.05, type="number", exclusiveMinimum=0,
                             description="Training loss whose first crossing times each configuration."),
        "rows": Param(2400, type="integer", minimum=100, description="Generated training rows."),
    },
    render_template_as_native_obj=True,
) as dag:

    @task
    def generate_data(data_uri: str, rows: int) -> str:
        """y = 3 x0 - 2 x1 + 0.5 x2 + noise, as 12 CSV objects (a multiple of 1, 2 and 4 hosts: even shards)."""
        import random

        from airflow_smdist.storage import Storage, join_uri

        rng = random.Random(7)
        storage = Storage()
        files = 12
        for part in range(files):
            lines = []
            for _ in range(rows // files):
                x = [rng.uniform(-1, 1) for _ in range(3)]
                lines.append(",".join(f"{v:.6f}" for v in [*x, 3 * x[0] - 2 * x[1] + 0.5 * x[2] + rng.gauss(0, 0.05)]))
            storage.write_bytes(("\n".join(lines) + "\n").encode(), join_uri(data_uri, f"part-{part:04d}.csv"))
        # a folder: the prefix ".../scaling" alone would also match ".../scaling-output/...", and the jobs'
        # own outputs (models, plots) would end up in the next jobs' channel, unevenly (S3 prefix semantics)
        return data_uri.rstrip("/") + "/"

    data = generate_data("{{ params.data_uri }}", "{{ params.rows }}")

    study = scaling_study(
        "study",
        configurations=[{"instance_count": 1}, {"instance_count": 2}, {"instance_count": 4}],
        throughput_metric="train:samples_per_sec",
        target_metric="train:loss",
        target_value="{{ params.target_loss }}",
        prices=PRICES,
        entry_point="train.py",
        source_dir=os.path.join(HERE, "scripts", "torch_ddp"),
        framework="pytorch",
        framework_version="2.5",
        py_version="py311",
        instance_type="ml.m5.xlarge",
        distribution={"torch_distributed": {"enabled": True}},
        inputs={"train": {"s3_uri": "{{ ti.xcom_pull(task_ids='generate_data') }}", "distribution": "ShardedByS3Key"}},
        output_path="{{ params.output_uri }}",
        role="{{ params.role }}",
        hyperparameters={"epochs": "{{ params.epochs }}", "batch_size": "{{ params.per_device_batch_size }}"},
        lr_scaling={"base_learning_rate": 0.01, "base_batch_size": 32,
                    "per_device_batch_size": "{{ params.per_device_batch_size }}", "warmup_epochs": 1},
        metric_definitions=[{"Name": "train:loss", "Regex": r"train_loss=([0-9.eE+-]+)"},
                            {"Name": "train:samples_per_sec", "Regex": r"samples_per_sec=([0-9.eE+-]+)"}],
        # a tiny model: one OpenMP thread per process, so simulated hosts sharing this machine's cores do not
        # oversubscribe them (spinning OpenMP threads would make the 1-host baseline look many times slower)
        environment={"OMP_NUM_THREADS": "1"},
        max_run=1800,
        poll_interval=2,
        deferrable="{{ params.deferrable }}",
    )
    data >> study

    @task
    def recommend(result: dict) -> dict:
        """What a downstream task consumes: the configuration to buy, and why."""
        print(result["verdict"])
        for row in result["configurations"]:
            print(f"{row['task_id']}: speed-up {row.get('speedup')}, efficiency {row.get('efficiency')}, "
                  f"to target {row.get('time_to_target')} s, cost ${row.get('cost')}")
        print(f"plot: {result['plot_uri']}")
        return {"recommended": (result["recommended"] or {}).get("task_id"), "plot": result["plot_uri"]}

    recommend(dag.get_task("study.report").output)
