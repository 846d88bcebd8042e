"""The job-kind registry: every fact about a SageMaker job kind, as data, in one place.

A job kind (training, processing, transform, tuning) is one frozen :class:`JobKindInfo`: its API noun
(from which the Create/Describe/Stop/List operation names, their boto3 method names and the name, status,
ARN and list-summary keys follow, exactly as botocore's service model spells them), its CloudWatch log
group, its ARN resource type, the module that runs it on the local backend, the module of its operators,
the function that makes the small XCom result of a finished job, its OpenLineage datasets, its console links
and its sensor.

Everything that used to be a per-kind table (the backends' operation names and list keys, the triggers'
boto3 method names, the local backend's module and ARN tables, the lineage if-chain, the provider info's
operators, links and sensors) reads this registry. Adding a job kind is one entry here, its request builder
(``specs/``), its local implementation (a module satisfying :class:`airflow_smdist.backends.local.LocalJobKind`)
and its operator (``operators/``); the result, lineage, links and sensor have defaults (see
:class:`JobKindInfo`). The README's "Development" section counts the files.

Code is named by dotted path (``"package.module:attribute"``) and imported only when used, so this module
stays import-cheap: DAG files, the provider manager and job supervisors all import it.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Literal

JobKind = Literal["training", "processing", "transform", "tuning"]
Operation = Literal["create", "describe", "stop", "list"]
#: The sensor module of a kind without its own (``JobKindInfo.sensor`` None): ``SmdistJobSensor`` takes ``kind=``.
GENERIC_SENSOR_MODULE = "airflow_smdist.sensors.base"
#: Names a task tries for its job before giving up ("<base>-r2" .. "-r30", see JobLifecycle.choose); here, not
#: in lifecycle.py, because operators size their names with it at import time (DAG parse).
MAX_ATTEMPT_NAMES = 30


def snake_case(operation: str) -> str:
    """boto3's method name of an API operation: ``"DescribeTrainingJob"`` -> ``"describe_training_job"``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()


def load(path: str) -> Any:
    """The object a ``"package.module:attribute"`` path names (a module for ``"package.module"``)."""
    module, _, attribute = path.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded


@dataclass(frozen=True)
class JobKindInfo:
    """The facts of one job kind. ``noun`` is the API's (``TrainingJob``, ``HyperParameterTuningJob``)."""

    name: JobKind
    noun: str
    #: CloudWatch log group of the job's streams (a tuning job's are its trials', training jobs')
    log_group: str
    #: resource type in the job's ARN: ``arn:aws:sagemaker:<region>:<account>:<arn_resource>/<name>``
    arn_resource: str
    #: the module that runs this kind on the local backend (see backends/local/__init__.py)
    local_module: str
    #: the module of this kind's operators (the provider info lists it for Airflow's registry)
    operator: str
    #: ``(description, backend) -> dict``: the small JSON result of a finished job (operators, sensors);
    #: None: :meth:`result` gives the name, ARN, status, backend and failure reason
    result_function: str | None = None
    #: ``(description) -> (input URIs, output URIs)`` for OpenLineage; None: the job reports no datasets
    lineage_function: str | None = None
    #: operator extra links (``BaseOperatorLink`` classes) of this kind
    links: tuple[str, ...] = ()
    #: the module of the sensor that waits for a job of this kind started elsewhere; None: the generic
    #: ``SmdistJobSensor(kind=<name>, job_name=...)`` of :data:`GENERIC_SENSOR_MODULE` waits for it
    sensor: str | None = None
    #: secondary statuses (as List summaries give them) in which the job's containers have not started, so its
    #: log group holds no line of it yet: a CloudWatch log round for jobs that are all in one is not made
    silent_secondary_statuses: frozenset[str] = frozenset()

    # -- the API's names, as botocore's service model spells them ----------------------------------
    @property
    def create_op(self) -> str:
        return f"Create{self.noun}"

    @property
    def describe_op(self) -> str:
        return f"Describe{self.noun}"

    @property
    def stop_op(self) -> str:
        return f"Stop{self.noun}"

    @property
    def list_op(self) -> str:
        return f"List{self.noun}s"

    @property
    def name_key(self) -> str:
        return f"{self.noun}Name"

    @property
    def status_key(self) -> str:
        return f"{self.noun}Status"

    @property
    def arn_key(self) -> str:
        return f"{self.noun}Arn"

    @property
    def summaries_key(self) -> str:
        """The result key of the List call (``TrainingJobSummaries``)."""
        return f"{self.noun}Summaries"

    @property
    def label(self) -> str:
        """How messages name a job of this kind: ``"training job"``."""
        return f"{self.name} job"

    def operation(self, what: Operation) -> str:
        """The API operation ``what`` (create, describe, stop, list) of this kind."""
        ops = {"create": self.create_op, "describe": self.describe_op, "stop": self.stop_op, "list": self.list_op}
        if what not in ops:
            raise ValueError(f"{what!r} is not one of {sorted(ops)}")
        return ops[what]

    def method(self, what: Operation) -> str:
        """boto3's method for the operation ``what``: ``method("list")`` -> ``"list_training_jobs"``."""
        return snake_case(self.operation(what))

    # -- reading requests and descriptions -----------------------------------------------------------
    def job_name(self, request_or_description: dict[str, Any]) -> str:
        return str(request_or_description[self.name_key])

    def status(self, description: dict[str, Any]) -> str:
        return str(description[self.status_key])

    def arn(self, region: str, account: str, job_name: str) -> str:
        return f"arn:aws:sagemaker:{region}:{account}:{self.arn_resource}/{job_name.lower()}"

    def no_lines_yet(self, secondary_statuses: list[str | None]) -> bool:
        """Whether jobs in these secondary statuses (one each) can have no container log line yet: every one
        is in :attr:`silent_secondary_statuses` (an unknown status, None, might have some)."""
        return bool(secondary_statuses) and all(s in self.silent_secondary_statuses for s in secondary_statuses)

    @property
    def sensor_module(self) -> str:
        """The module of the sensor that waits for a job of this kind (its own, else the generic one)."""
        return self.sensor or GENERIC_SENSOR_MODULE

    # -- code, imported when used --------------------------------------------------------------------
    def result(self, description: dict[str, Any], backend: Any) -> dict[str, Any]:
        """The small XCom result of a finished job (what the kind's operator and sensor return)."""
        if self.result_function is None:
            name = backend if isinstance(backend, str) else backend.name  # a Backend or its name
            out: dict[str, Any] = {"job_name": self.job_name(description), "job_arn": description.get(self.arn_key),
                                   "status": self.status(description), "backend": name}
            if description.get("FailureReason"):
                out["failure_reason"] = description["FailureReason"]
            return out
        result: dict[str, Any] = load(self.result_function)(description, backend)
        return result

    def lineage(self, description: dict[str, Any]) -> tuple[list[str], list[str]]:
        """(inputs, outputs) of a job, from its Describe* response."""
        if self.lineage_function is None:
            return [], []
        uris: tuple[list[str], list[str]] = load(self.lineage_function)(description)
        return uris


