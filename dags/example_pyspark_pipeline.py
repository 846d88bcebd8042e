"""Tabular ML with PySpark: generate a data set, preprocess it in SageMaker's Spark processing container,
train on the train / validation splits it writes.

Trigger it from the UI with Params, or run it end to end here:

    airflow dags test smdist_pyspark_pipeline

1. ``generate_data`` writes a synthetic customer-churn CSV (``rows`` rows, default 200,000, as ``files``
   objects) under ``data_uri``/raw.
2. ``preprocess`` (SageMakerPySparkProcessingOperator) runs ``scripts/pyspark/preprocess.py`` with
   ``features.py`` shipped as --py-files, on ``instance_count`` hosts: clean, one-hot encode, standardise,
   split; the ``train`` and ``validation`` outputs are uploaded at the end of the job, and the Spark event
   log is kept (``spark_event_logs_s3_uri``) for the history server.
3. ``train`` (SageMakerDistributedTrainingOperator) fits a scikit-learn classifier with the two outputs as
   its ``train`` and ``validation`` channels; validation accuracy and AUC are its metrics.

The default backend is ``local``: the app runs on a real local Spark (pyspark, Java 17), the training
script on this interpreter. Set the ``smdist_default`` connection's extra to {"backend": "sagemaker"} (or
SMDIST_BACKEND=sagemaker) and the ``data_uri`` / ``role`` params to an S3 prefix and your execution role to
run the same DAG on SageMaker.
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

from airflow_smdist.operators.processing import SageMakerPySparkProcessingOperator
from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
from airflow_smdist.operators.transform import SageMakerShardedBatchInferenceOperator
from airflow_smdist.params import (
    PROCESSING_INSTANCE_TYPES,
    instance_type_param,
    role_param,
    storage_param,
)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts", "pyspark")
LOCAL_DATA = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "smdist-data")
RUN = "{{ run_id | replace(':', '-') | replace('+', '-') }}"
PROCESSED = "{{ params.data_uri }}/processed/" + RUN
#: the SageMaker scikit-learn 1.2-1 image in us-east-1 (from the SageMaker SDK's image data; not looked up
#: here because importing the SDK at DAG-parse time costs seconds)
SKLEARN_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"

with DAG(
    dag_id="smdist_pyspark_pipeline",
    description="PySpark preprocessing on SageMaker's Spark container (2 hosts), then training on its splits",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smdist", "pyspark", "processing", "tabular"],
    params={
        "data_uri": storage_param(f"{LOCAL_DATA}/pyspark",
                                  "Prefix for the raw data, the splits, the code and the event logs."),
        "role": role_param(),
        "rows": Param(200_000, type="integer", minimum=1000, description="Rows of the generated CSV."),
        "files": Param(4, type="integer", minimum=1, maximum=64, description="CSV objects the rows are written as."),
        "instance_type": instance_type_param("ml.m5.xlarge", what="Processing (and training)",
                                             choices=PROCESSING_INSTANCE_TYPES),
        "instance_count": Param(2, type="integer", minimum=1, maximum=16, description="Spark hosts."),
        "spark_version": Param("3.5", type="string", description="SageMaker Spark processing image version."),
        "spark_log_level": Param("WARN", type="string", enum=["ERROR", "WARN", "INFO", "DEBUG"],
                                 description="Spark's own log level (the spark-log4j classification's "
                                             "log4j.rootCategory): WARN keeps the task log to the job's lines; "
                                             "INFO adds Spark's every stage and query plan."),
        "validation_fraction": Param(0.2, type="number", exclusiveMinimum=0, exclusiveMaximum=1,
                                     description="Share of the rows Spark splits off as the validation set."),
        "training_image": Param(SKLEARN_IMAGE, type="string", description="Image of the training job."),
    },
    render_template_as_native_obj=True,
) as dag:

    @task
    def generate_data(data_uri: str, rows: int, files: int) -> str:
        """A customer-churn table: churn grows with support calls and a basic plan, falls with tenure;
        about 1% of ages are missing (the preprocessing fills them)."""
        import math
        import random

        from airflow_smdist.storage import Storage, join_uri

        rng = random.Random(42)
        storage = Storage()
        prefix = join_uri(data_uri, "raw")
        per_file = -(-int(rows) // int(files))
        written = 0
        for part in range(int(files)):
            lines = ["customer_id,age,tenure_months,monthly_charges,support_calls,plan,churned"]
            for i in range(min(per_file, int(rows) - written)):
                age, tenure = rng.randint(18, 90), rng.randint(0, 72)
                charges, calls = round(rng.uniform(10, 120), 2), rng.randint(0, 9)
                plan = rng.choice(("basic", "standard", "premium"))
                z = -1.5 + 0.35 * calls - 0.04 * tenure + 0.01 * (charges - 60) + (0.6 if plan == "basic" else 0.0)
                churned = int(rng.random() < 1 / (1 + math.exp(-z)))
                lines.append(f"{part}-{i},{'' if rng.random() < 0.01 else age},"
                             f"{tenure},{charges},{calls},{plan},{churned}")
            written += len(lines) - 1
            storage.write_bytes(("\n".join(lines) + "\n").encode(), join_uri(prefix, f"part-{part:04d}.csv"))
        print(f"wrote {written} rows as {files} CSV object(s) under {prefix}")
        return prefix

    raw = generate_data("{{ params.data_uri }}", "{{ params.rows }}", "{{ params.files }}")

    preprocess = SageMakerPySparkProcessingOperator(
        task_id="preprocess",
        submit_app=os.path.join(SCRIPTS, "preprocess.py"),
        submit_py_files=[os.path.join(SCRIPTS, "features.py")],
        framework_version="{{ params.spark_version }}",
        instance_type="{{ params.instance_type }}",
        instance_count="{{ params.instance_count }}",
        inputs={"raw": {"source": "{{ ti.xcom_pull(task_ids='generate_data') }}",
                        "destination": "/opt/ml/processing/input/raw"}},
        outputs={"train": {"source": "/opt/ml/processing/output/train", "destination": PROCESSED + "/train"},
                 "validation": {"source": "/opt/ml/processing/output/validation",
                                "destination": PROCESSED + "/validation"}},
        arguments=["--input", "/opt/ml/processing/input/raw",
                   "--train-output", "/opt/ml/processing/output/train",
                   "--validation-output", "/opt/ml/processing/output/validation",
                   "--validation-fraction", "{{ params.validation_fraction }}"],
        configuration=[{"Classification": "spark-defaults", "Properties": {
            "spark.sql.shuffle.partitions": "8",
            "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        }}, {"Classification": "spark-log4j", "Properties": {
            "log4j.rootCategory": "{{ params.spark_log_level }}, console"}}],
        spark_event_logs_s3_uri="{{ params.data_uri }}/spark-events",
        code_location="{{ params.data_uri }}/code",
        role="{{ params.role }}",
        max_runtime_in_seconds=3600,
        poll_interval=2,
    )
    raw >> preprocess

    train = SageMakerDistributedTrainingOperator(
        task_id="train",
        entry_point=os.path.join(SCRIPTS, "train_sklearn.py"),
        image_uri="{{ params.training_image }}",
        instance_type="{{ params.instance_type }}",
        instance_count=1,
        inputs={"train": "{{ ti.xcom_pull(task_ids='preprocess')['outputs']['train'] }}",
                "validation": "{{ ti.xcom_pull(task_ids='preprocess')['outputs']['validation'] }}"},
        output_path="{{ params.data_uri }}/models",
        hyperparameters={"regularization": 1.0, "max_iter": 200},
        metric_definitions=[{"Name": "validation:accuracy", "Regex": r"validation:accuracy=([0-9.]+)"},
                            {"Name": "validation:auc", "Regex": r"validation:auc=([0-9.]+)"}],
        role="{{ params.role }}",
        max_run=3600,
        poll_interval=2,
    )
    preprocess >> train

    # sharded batch inference over the validation split: the label column is filtered out going in and
    # joined back coming out, so every output line is "label,probability"
    score = SageMakerShardedBatchInferenceOperator(
        task_id="batch_inference", fan_out="transform",
        model_data="{{ ti.xcom_pull(task_ids='train')['model_artifacts'] }}", image_uri="{{ params.training_image }}",
        entry_point="inference.py", source_dir=SCRIPTS, role="{{ params.role }}",
        instance_type="{{ params.instance_type }}", instance_count=2,
        input_uri="{{ ti.xcom_pull(task_ids='preprocess')['outputs']['validation'] }}",
        output_uri="{{ params.data_uri }}/scored/"
                   "{{ run_id | replace(':', '-') | replace('+', '-') | replace('.', '-') }}",
        content_type="text/csv", accept="text/csv", split_type="Line", batch_strategy="MultiRecord",
        assemble_with="Line", input_filter="$[1:]", join_source="Input", output_filter="$[0,-1]", poll_interval=2)
    train >> score

    @task
    def report(processed: dict, trained: dict, scored: dict) -> dict:
        """What a downstream task consumes: where the splits and the model are, and how good it is."""
        from airflow_smdist.storage import Storage

        if not Storage().exists(trained["model_artifacts"]):
            raise RuntimeError(f"model artifact missing: {trained['model_artifacts']}")
        print(f"preprocess {processed['job_name']}: {processed['exit_message']} -> {processed['outputs']}")
        print(f"train {trained['job_name']}: {trained['final_metrics']} -> {trained['model_artifacts']}")
        if not scored["complete"]:
            raise RuntimeError(f"batch inference incomplete: {scored}")
        print(f"batch inference: {scored['records']} records in {scored['objects']} objects, "
              f"manifest {scored['manifest_uri']}")
        return {"splits": processed["outputs"], "model": trained["model_artifacts"],
                "validation_accuracy": trained["final_metrics"].get("validation:accuracy")}

    report(preprocess.output, train.output, score.output)
