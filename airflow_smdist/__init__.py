"""airflow-smdist: SageMaker distributed computing as Airflow operators, with a Docker-free local backend.

This module must stay import-cheap: it is imported by Airflow's provider manager, by DAG files, and by
``airflow_smdist.runtime`` inside training jobs (where Airflow may not be installed at all). Nothing here
imports Airflow, boto3, the sagemaker SDK, torch or pyspark.
"""

__version__ = "0.1.0"


def get_provider_info() -> dict:
    """Provider metadata for Airflow's ProvidersManager (``apache_airflow_provider`` entry point)."""
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
                "python-modules": ["airflow_smdist.operators.training", "airflow_smdist.operators.processing",
                                   "airflow_smdist.operators.transform",
                                   "airflow_smdist.operators.tuning", "airflow_smdist.operators.workflows"],
            }
        ],
        "sensors": [
            {
                "integration-name": "SageMaker distributed computing (smdist)",
                "python-modules": ["airflow_smdist.sensors.training", "airflow_smdist.sensors.processing",
                                   "airflow_smdist.sensors.transform",
                                   "airflow_smdist.sensors.tuning"],
            }
        ],
        "hooks": [
            {
                "integration-name": "SageMaker distributed computing (smdist)",
                "python-modules": ["airflow_smdist.hooks.smdist"],
            }
        ],
        "connection-types": [
            {"connection-type": "smdist", "hook-class-name": "airflow_smdist.hooks.smdist.SmdistHook"}
        ],
        "triggers": [
            {
                "integration-name": "SageMaker distributed computing (smdist)",
                "python-modules": ["airflow_smdist.triggers.base", "airflow_smdist.triggers.training"],
            }
        ],
        "extra-links": [
            "airflow_smdist.operators.links.SageMakerTrainingJobLink",
            "airflow_smdist.operators.links.SageMakerTrainingLogsLink",
            "airflow_smdist.operators.processing.SageMakerProcessingJobLink",
            "airflow_smdist.operators.processing.SageMakerProcessingLogsLink",
            "airflow_smdist.operators.transform.SageMakerBatchInferenceJobLink",
            "airflow_smdist.operators.tuning.SageMakerTuningJobLink",
        ],
    }
