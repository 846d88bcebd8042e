"""Seed option 3 as TaskFlow: your own Python function on every host, over sharded data, reduced on rank 0.

    airflow dags test smdist_taskflow

``@task.smdist`` ships ``estimate``'s source (not a pickle) and its JSON arguments into a training job of
``instance_count`` hosts. Each host reads its ShardedByS3Key share of the records, the hosts gather their
partial sums on global rank 0 (``airflow_smdist.runtime.function.gather``: plain TCP, no framework), and
rank 0's return value becomes the task's XCom; the other ranks return their partial sums, which are
dropped. ``@task.smdist_processing`` runs ``count_rows`` once per host of a processing job over the same
sharded records and returns every host's value, in host order. The same DAG runs on SageMaker with
``backend="sagemaker"`` (or the ``smdist`` connection) and S3 URIs in the Params.
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

from airflow_smdist.params import role_param, storage_param

LOCAL_DATA = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "smdist-data")

with DAG(
    dag_id="smdist_taskflow",
    description="TaskFlow: a function on every host over sharded data, reduced on rank 0 (@task.smdist)",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smdist", "option-3", "taskflow"],
    params={
        "data_uri": storage_param(f"{LOCAL_DATA}/taskflow-records", "Prefix the generated records are written to."),
        "output_uri": storage_param(f"{LOCAL_DATA}/taskflow-output",
                                    "S3OutputPath of the job (the function's result and per-rank errors)."),
        "role": role_param(),
        "instance_count": Param(2, type="integer", minimum=1, maximum=20,
                                description="Hosts the function runs on; each gets its ShardedByS3Key share."),
        "files": Param(9, type="integer", minimum=1, description="Objects to shard over the hosts."),
    },
) as dag:

    @task
    def generate(data_uri: str, files: int) -> dict:
        import random

        from airflow_smdist.storage import Storage, join_uri

        rng = random.Random(11)
        n, total = 0, 0.0
        for i in range(int(files)):
            values = [round(rng.gauss(5, 3), 6) for _ in range(400)]
            n += len(values)
            total += sum(values)
            Storage().write_bytes("".join(f"{v:.6f}\n" for v in values).encode(),
                                  join_uri(data_uri, f"records-{i:03d}.csv"))
        return {"records": n, "mean": total / n, "files": int(files)}

    @task.smdist(
        # plain Python: the lightest framework image that trains on several instances (no torch to fetch)
        framework="xgboost", framework_version="1.7-1", py_version="py3",
        instance_type="ml.c5.xlarge", instance_count="{{ params.instance_count }}",
        inputs={"records": {"s3_uri": "{{ params.data_uri }}", "distribution": "ShardedByS3Key"}},
        output_path="{{ params.output_uri }}", role="{{ params.role }}", max_run=900, poll_interval=2,
    )
    def estimate(expected: dict, files: str) -> dict:
        import glob
        import math
        import os

        from airflow_smdist.runtime import cluster
        from airflow_smdist.runtime.function import gather

        c = cluster()
        n, total, sq = 0, 0.0, 0.0
        for path in sorted(glob.glob(os.path.join(c.channels["records"], "**", "*.csv"), recursive=True)):
            with open(path) as f:
                for line in f:
                    if line.strip():
                        value = float(line)
                        n, total, sq = n + 1, total + value, sq + value * value
        mine = {"host": c.current_host, "n": n, "sum": total, "sumsq": sq}
        print(f"rank {c.rank}/{c.world_size} on {c.current_host}: {n} records", flush=True)
        parts = gather(mine)  # every rank's partial sums, on global rank 0; None elsewhere
        if c.rank != 0:
            return mine  # dropped: only global rank 0's return value becomes the task's XCom
        n = sum(p["n"] for p in parts)
        if n != expected["records"] or expected["files"] != int(files):  # an XCom and a templated value
            raise ValueError(f"the ranks read {n} records, the data has {expected['records']}")
        mean = sum(p["sum"] for p in parts) / n
        std = math.sqrt(max(0.0, sum(p["sumsq"] for p in parts) / n - mean * mean))
        return {"records": n, "mean": mean, "std": std, "ranks": len(parts), "per_rank": [p["n"] for p in parts]}

    @task.smdist_processing(
        image_uri="763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-cpu-py311",
        instance_type="ml.c5.xlarge", instance_count="{{ params.instance_count }}",
        inputs={"records": {"source": "{{ params.data_uri }}", "distribution": "ShardedByS3Key"}},
        code_location="{{ params.output_uri }}", role="{{ params.role }}", poll_interval=2,
    )
    def count_rows() -> int:
        import glob
        import os

        from airflow_smdist.runtime import cluster

        shard = cluster().channels["records"]  # this host's share of the objects
        return sum(1 for path in glob.glob(os.path.join(shard, "**", "*.csv"), recursive=True)
                   for line in open(path) if line.strip())

    @task
    def check(result: dict, rows_per_host: list, expected: dict) -> dict:
        if result["records"] != expected["records"] or abs(result["mean"] - expected["mean"]) > 1e-6:
            raise RuntimeError(f"rank 0's reduce {result} differs from the data {expected}")
        if sum(rows_per_host) != expected["records"] or len(rows_per_host) != len(result["per_rank"]):
            raise RuntimeError(f"the processing hosts counted {rows_per_host}, expected {expected['records']} rows")
        print(f"{result['ranks']} ranks reduced {result['records']} records on rank 0: mean {result['mean']:.6f} "
              f"std {result['std']:.6f}; per host (processing): {rows_per_host}")
        return result

    expected = generate("{{ params.data_uri }}", "{{ params.files }}")
    summary = estimate(expected, "{{ params.files }}")  # arguments: an XCom and a templated value (JSON)
    rows = count_rows()
    expected >> rows
    check(summary, rows, expected)
