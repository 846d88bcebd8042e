"""Seed option 1: a built-in algorithm that trains distributed: SageMaker XGBoost over 2 hosts, data sharded by key.

Trigger it from the UI with Params, or run it end to end here:

    airflow dags test smdist_builtin_algorithm

The built-in XGBoost algorithm (``algorithm="xgboost"``: the ``sagemaker-xgboost:1.7-1`` image, no script) scales
out: with ``instance_count`` > 1 and the train channel ``ShardedByS3Key``, each host reads its share of the CSV
objects and the hosts train *one* model together (Rabit all-reduce), so more objects than hosts keeps every
host busy. The job reports ``train:rmse`` / ``validation:rmse`` (the algorithm's own metric definitions), and the
last task loads ``xgboost-model`` from model.tar.gz and measures its validation error itself.

The default backend is ``local``: two simulated hosts run the container's training for real with the ``xgboost``
package. Set the ``smdist_default`` connection's extra to {"backend": "sagemaker"} (or SMDIST_BACKEND=sagemaker),
and the ``data_uri`` / ``output_uri`` / ``role`` params to your S3 prefixes and execution role, to run the same DAG
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
from airflow_smdist.params import instance_type_param, role_param, storage_param

LOCAL_DATA = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "smdist-data")

with DAG(
    dag_id="smdist_builtin_algorithm",
    description="Built-in SageMaker XGBoost trained distributed over 2 hosts on ShardedByS3Key CSV data",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smdist", "option-1", "builtin-algorithm", "xgboost"],
    params={
        "data_uri": storage_param(f"{LOCAL_DATA}/builtin-xgboost",
                                  "Prefix the generated train/ and validation/ CSV objects are written to."),
        "output_uri": storage_param(f"{LOCAL_DATA}/builtin-xgboost-output", "S3OutputPath of the training job."),
        "role": role_param(),
        "instance_type": instance_type_param("ml.m5.xlarge",
                                             note="XGBoost is memory-bound: m5 is a good start."),
        "instance_count": Param(2, type="integer", minimum=1, maximum=16,
                                description="Hosts; each trains on its ShardedByS3Key share (scale up before out)."),
        "num_round": Param(100, type="integer", minimum=1, maximum=4000, description="Boosting rounds (num_round)."),
        "max_depth": Param(5, type="integer", minimum=0, maximum=20, description="Maximum tree depth."),
        "eta": Param(0.2, type="number", minimum=0, maximum=1, description="Learning rate (eta)."),
        "early_stopping_rounds": Param(10, type="integer", minimum=1,
                                       description="Stop when validation:rmse has not improved for this many rounds."),
        "rows": Param(8000, type="integer", minimum=200, description="Generated training rows."),
        "files": Param(8, type="integer", minimum=1,
                       description="Generated training CSV objects (sharded by key over the hosts)."),
        "validation_files": Param(4, type="integer", minimum=1,
                                  description="Generated validation CSV objects (sharded by key too)."),
    },
    render_template_as_native_obj=True,
) as dag:

    @task
    def generate_data(data_uri: str, rows: int, files: int, validation_files: int) -> dict:
        """y = 2 sin(3 x0) + x1 x2 - 0.5 x3 + noise, label first and no header (the algorithm's CSV format)."""
        import math
        import random

        from airflow_smdist.storage import Storage, join_uri

        rng = random.Random(7)
        storage = Storage()

        def write(prefix: str, n_rows: int, n_files: int) -> str:
            per_file = max(1, n_rows // n_files)
            for part in range(n_files):
                lines = []
                for _ in range(per_file):
                    x = [rng.uniform(-1, 1) for _ in range(4)]
                    y = 2 * math.sin(3 * x[0]) + x[1] * x[2] - 0.5 * x[3] + rng.gauss(0, 0.1)
                    lines.append(",".join(f"{v:.6f}" for v in [y, *x]))
                storage.write_bytes(("\n".join(lines) + "\n").encode(), join_uri(prefix, f"part-{part:04d}.csv"))
            return prefix

        return {"train": write(join_uri(data_uri, "train"), rows, files),
                "validation": write(join_uri(data_uri, "validation"), max(rows // 4, validation_files),
                                    validation_files)}

    data = generate_data("{{ params.data_uri }}", "{{ params.rows }}", "{{ params.files }}",
                         "{{ params.validation_files }}")

    train = SageMakerDistributedTrainingOperator(
        task_id="train",
        algorithm="xgboost",
        algorithm_version="1.7-1",
        instance_type="{{ params.instance_type }}",
        instance_count="{{ params.instance_count }}",
        inputs={
            "train": {"s3_uri": "{{ ti.xcom_pull(task_ids='generate_data')['train'] }}",
                      "distribution": "ShardedByS3Key", "content_type": "text/csv"},
            "validation": {"s3_uri": "{{ ti.xcom_pull(task_ids='generate_data')['validation'] }}",
                           "distribution": "ShardedByS3Key", "content_type": "text/csv"},
        },
        hyperparameters={
            "num_round": "{{ params.num_round }}",
            "objective": "reg:squarederror",
            "max_depth": "{{ params.max_depth }}",
            "eta": "{{ params.eta }}",
            "subsample": 0.9,
            "min_child_weight": 1,
            "eval_metric": "rmse",
            "early_stopping_rounds": "{{ params.early_stopping_rounds }}",
            "seed": 7,
        },
        output_path="{{ params.output_uri }}",
        role="{{ params.role }}",
        max_run=3600,
        poll_interval=2,
    )
    data >> train

    @task
    def report(result: dict, data: dict) -> dict:
        """Load xgboost-model from model.tar.gz and measure its RMSE on every validation object."""
        import io
        import tarfile

        import numpy as np
        import xgboost as xgb

        from airflow_smdist.storage import Storage

        storage = Storage()
        with tarfile.open(fileobj=io.BytesIO(storage.read_bytes(result["model_artifacts"]))) as tar:
            member = tar.getmember("xgboost-model")
            booster = xgb.Booster()
            booster.load_model(bytearray(tar.extractfile(member).read()))
        blocks = [np.loadtxt(io.BytesIO(storage.read_bytes(obj.uri)), delimiter=",", ndmin=2)
                  for obj in storage.list(data["validation"])]
        validation = np.vstack(blocks)
        y, x = validation[:, 0], validation[:, 1:]
        predictions = booster.predict(xgb.DMatrix(x))
        rmse = float(np.sqrt(np.mean((predictions - y) ** 2)))
        baseline = float(np.std(y))  # the RMSE of always predicting the mean
        job_rmse = result["final_metrics"].get("validation:rmse")
        print(f"job {result['job_name']} on {result['instance_count']} x {result['instance_type']}: "
              f"{booster.num_boosted_rounds()} rounds, metrics {result['final_metrics']}")
        print(f"validation RMSE of xgboost-model over {len(y)} rows: {rmse:.5f} (job's last validation:rmse "
              f"{job_rmse}; predicting the mean: {baseline:.5f})")
        if not rmse < 0.5 * baseline:
            raise RuntimeError(f"the model does not fit the validation data: RMSE {rmse:.4f} vs {baseline:.4f}")
        return {"model": result["model_artifacts"], "validation_rmse": rmse, "job_validation_rmse": job_rmse,
                "baseline_rmse": baseline, "rounds": booster.num_boosted_rounds()}

    report(train.output, data)
