"""Console links of the jobs the operators run (the XCom work of the Amazon provider's ``BaseAwsLink``).

A link must work where users meet it, in the Airflow UI, or not appear. Links point at the SageMaker and
CloudWatch consoles, so only jobs run by the ``sagemaker`` backend get one. Jobs run by the ``local``
backend get none: the job exists only as a directory on the machine that ran it, which nothing serves over
HTTP, and the Airflow 3 UI drops ``file://`` hrefs (it renders http(s), mailto and same-origin links only).
The operator logs that directory in the task log instead. Every job still stores its link XCom (with the
backend's name), so the UI's link lookup finds a value rather than logging a missing XCom.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from airflow_smdist._compat import BaseOperatorLink

log = logging.getLogger(__name__)

#: The consoles' base URL (the Amazon provider's ``BASE_AWS_CONSOLE_LINK``, which is not imported at DAG-parse
#: time: its module pulls in botocore and the provider's utilities).
BASE_AWS_CONSOLE_LINK = "https://console.{aws_domain}"
AWS_DOMAINS = {"aws": "aws.amazon.com", "aws-cn": "amazonaws.cn", "aws-us-gov": "amazonaws-us-gov.com"}


class SmdistConsoleLink(BaseOperatorLink):
    """A console link for a job the sagemaker backend ran; an empty link (not shown) for a local job.

    Stores and resolves its XCom as the Amazon provider's ``BaseAwsLink`` does (same keys and value), so
    XComs written by either resolve the same way."""

    name: ClassVar[str]
    key: ClassVar[str]
    format_str: ClassVar[str]

    def format_link(self, **kwargs: Any) -> str:
        # XComs of older versions stored the local job directory as "local_uri": no link for those either
        if kwargs.get("backend", "sagemaker") != "sagemaker" or kwargs.get("local_uri"):
            return ""
        try:
            return self.format_str.format(**kwargs)
        except KeyError:
            return ""

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """The URL the UI shows ("" hides the link), from the XCom :meth:`persist` stored."""
        try:
            from airflow.providers.common.compat.sdk import XCom

            conf = XCom.get_value(key=self.key, ti_key=ti_key)
            return self.format_link(**conf) if conf else ""
        except Exception:  # noqa: BLE001 - a link never fails the page or the task (as BaseAwsLink)
            log.exception("No %s link for %s", self.name, ti_key)
            return ""

    @classmethod
    def persist(cls, context: Any, operator: Any, region_name: str, aws_partition: str, **kwargs: Any) -> None:
        """Store the link's fields in XCom (nothing when the operator pushes no XComs)."""
        if not operator.do_xcom_push:
            return
        try:
            context["ti"].xcom_push(key=cls.key, value={"region_name": region_name,
                                                         "aws_domain": AWS_DOMAINS.get(aws_partition), **kwargs})
        except Exception:  # noqa: BLE001 - as BaseAwsLink: a link is never a reason to fail the task
            log.exception("Could not store the %s link", cls.name)


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
