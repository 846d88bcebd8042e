"""airflow-smdist: SageMaker distributed computing as Airflow operators, with a Docker-free local backend.

This module must stay import-cheap: it is imported by Airflow's provider manager, by DAG files, and by
``airflow_smdist.runtime`` inside training jobs (where Airflow may not be installed at all). Nothing here
imports Airflow, boto3, the sagemaker SDK, torch or pyspark.
"""

from typing import Any

__version__ = "0.1.0"

#: The ``smdist`` connection's own fields, all stored in its extra. Airflow >= 3.2 builds the connection
#: form from these (provider info ``conn-fields``); on Airflow 2.x the hook renders the same fields
#: (``SmdistHook.get_connection_form_widgets``). Empty fields fall back as the hook documents.
CONNECTION_FIELDS: dict[str, Any] = {
    "backend": {
        "label": "Backend",
        "description": "Where jobs run: 'local' (this machine, for real) or 'sagemaker' (Amazon SageMaker). "
                       "Empty: the SMDIST_BACKEND environment variable, else local. An operator's backend= wins.",
        "schema": {"type": ["string", "null"], "enum": ["local", "sagemaker"]},
    },
    "aws_conn_id": {
        "label": "AWS connection id",
        "description": "Airflow connection with the AWS credentials used for SageMaker and s3:// data. "
                       "Empty: aws_default.",
        "schema": {"type": ["string", "null"]},
    },
    "region_name": {
        "label": "AWS region",
        "description": "Region of the SageMaker jobs (and of the console links). Empty: the AWS connection's "
                       "region, else AWS_DEFAULT_REGION.",
        "schema": {"type": ["string", "null"], "pattern": "^$|^[a-z]{2}(-[a-z]+)+-[0-9]+$"},
    },
    "local_root": {
        "label": "Local job root",
        "description": "Directory where the local backend keeps its jobs (state, logs, per-host /opt/ml). "
                       "Workers and the triggerer must see the same directory. Empty: SMDIST_LOCAL_ROOT, "
                       "else $AIRFLOW_HOME/smdist.",
        "schema": {"type": ["string", "null"]},
    },
    "local_retention": {
        "label": "Local job retention",
        "description": "Finished local jobs older than this (e.g. 30d, 12h) are removed when a local job is "
                       "submitted (at most every 10 minutes); never a running job or one whose task instance "
                       "still runs. Empty: jobs are kept (airflow smdist jobs prune removes them).",
        "schema": {"type": ["string", "null"], "pattern": "^$|^\\s*[0-9]+(\\.[0-9]+)?\\s*[smhdw]\\s*$"},
    },
    "local_spot_interruptions": {
        "label": "Rehearsed spot interruptions (local backend)",
        "description": "Interrupt local managed spot training jobs on purpose: comma-separated seconds of "
                       "training after which each try is interrupted ('3,3': twice, 3 s into each try), or "
                       "random:SEED:N. Only jobs with EnableManagedSpotTraining; the request is unchanged. Empty: "
                       "SMDIST_LOCAL_SPOT_INTERRUPTIONS, else none.",
        "schema": {"type": ["string", "null"],
                   "pattern": "^$|^\\s*([0-9]+(\\.[0-9]+)?\\s*(,\\s*[0-9]+(\\.[0-9]+)?\\s*)*"
                              "|random:[0-9]+:[0-9]+(:[0-9.]+)?)$"},
    },
    "local_instance_failures": {
        "label": "Rehearsed instance failures (local backend)",
        "description": "Fail a local training job's instances on purpose (an InternalServerError, retried as "
                       "RetryStrategy says): the same syntax as the spot interruptions. Empty: "
                       "SMDIST_LOCAL_INSTANCE_FAILURES, else none.",
        "schema": {"type": ["string", "null"],
                   "pattern": "^$|^\\s*([0-9]+(\\.[0-9]+)?\\s*(,\\s*[0-9]+(\\.[0-9]+)?\\s*)*"
                              "|random:[0-9]+:[0-9]+(:[0-9.]+)?)$"},
    },
    "s3_endpoint_url": {
        "label": "S3 endpoint URL (local backend)",
        "description": "S3-compatible endpoint the local backend reads s3:// data from and writes it to "
                       "(e.g. a moto server, MinIO). Empty: the AWS connection's endpoint, else AWS.",
        "schema": {"type": ["string", "null"], "format": "url"},
    },
}

#: The connection form's standard fields: the smdist connection only uses its extra fields above.
CONNECTION_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["host", "schema", "login", "password", "port"],
    "relabeling": {},
    "placeholders": {"extra": '{"backend": "sagemaker", "aws_conn_id": "aws_default", "region_name": "us-east-1"}',
                     "region_name": "us-east-1", "aws_conn_id": "aws_default",
                     "s3_endpoint_url": "http://127.0.0.1:5000"},
}


def get_provider_info() -> dict[str, Any]:
    """Provider metadata for Airflow's ProvidersManager (``apache_airflow_provider`` entry point)."""
    from airflow_smdist.kinds import KINDS, provider_modules  # import-cheap (dataclasses only), and only when asked

    return {
        "package-name": "airflow-smdist",
        "name": "SageMaker distributed computing (smdist)",
        "description": "Distributed training, PySpark processing, sharded batch inference and tuning on "
        "Amazon SageMaker, with a Docker-free local backend that runs the same requests on this machine.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "SageMaker distributed computing (smdist)",
                "external-doc-url": "https://docs.aws.amazon.com/sagemaker/latest/dg/distributed-training.html",
                "tags": ["aws"],
            }
        ],
        "operators": [
            {
                "integration-name": "SageMaker distributed computing (smdist)",
                "python-modules": provider_modules("operators"),  # the job-kind registry's, then workflows
            }
        ],
        "sensors": [
            {
                "integration-name": "SageMaker distributed computing (smdist)",
                "python-modules": provider_modules("sensors"),  # the job-kind registry's
            }
        ],
        "hooks": [
            {
                "integration-name": "SageMaker distributed computing (smdist)",
                "python-modules": ["airflow_smdist.hooks.smdist"],
            }
        ],
        "connection-types": [
            {"connection-type": "smdist", "hook-class-name": "airflow_smdist.hooks.smdist.SmdistHook",
             "hook-name": "SageMaker distributed computing (smdist)",
             "conn-fields": CONNECTION_FIELDS, "ui-field-behaviour": CONNECTION_UI_FIELD_BEHAVIOUR}
        ],
        "triggers": [
            {
                "integration-name": "SageMaker distributed computing (smdist)",
                "python-modules": ["airflow_smdist.triggers.base", "airflow_smdist.triggers.training"],
            }
        ],
        "task-decorators": [
            {"name": "smdist", "class-name": "airflow_smdist.decorators.smdist.smdist_task"},
            {"name": "smdist_processing",
             "class-name": "airflow_smdist.decorators.processing.smdist_processing_task"},
        ],
        # Airflow >= 3.2 adds these to its CLI (`airflow smdist ...`); older lines ignore the key (the
        # `smdist` console script serves the same commands there)
        "cli": ["airflow_smdist.cli.definition.get_smdist_cli_commands"],
        # the job-kind registry's (the local job page's link is every kind's: listed once)
        "extra-links": list(dict.fromkeys(link for k in KINDS.values() for link in k.links)),
    }
