"""The deployment test's long local job, for the job page (scripts/e2e/test_browser.py): two hosts that print a
line twice a second until someone stops the job from its page. Cheap: the PyTorch runtime the torch example
already built, no data, no torch import; it ends by itself after ten minutes (max_run) if nobody stops it."""

from __future__ import annotations

import os

import pendulum

try:  # Airflow 3
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.10 / 2.11
    from airflow import DAG

from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

JOBS = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "jobs")
OUTPUT = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "e2e-job-page")

with DAG(dag_id="e2e_local_job_page", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, tags=["smdist", "e2e"]) as dag:
    SageMakerDistributedTrainingOperator(
        task_id="train", backend="local", entry_point="tick.py", source_dir=JOBS, framework="pytorch",
        framework_version="2.5", py_version="py311", instance_type="ml.m5.xlarge", instance_count=2,
        output_path=OUTPUT, role="arn:aws:iam::123456789012:role/SageMakerExecutionRole",
        metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}], max_run=600, poll_interval=1, retries=0)
