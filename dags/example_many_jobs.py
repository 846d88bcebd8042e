"""Seed option 4: many jobs. A fan-out of sub-tasks, a sequence with growing batch sizes, a long chain.

    airflow dags test smdist_many_jobs

1. ``fan_out``: one training job per data segment, each with its own channel, hyperparameters, tags and
   instance type (dynamic task mapping; a retry of one sub-task reattaches to its own job).
2. ``growing_batch``: batch size 32 -> 64 -> 128 over three jobs, each resuming from the previous one's
   checkpoint, the learning rate rescaled for each stage's global batch (linear scaling rule).
3. ``long_training``: a training longer than one job may run, as links of jobs with MaxRuntimeInSeconds,
   each resuming from the checkpoint until the script writes its FINISHED marker.
Runs on the local backend by default; set the smdist connection's backend (or SMDIST_BACKEND) and the
URI params to run it on SageMaker.
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

from airflow_smdist.operators.workflows import (
    SageMakerTrainingChainOperator,
    fan_out_training,
    growing_batch_training,
)
from airflow_smdist.params import deferrable_param, role_param, storage_param

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL_DATA = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "smdist-data")
PYTORCH = dict(framework="pytorch", framework_version="2.5.1", py_version="py311")
#: plain Python (the chain's script imports no torch): the lightest framework image, no torch to fetch
PLAIN = dict(framework="xgboost", framework_version="1.7-1", py_version="py3")

with DAG(
    dag_id="smdist_many_jobs",
    description="Fan-out of sub-tasks, growing batch sizes from checkpoints, a chain past one job's runtime limit",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smdist", "option-4"],
    params={
        "data_uri": storage_param(f"{LOCAL_DATA}/many-jobs", "Where the generated data of every segment goes."),
        "output_uri": storage_param(f"{LOCAL_DATA}/many-jobs-output", "S3OutputPath of every job."),
        "role": role_param(),
        "segments": Param(3, type="integer", minimum=1, maximum=20, description="Fan-out sub-tasks."),
        "chain_units": Param(12, type="integer", minimum=1, description="Work units of the long training."),
        "link_max_run": Param(4, type="integer", minimum=1, maximum=2419200,
                              description="MaxRuntimeInSeconds of each link (28 days at most on SageMaker)."),
        "deferrable": deferrable_param(),
    },
    render_template_as_native_obj=True,
) as dag:

    @task
    def generate(data_uri: str, segments: int) -> list[dict]:
        """A regression data set per segment; returns one sub-task definition per segment."""
        import random

        from airflow_smdist.storage import Storage, join_uri

        storage = Storage()
        subtasks = []
        for s in range(segments):
            rng = random.Random(s)
            for part in range(2):
                rows = []
                for _ in range(400):
                    x = [rng.uniform(-1, 1) for _ in range(3)]
                    rows.append(",".join(f"{v:.5f}" for v in [*x, (s + 1) * x[0] - x[1] + 0.3 * x[2]]))
                storage.write_bytes(("\n".join(rows) + "\n").encode(),
                                    join_uri(data_uri, f"segment-{s}", f"part-{part}.csv"))
            subtasks.append({
                "inputs": {"train": join_uri(data_uri, f"segment-{s}") + "/"},  # a folder: not segment-1x too
                "hyperparameters": {"epochs": 2 + s, "batch_size": 32},
                "instance_type": "ml.m5.xlarge" if s % 2 == 0 else "ml.c5.xlarge",
                "tags": {"segment": str(s)},
            })
        return subtasks

    subtasks = generate("{{ params.data_uri }}", "{{ params.segments }}")

    common = dict(entry_point="train.py", source_dir=os.path.join(HERE, "scripts", "torch_ddp"), **PYTORCH,
                  output_path="{{ params.output_uri }}", role="{{ params.role }}", max_run=3600, poll_interval=2,
                  deferrable="{{ params.deferrable }}",
                  metric_definitions=[{"Name": "train:loss", "Regex": r"train_loss=([0-9.eE+-]+)"}])

    fan_out = fan_out_training("fan_out", subtasks=subtasks, distribution={"torch_distributed": {"enabled": True}},
                               retries=2, **common)

    growing = growing_batch_training(
        "growing_batch",
        stages=[{"batch_size": 32, "epochs": 1}, {"batch_size": 64, "epochs": 1}, {"batch_size": 128, "epochs": 1}],
        lr_scaling={"base_learning_rate": 0.01, "base_batch_size": 32, "warmup_epochs": 0},
        checkpoint_s3_uri="{{ params.output_uri }}/checkpoints/growing/"
                          "{{ run_id | replace(':', '-') | replace('+', '-') }}",
        inputs={"train": {"s3_uri": "{{ params.data_uri }}/segment-0/", "distribution": "ShardedByS3Key"}},
        instance_count=2, distribution={"torch_distributed": {"enabled": True}}, **common)

    chain = SageMakerTrainingChainOperator(
        task_id="long_training",
        entry_point="train.py", source_dir=os.path.join(HERE, "scripts", "long_job"), **PLAIN,
        hyperparameters={"units": "{{ params.chain_units }}", "seconds_per_unit": 0.5},
        inputs={"train": "{{ params.data_uri }}/segment-0/"},
        output_path="{{ params.output_uri }}", role="{{ params.role }}", poll_interval=1,
        max_run="{{ params.link_max_run }}", max_links=10, deferrable="{{ params.deferrable }}",
        checkpoint_s3_uri="{{ params.output_uri }}/checkpoints/chain/"
                          "{{ run_id | replace(':', '-') | replace('+', '-') }}",
        metric_definitions=[{"Name": "progress", "Regex": r"progress=([0-9.]+)"}],
    )

    @task
    def summary(fan: list, chained: dict) -> dict:
        fan = [fan[i] for i in range(len(fan))]  # by count: iterating mapped results reads one past the end
        losses = {r["job_name"]: r["final_metrics"].get("train:loss") for r in fan}
        print(f"fan-out: {len(fan)} jobs, final losses {losses}")
        print(f"long training: {len(chained['links'])} links, "
              f"{[(link['job_name'], link['secondary_status']) for link in chained['links']]}")
        if not chained["finished"] or len(chained["links"]) < 2:
            raise RuntimeError("the chain should have needed more than one link")
        return {"fan_out_jobs": len(fan), "links": len(chained["links"])}

    subtasks >> [growing, chain]  # every job reads the generated data
    summary(fan_out.output, chain.output)