#: Every job kind, by name. The order is the order messages list them in.
#: every kind's link to the job page of a local job (the provider's plugin serves it on Airflow 3)
LOCAL_JOB_PAGE_LINK = "airflow_smdist.operators.links.LocalJobPageLink"

KINDS: dict[str, JobKindInfo] = {
    info.name: info
    for info in (
        JobKindInfo(
            name="training",
            noun="TrainingJob",
            log_group="/aws/sagemaker/TrainingJobs",
            arn_resource="training-job",
            local_module="airflow_smdist.backends.local.job.training",
            operator="airflow_smdist.operators.training",
            result_function="airflow_smdist.operators.training:training_result",
            lineage_function="airflow_smdist.lineage:training_lineage",
            links=("airflow_smdist.operators.links.SageMakerTrainingJobLink",
                   "airflow_smdist.operators.links.SageMakerTrainingLogsLink", LOCAL_JOB_PAGE_LINK),
            sensor="airflow_smdist.sensors.training",
            # DescribeTrainingJob's SecondaryStatus before "Training": instances, data and image being made
            # ready, or a training plan's capacity awaited; the algorithm container starts at "Training"
            silent_secondary_statuses=frozenset({"Starting", "Pending", "LaunchingMLInstances",
                                                 "PreparingTrainingStack", "Downloading",
                                                 "DownloadingTrainingImage"}),
        ),
        JobKindInfo(
            name="processing",
            noun="ProcessingJob",
            log_group="/aws/sagemaker/ProcessingJobs",
            arn_resource="processing-job",
            local_module="airflow_smdist.backends.local.job.processing",
            operator="airflow_smdist.operators.processing",
            result_function="airflow_smdist.operators.processing:processing_result",
            lineage_function="airflow_smdist.lineage:processing_lineage",
            links=("airflow_smdist.operators.processing.SageMakerProcessingJobLink",
                   "airflow_smdist.operators.processing.SageMakerProcessingLogsLink", LOCAL_JOB_PAGE_LINK),
            sensor="airflow_smdist.sensors.processing",
        ),
        JobKindInfo(
            name="transform",
            noun="TransformJob",
            log_group="/aws/sagemaker/TransformJobs",
            arn_resource="transform-job",
            local_module="airflow_smdist.backends.local.job.transform",
            operator="airflow_smdist.operators.transform",
            result_function="airflow_smdist.operators.transform:transform_result",
            lineage_function="airflow_smdist.lineage:transform_lineage",
            links=("airflow_smdist.operators.transform.SageMakerBatchInferenceJobLink", LOCAL_JOB_PAGE_LINK),
            sensor="airflow_smdist.sensors.transform",
        ),
        JobKindInfo(
            name="tuning",
            noun="HyperParameterTuningJob",
            log_group="/aws/sagemaker/TrainingJobs",
            arn_resource="hyper-parameter-tuning-job",
            local_module="airflow_smdist.backends.local.job.tuning",
            operator="airflow_smdist.operators.tuning",
            result_function="airflow_smdist.operators.tuning:tuning_result",
            lineage_function="airflow_smdist.lineage:tuning_lineage",
            links=("airflow_smdist.operators.tuning.SageMakerTuningJobLink", LOCAL_JOB_PAGE_LINK),
            sensor="airflow_smdist.sensors.tuning",
        ),
    )
}

JOB_KINDS: tuple[str, ...] = tuple(KINDS)
#: Operator modules that are no single kind's (the provider info lists them after the kinds' own).
SHARED_OPERATOR_MODULES: tuple[str, ...] = ("airflow_smdist.operators.workflows",)


def provider_modules(what: Literal["operators", "sensors"]) -> list[str]:
    """The modules the provider info lists for ``what``, from the registry (each once, in registry order)."""
    if what == "operators":
        modules = [info.operator for info in KINDS.values()] + list(SHARED_OPERATOR_MODULES)
    else:
        modules = [info.sensor_module for info in KINDS.values()]
    return list(dict.fromkeys(modules))


def kind_info(kind: str) -> JobKindInfo:
    """The registry entry of ``kind``; a clear error for a kind that is not one."""
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"job kind {kind!r} is not one of {JOB_KINDS}") from None
