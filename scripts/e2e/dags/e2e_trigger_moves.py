"""The deployment test's trigger that moves (scripts/e2e/test_trigger_moves.py): a deferred training job on the
sagemaker backend against a moto server that the test runs and drives (its states and CloudWatch lines), so that
the test can stop the triggerer mid-job and start another with a home of its own.

scripts/e2e-deployment.sh defines the ``smdist_moto_live`` and ``aws_moto_live`` connections (environment
variables) for the port the test's moto server listens on.
"""

from __future__ import annotations

import pendulum

try:  # Airflow 3
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.10 / 2.11
    from airflow import DAG

from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

with DAG(dag_id="e2e_trigger_moves", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, tags=["smdist", "e2e"]) as dag:
    SageMakerDistributedTrainingOperator(
        task_id="train", smdist_conn_id="smdist_moto_live",
        image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", instance_type="ml.m5.xlarge",
        instance_count=1, output_path="s3://smdist-e2e/output",
        role="arn:aws:iam::123456789012:role/SageMakerExecutionRole", poll_interval=1, retries=0, deferrable=True)
