"""Console links for jobs run on the sagemaker backend (the Amazon provider's BaseAwsLink does the XCom work)."""

from __future__ import annotations

from airflow.providers.amazon.aws.links.base_aws import BASE_AWS_CONSOLE_LINK, BaseAwsLink


class _SmdistLink(BaseAwsLink):
    """A console link on the sagemaker backend; on the local backend, the job's directory (its logs,
    state and per-host /opt/ml trees), so every run has a link to where its job lives."""

    def format_link(self, **kwargs) -> str:
        if kwargs.get("local_uri"):
            return kwargs["local_uri"]
        return super().format_link(**kwargs)


class SageMakerTrainingJobLink(_SmdistLink):
    name = "SageMaker training job"
    key = "smdist_training_job"
    format_str = BASE_AWS_CONSOLE_LINK + "/sagemaker/home?region={region_name}#/jobs/{job_name}"


class SageMakerTrainingLogsLink(_SmdistLink):
    name = "Training job logs (CloudWatch)"
    key = "smdist_training_logs"
    format_str = (BASE_AWS_CONSOLE_LINK + "/cloudwatch/home?region={region_name}#logsV2:log-groups/log-group/"
                  "$252Faws$252Fsagemaker$252FTrainingJobs$3FlogStreamNameFilter$3D{job_name}")
