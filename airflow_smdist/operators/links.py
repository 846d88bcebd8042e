"""Console links of the jobs the operators run (the Amazon provider's BaseAwsLink does the XCom work).

A link must work where users meet it, in the Airflow UI, or not appear. Links point at the SageMaker and
CloudWatch consoles, so only jobs run by the ``sagemaker`` backend get one. Jobs run by the ``local``
backend get none: the job exists only as a directory on the machine that ran it, which nothing serves over
HTTP, and the Airflow 3 UI drops ``file://`` hrefs (it renders http(s), mailto and same-origin links only).
The operator logs that directory in the task log instead. Every job still stores its link XCom (with the
backend's name), so the UI's link lookup finds a value rather than logging a missing XCom.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.links.base_aws import (
    BASE_AWS_CONSOLE_LINK,
    BaseAwsLink,
)


class SmdistConsoleLink(BaseAwsLink):
    """A console link for a job the sagemaker backend ran; an empty link (not shown) for a local job."""

    def format_link(self, **kwargs: Any) -> str:
        # XComs of older versions stored the local job directory as "local_uri": no link for those either
        if kwargs.get("backend", "sagemaker") != "sagemaker" or kwargs.get("local_uri"):
            return ""
        return super().format_link(**kwargs)


def aws_partition(region: str) -> str:
    """The AWS partition of a region, for the console's domain."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def persist_console_links(operator: Any, context: Any, job_name: str, **fields: Any) -> None:
    """Store every console link of ``operator`` for ``job_name`` (see the module docstring for local jobs)."""
    backend = operator.get_backend()
    region = operator.hook.region_name or "us-east-1"
    for link in operator.operator_extra_links:
        if isinstance(link, SmdistConsoleLink):
            type(link).persist(context=context, operator=operator, region_name=region,
                               aws_partition=aws_partition(region), job_name=job_name, backend=backend.name,
                               **fields)
    if backend.name == "local" and hasattr(backend, "job_dir"):
        operator.log.info("Local %s job %s lives in %s (its state, logs and per-host /opt/ml trees).",
                          operator.kind, job_name, backend.job_dir(operator.kind, job_name))


class SageMakerTrainingJobLink(SmdistConsoleLink):
    name = "SageMaker training job"
    key = "smdist_training_job"
    format_str = BASE_AWS_CONSOLE_LINK + "/sagemaker/home?region={region_name}#/jobs/{job_name}"


class SageMakerTrainingLogsLink(SmdistConsoleLink):
    name = "Training job logs (CloudWatch)"
    key = "smdist_training_logs"
    format_str = (BASE_AWS_CONSOLE_LINK + "/cloudwatch/home?region={region_name}#logsV2:log-groups/log-group/"
                  "$252Faws$252Fsagemaker$252FTrainingJobs$3FlogStreamNameFilter$3D{job_name}")
