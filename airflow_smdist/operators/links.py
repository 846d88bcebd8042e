"""Console links of the jobs the operators run (the XCom work of the Amazon provider's ``BaseAwsLink``).

A link must work where users meet it, in the Airflow UI, or not appear. The SageMaker and CloudWatch console
links are shown for jobs run by the ``sagemaker`` backend only. A job run by the ``local`` backend gets one
link instead, :class:`LocalJobPageLink`: its job page, which the provider's plugin serves in Airflow 3's
api-server (:mod:`airflow_smdist.plugins.console`), as a same-origin URL (the Airflow 3 UI renders http(s),
mailto and same-origin links only; it drops ``file://``). On Airflow 2 there is no page, so no link either;
the operator logs the job's directory in the task log on every line. Every job stores each link's XCom (with
the backend's name), so the UI's link lookup finds a value rather than logging a missing XCom.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from airflow_smdist._compat import BaseOperatorLink, console_supported

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
        from airflow_smdist.backends.base import capabilities
        if capabilities(kwargs.get("backend", "sagemaker")).console != "aws":
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
        except Exception:  # a link never fails the page or the task (as BaseAwsLink)
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
        except Exception:  # as BaseAwsLink: a link is never a reason to fail the task
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
                               kind=operator.kind, **fields)
    job_dir = backend.job_dir(operator.kind, job_name)
    if job_dir is not None:
        operator.log.info("Local %s job %s lives in %s (its state, logs and per-host /opt/ml trees).",
                          operator.kind, job_name, job_dir)


class SageMakerTrainingJobLink(SmdistConsoleLink):
    name = "SageMaker training job"
    key = "smdist_training_job"
    format_str = BASE_AWS_CONSOLE_LINK + "/sagemaker/home?region={region_name}#/jobs/{job_name}"


class SageMakerTrainingLogsLink(SmdistConsoleLink):
    name = "Training job logs (CloudWatch)"
    key = "smdist_training_logs"
    format_str = (BASE_AWS_CONSOLE_LINK + "/cloudwatch/home?region={region_name}#logsV2:log-groups/log-group/"
                  "$252Faws$252Fsagemaker$252FTrainingJobs$3FlogStreamNameFilter$3D{job_name}")


def api_base_path() -> str:
    """The path of the api-server's base URL (``[api] base_url``; "" at the root), which the job page's
    same-origin URL starts with."""
    from urllib.parse import urlparse

    from airflow.configuration import conf

    return urlparse(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


class LocalJobPageLink(SmdistConsoleLink):
    """The job page of a local job (Airflow >= 3.0: the provider's plugin serves it); no link for a sagemaker
    job (its console links are the others) nor on Airflow 2 (no page there)."""

    name = "Job page (local)"
    key = "smdist_local_job_page"
    format_str = "{base}/smdist/jobs/{kind}/{job_name}"

    def format_link(self, **kwargs: Any) -> str:
        from airflow_smdist.backends.base import capabilities

        if (capabilities(kwargs.get("backend")).console != "plugin" or not kwargs.get("kind")
                or not console_supported()):
            return ""
        from airflow_smdist.plugins.console import job_page_path

        try:
            return api_base_path() + job_page_path(kwargs["kind"], kwargs["job_name"])
        except Exception:  # a link never fails the task
            log.exception("No job page link for %s", kwargs.get("job_name"))
            return ""

    @classmethod
    def persist(cls, context: Any, operator: Any, region_name: str, aws_partition: str, **kwargs: Any) -> None:
        """Store the link's fields; on Airflow 3 also the URL itself under the key the UI reads, so that the
        link is there while the job runs (Airflow stores links when the task ends)."""
        super().persist(context, operator, region_name, aws_partition, **kwargs)
        url = cls().format_link(**kwargs)
        xcom_key = getattr(cls(), "xcom_key", None)  # Airflow >= 3.0's BaseOperatorLink
        if not url or not isinstance(xcom_key, str) or not operator.do_xcom_push:
            return
        try:
            context["ti"].xcom_push(key=xcom_key, value=url)
        except Exception:  # as BaseAwsLink: a link is never a reason to fail the task
            log.exception("Could not store the %s link", cls.name)
