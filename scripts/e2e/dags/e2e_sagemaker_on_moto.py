"""The deployment test's one DAG on the sagemaker backend: a training job against a moto server (loopback).

It exists for what only a sagemaker job has: console links on the task page. scripts/e2e-deployment.sh
starts the moto server and defines the ``smdist_moto`` and ``aws_moto`` connections (environment variables).
"""

from __future__ import annotations

import pendulum

try:  # Airflow 3
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.10 / 2.11
    from airflow import DAG

from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

with DAG(dag_id="e2e_sagemaker_on_moto", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, tags=["smdist", "e2e"]) as dag:
    SageMakerDistributedTrainingOperator(
        task_id="train", smdist_conn_id="smdist_moto", image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
        instance_type="ml.m5.xlarge", instance_count=2, output_path="s3://smdist-e2e/output",
        role="arn:aws:iam::123456789012:role/SageMakerExecutionRole", poll_interval=1, retries=0)
