"""Seed option 3: your own distributed code on the cluster contract, over sharded data.

    airflow dags test smdist_own_cluster

Records are spread over the hosts with ShardedByS3Key; each host computes its part and the hosts reduce
by themselves over TCP, using ``airflow_smdist.runtime.cluster()`` (hosts, current host, master address)
read from resourceconfig.json, which works the same on SageMaker and on the local backend.
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
from airflow_smdist.params import role_param, storage_param

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL_DATA = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "smdist-data")

with DAG(
    dag_id="smdist_own_cluster",
    description="Own cluster code: sharded map on every host, a reduce the hosts do themselves over TCP",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smdist", "option-3"],
    params={
        "data_uri": storage_param(f"{LOCAL_DATA}/own-cluster", "Generated records go here."),
        "output_uri": storage_param(f"{LOCAL_DATA}/own-cluster-output", "S3OutputPath of the job."),
        "role": role_param(),
        "instance_count": Param(3, type="integer", minimum=1, maximum=20,
                                description="Hosts of the cluster; each reads its ShardedByS3Key share."),
        "files": Param(12, type="integer", minimum=1, description="Objects to shard over the hosts."),
    },
    render_template_as_native_obj=True,
) as dag:

    @task
    def generate(data_uri: str, files: int) -> dict:
        import random

        from airflow_smdist.storage import Storage, join_uri

        rng = random.Random(7)
        n, total = 0, 0.0
        for i in range(files):
            values = [rng.gauss(10, 2) for _ in range(500)]
            n += len(values)
            total += sum(values)
            Storage().write_bytes("".join(f"{j},{v:.6f}\n" for j, v in enumerate(values)).encode(),
                                  join_uri(data_uri, f"records-{i:03d}.csv"))
        return {"uri": data_uri, "records": n, "mean": total / n}

    expected = generate("{{ params.data_uri }}", "{{ params.files }}")

    reduce_job = SageMakerDistributedTrainingOperator(
        task_id="map_reduce",
        entry_point="estimate.py", source_dir=os.path.join(HERE, "scripts", "own_cluster"), include_runtime=True,
        # plain Python: the lightest framework image that trains on several instances (no torch to fetch)
        framework="xgboost", framework_version="1.7-1", py_version="py3",
        instance_type="ml.c5.xlarge", instance_count="{{ params.instance_count }}",
        # a folder ("/"): the prefix alone would also match output_uri's default ".../own-cluster-output/..."
        inputs={"records": {"s3_uri": "{{ params.data_uri.rstrip('/') }}/", "distribution": "ShardedByS3Key"}},
        output_path="{{ params.output_uri }}", role="{{ params.role }}", max_run=900, poll_interval=2,
        metric_definitions=[{"Name": "mean", "Regex": r"mean=([0-9.eE+-]+)"},
                            {"Name": "records", "Regex": r"records=([0-9]+)"}],
    )
    expected >> reduce_job

    @task
    def check(result: dict, expected: dict) -> dict:
        metrics = result["final_metrics"]
        if int(metrics["records"]) != expected["records"] or abs(metrics["mean"] - expected["mean"]) > 1e-5:
            raise RuntimeError(f"the hosts' reduce {metrics} differs from the data {expected}")
        print(f"{result['instance_count']} hosts reduced {int(metrics['records'])} records: mean {metrics['mean']:.6f}")
        return metrics

    check(reduce_job.output, expected)
