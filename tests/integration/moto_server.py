"""A moto server on loopback for integration tests, EXTENDED where moto 5.x lacks SageMaker calls and states.

``MotoServer`` runs ``moto.server.ThreadedMotoServer`` in this process on 127.0.0.1 (a free port). One
endpoint serves S3, SageMaker and CloudWatch Logs; clients reach it over real HTTP. Because the server runs
in-process, tests can also reach into moto's backend objects to drive job states.

What moto lacks, and what ``install_sagemaker_extensions()`` adds (it patches moto's classes in place, once,
when a ``MotoServer`` starts):

* moto creates every job ``Completed`` at once and implements no StopTrainingJob, StopTransformJob or
  StopHyperParameterTuningJob (and its StopProcessingJob jumps straight to ``Stopped``, even for a finished
  job). moto's ``SageMakerResponse`` dispatches an action to the method named after it in snake_case
  (``StopTrainingJob`` -> ``stop_training_job``), so we add those methods to the class. As on the real
  service, Stop*Job on an ``InProgress`` job moves it to ``Stopping`` (secondary status ``Stopping`` for
  training), and it becomes ``Stopped`` ``stopping_describes`` Describe/List calls later (default 1: the
  first Describe after the stop sees ``Stopping``, the next ``Stopped``), so nothing sleeps. Stop*Job on a
  job in any other state fails with the service's ValidationException "The request was rejected because the
  training job is in status Completed."; on a missing job with moto's usual "Could not find ..." error.
* moto silently overwrites a training, processing or transform job created twice under one name; the real
  service rejects it with ``ResourceInUse``. The Create* handlers are wrapped to do the same.
* moto's CreateProcessingJob drops ``ProcessingResources`` and ``Environment`` (CreateTrainingJob drops
  ``Environment``); the wrapper keeps them, so Describe*Job returns them as the service does.
* moto's CreateTrainingJob replaces the request's ``AlgorithmSpecification.MetricDefinitions`` with a
  canned one; the wrapper puts the request's back (or removes the key if the request had none).
* ``set_job_status`` / ``set_training_job_status`` drive a job's state directly in moto's backend
  (``moto.sagemaker.models.sagemaker_backends[account][region]``), for tests needing InProgress or Failed;
  inside ``new_jobs_in_progress(kind)`` a job the code under test creates starts InProgress (not Completed).
* moto makes no log streams; ``seed_log_stream`` writes one through the real Logs API on the server.
* moto's ListTrainingJobs summaries lack ``SecondaryStatus`` and its FilterLogEvents ignores
  ``logStreamNamePrefix``: ``install_summary_and_log_extensions`` adds both.
* moto's List* time filters (``LastModifiedTimeAfter``, ...) arrive over the JSON protocol as epoch numbers
  and moto compares them with datetimes (a 500); ``_get_param`` hands moto datetimes for them.
* moto's List{Training,Processing,Transform}Jobs page before they filter (a narrow filter over many jobs
  costs the client every page); ``install_filter_then_page_extension`` filters first, as the service does.
* IAM enforcement (``IamMotoServer``, a server in a process of its own with ``INITIAL_NO_AUTH_ACTION_COUNT``):
  moto authorizes SageMaker and Logs calls on ``*`` only and names CloudWatch's actions ``monitoring:``;
  ``install_iam_extensions`` gives it the resource ARNs and action names AWS authorizes (see that section).
"""

from __future__ import annotations

import contextlib
import copy
import re
import sys
from datetime import datetime, timezone
from typing import Any, Iterable

ACCOUNT_ID = "123456789012"  # moto's default account for any unknown access key ("testing")
REGION = "us-east-1"

#: per kind: moto backend dict attribute, status attribute, name parameter, noun in error messages, end-time
#: attribute, Stop* and Create* handler names, the service's duplicate-name message.
_KINDS: dict[str, dict[str, str]] = {
    "training": {
        "jobs": "training_jobs", "status": "training_job_status", "param": "TrainingJobName",
        "noun": "training job", "end": "training_end_time",
        "stop": "stop_training_job", "create": "create_training_job",
        "unique": "Training job names must be unique within an AWS account and region, and a training job "
                  "with this name already exists ({arn})",
    },
    "processing": {
        "jobs": "processing_jobs", "status": "processing_job_status", "param": "ProcessingJobName",
        "noun": "processing job", "end": "processing_end_time",
        "stop": "stop_processing_job", "create": "create_processing_job",
        "unique": "Processing job names must be unique within an AWS account and region, and a processing "
                  "job with this name already exists ({arn})",
    },
    "transform": {
        "jobs": "transform_jobs", "status": "transform_job_status", "param": "TransformJobName",
        "noun": "transform job", "end": "transform_end_time",
        "stop": "stop_transform_job", "create": "create_transform_job",
        "unique": "Transform job names must be unique within an AWS account and region, and a transform job "
                  "with this name already exists ({arn})",
    },
    "tuning": {
        "jobs": "hyper_parameter_tuning_jobs", "status": "hyper_parameter_tuning_job_status",
        "param": "HyperParameterTuningJobName", "noun": "hyper parameter tuning job",
        "end": "hyper_parameter_tuning_end_time",
        "stop": "stop_hyper_parameter_tuning_job", "create": "",  # moto itself rejects duplicate names
        "unique": "",
    },
}

#: Describe/List handlers that first advance pending stops of their kind.
_READERS = {
    "training": ("describe_training_job", "list_training_jobs"),
    "processing": ("describe_processing_job", "list_processing_jobs"),
    "transform": ("describe_transform_job", "list_transform_jobs"),
    "tuning": ("describe_hyper_parameter_tuning_job", "list_hyper_parameter_tuning_jobs"),
}

#: Describe/List calls a stopped job still reports ``Stopping`` for.
stopping_describes = 1

# (account, region, kind, name) -> Describe/List calls left before Stopping becomes Stopped. Kept here, not
# on moto's job objects, because moto serialises every attribute of those into the Describe response.
_pending_stops: dict[tuple[str, str, str, str], int] = {}
#: kind -> the status moto gives a new job of that kind instead of Completed (see ``new_jobs_in_progress``)
_new_job_status: dict[str, str] = {}
_installed = False


def _now() -> datetime:
    # naive UTC, as moto's own objects hold their times (moto.core.utils.utcnow): the two must compare
    return datetime.now(timezone.utc).replace(tzinfo=None)


def sagemaker_backend(account_id: str = ACCOUNT_ID, region: str = REGION):
    """moto's SageMaker backend object for ``account_id`` / ``region`` (shared with the server)."""
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[account_id][region]


def _job(backend, kind: str, name: str):
    return getattr(backend, _KINDS[kind]["jobs"]).get(name)


def _not_found(backend, kind: str, name: str):
    from moto.sagemaker.exceptions import ResourceNotFound, ValidationError

    if kind == "tuning":  # what moto's own DescribeHyperParameterTuningJob raises
        return ResourceNotFound(message=f"Could not find hyper parameter tuning job '{name}'.")
    job_arn = f"arn:aws:sagemaker:{backend.region_name}:{backend.account_id}:{kind}-job/{name}"
    return ValidationError(message=f"Could not find {_KINDS[kind]['noun']} '{job_arn}'.")


def _append_transition(job, status: str, message: str) -> None:
    transitions = getattr(job, "secondary_status_transitions", None)
    if transitions is None:
        return
    now = _now()
    if transitions and "EndTime" not in transitions[-1]:
        transitions[-1]["EndTime"] = now
    transitions.append({"Status": status, "StartTime": now, "StatusMessage": message})


def _request_stop(backend, kind: str, name: str) -> None:
    from moto.sagemaker.exceptions import ValidationError

    job = _job(backend, kind, name)
    if job is None:
        raise _not_found(backend, kind, name)
    status = getattr(job, _KINDS[kind]["status"])
    if status != "InProgress":
        raise ValidationError(
            message=f"The request was rejected because the {_KINDS[kind]['noun']} is in status {status}."
        )
    setattr(job, _KINDS[kind]["status"], "Stopping")
    job.last_modified_time = _now()
    if kind == "training":
        job.secondary_status = "Stopping"
        _append_transition(job, "Stopping", "Stopping the training job")
    _pending_stops[(backend.account_id, backend.region_name, kind, name)] = stopping_describes


def _advance_stops(backend, kind: str) -> None:
    for key in [k for k in _pending_stops if k[:3] == (backend.account_id, backend.region_name, kind)]:
        if _pending_stops[key] > 0:
            _pending_stops[key] -= 1
            continue
        del _pending_stops[key]
        job = _job(backend, kind, key[3])
        if job is None or getattr(job, _KINDS[kind]["status"]) != "Stopping":
            continue
        setattr(job, _KINDS[kind]["status"], "Stopped")
        setattr(job, _KINDS[kind]["end"], _now())
        job.last_modified_time = _now()
        if kind == "training":
            job.secondary_status = "Stopped"
            _append_transition(job, "Stopped", "The job was stopped")


_TIME_FILTERS = frozenset({"CreationTimeAfter", "CreationTimeBefore", "LastModifiedTimeAfter",
                           "LastModifiedTimeBefore"})


def _restore_dropped_fields(response, kind: str, job, requested_metrics) -> None:
    """What moto's Create* drops and Describe* returns: processing resources and environments, and the
    training job's MetricDefinitions as given (moto fills in its own)."""
    if kind == "processing":  # moto drops these two; DescribeProcessingJob returns them
        job.processing_resources = response._get_param("ProcessingResources")
        job.environment = response._get_param("Environment")
    if kind == "training":
        if response._get_param("Environment") is not None:  # moto drops it; DescribeTrainingJob returns it
            job.environment = response._get_param("Environment")
        spec = job.algorithm_specification
        if requested_metrics is None:
            spec.pop("MetricDefinitions", None)
        else:
            spec["MetricDefinitions"] = requested_metrics


def install_sagemaker_extensions() -> None:  # extended here, so MotoServer.start installs both
    """Add the missing Stop* handlers and the fidelity fixes to moto's SageMakerResponse (idempotent)."""
    global _installed
    if _installed:
        return
    from moto.core.responses import EmptyResult
    from moto.sagemaker.exceptions import ResourceInUseException
    from moto.sagemaker.responses import SageMakerResponse

    def make_stop(kind: str):
        def handler(self):
            _request_stop(self.sagemaker_backend, kind, self._get_param(_KINDS[kind]["param"]))
            return EmptyResult()

        handler.__name__ = _KINDS[kind]["stop"]
        return handler

    def make_reader(kind: str, original):
        def handler(self):
            _advance_stops(self.sagemaker_backend, kind)
            return original(self)

        handler.__name__ = original.__name__
        return handler

    def make_create(kind: str, original):
        def handler(self):
            backend = self.sagemaker_backend
            name = self._get_param(_KINDS[kind]["param"])
            existing = _job(backend, kind, name)
            if existing is not None:
                raise ResourceInUseException(message=_KINDS[kind]["unique"].format(arn=existing.arn))
            requested = copy.deepcopy((self._get_param("AlgorithmSpecification") or {}).get("MetricDefinitions"))
            result = original(self)
            _restore_dropped_fields(self, kind, _job(backend, kind, name), requested)
            if kind in _new_job_status:  # a job that runs until the test ends it, as on the service
                job = _job(backend, kind, name)
                setattr(job, _KINDS[kind]["status"], _new_job_status[kind])
                setattr(job, _KINDS[kind]["end"], None)
            return result

        handler.__name__ = original.__name__
        return handler

    # List*(CreationTimeAfter=..., LastModifiedTimeAfter=...): over the JSON protocol these arrive as epoch
    # numbers, which moto compares with its datetimes and fails (TypeError, a 500). Give moto datetimes.
    original_get_param = SageMakerResponse._get_param

    def get_param(self, param_name, if_none=None):
        value = original_get_param(self, param_name, if_none)
        if param_name in _TIME_FILTERS and isinstance(value, (int, float)) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, tz=timezone.utc).replace(tzinfo=None)
        return value

    SageMakerResponse._get_param = get_param

    for kind in _KINDS:
        stop = make_stop(kind)
        setattr(SageMakerResponse, stop.__name__, stop)
        for reader in _READERS[kind]:
            setattr(SageMakerResponse, reader, make_reader(kind, getattr(SageMakerResponse, reader)))
        if _KINDS[kind]["create"]:
            create = _KINDS[kind]["create"]
            setattr(SageMakerResponse, create, make_create(kind, getattr(SageMakerResponse, create)))
    _installed = True


# ---- driving states -------------------------------------------------------------------------------------
def set_job_status(
    kind: str,
    name: str,
    status: str,
    *,
    failure_reason: str | None = None,
    account_id: str = ACCOUNT_ID,
    region: str = REGION,
) -> None:
    """Put job ``name`` of ``kind`` into ``status`` in moto's backend. ``InProgress`` clears the end time."""
    backend = sagemaker_backend(account_id, region)
    job = _job(backend, kind, name)
    if job is None:
        raise KeyError(f"moto has no {kind} job named {name!r}")
    setattr(job, _KINDS[kind]["status"], status)
    setattr(job, _KINDS[kind]["end"], None if status in ("InProgress", "Stopping") else _now())
    job.last_modified_time = _now()
    if failure_reason is not None:
        job.failure_reason = failure_reason
    _pending_stops.pop((account_id, region, kind, name), None)


@contextlib.contextmanager
def new_jobs_in_progress(kind: str):
    """While in the block, a job of ``kind`` created through the server starts ``InProgress`` (moto would
    complete it at once) and stays so until the test moves it on (``set_job_status``)."""
    _new_job_status[kind] = "InProgress"
    try:
        yield
    finally:
        _new_job_status.pop(kind, None)


_DEFAULT_SECONDARY = {"InProgress": "Training", "Completed": "Completed", "Failed": "Failed",
                      "Stopping": "Stopping", "Stopped": "Stopped"}


def set_training_job_status(
    name: str,
    status: str,
    secondary_status: str | None = None,
    failure_reason: str | None = None,
    *,
    account_id: str = ACCOUNT_ID,
    region: str = REGION,
) -> None:
    """Drive training job ``name`` to ``status`` (and ``secondary_status``, default the usual one for it),
    recording the secondary-status transition as DescribeTrainingJob reports it."""
    set_job_status("training", name, status, failure_reason=failure_reason, account_id=account_id, region=region)
    job = _job(sagemaker_backend(account_id, region), "training", name)
    job.secondary_status = secondary_status or _DEFAULT_SECONDARY.get(status, status)
    _append_transition(job, job.secondary_status, f"{job.secondary_status} (set by the test)")


# ---- logs -----------------------------------------------------------------------------------------------
def seed_log_stream(
    endpoint_url: str,
    log_group: str,
    stream: str,
    events: Iterable[tuple[int, str]],
    *,
    region: str = REGION,
) -> None:
    """Create ``log_group``/``stream`` if needed and put ``events`` ((epoch ms, message), ...) into it,
    through the Logs API on the server."""
    import boto3

    logs = boto3.client("logs", endpoint_url=endpoint_url, region_name=region,
                        aws_access_key_id="testing", aws_secret_access_key="testing")
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=log_group)
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_stream(logGroupName=log_group, logStreamName=stream)
    batch = [{"timestamp": int(ts), "message": msg} for ts, msg in events]
    if batch:
        logs.put_log_events(logGroupName=log_group, logStreamName=stream,
                            logEvents=sorted(batch, key=lambda e: e["timestamp"]))


# ---- the server -----------------------------------------------------------------------------------------
class MotoServer:
    """``with MotoServer() as url: ...`` or ``start()`` / ``stop()``; ``endpoint_url`` once started."""

    def __init__(self, ip_address: str = "127.0.0.1", port: int = 0) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address=ip_address, port=port, verbose=False)
        self.endpoint_url: str | None = None

    def start(self) -> str:
        install_sagemaker_extensions()
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        return self.endpoint_url

    def stop(self) -> None:
        self._server.stop()
        self.endpoint_url = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# =========================================================================================================
# ---- tuning jobs: running states, trials, ListTrainingJobsForHyperParameterTuningJob (issue 5) -----------
# =========================================================================================================
# moto creates a tuning job ``Completed`` at once, with a canned BestTrainingJob ("FakeTrainingJobName") and
# counters, launches no training jobs, and has no ListTrainingJobsForHyperParameterTuningJob. This section adds:
#
# * ``start_tuning_job(name)``: the job becomes ``InProgress`` with no trials (counters zero, no best job);
# * ``add_tuning_trial(name, tuned, status=..., objective=...)``: a real moto training job made from the
#   tuning job's TrainingJobDefinition (static + tuned hyperparameters + ``_tuning_objective_metric``), named
#   as SageMaker names trials (``<tuning job>-NNN-<8 hex>``), with its objective in FinalMetricDataList;
#   ``set_tuning_trial(trial, status, objective=...)`` moves it on. The tuning job's TrainingJobStatusCounters,
#   ObjectiveStatusCounters and BestTrainingJob are recomputed from its trials after every change, as the
#   service reports them;
# * ``finish_tuning_job(name, status)``: ``Completed`` / ``Failed`` / ``Stopped`` with an end time;
# * ``plan_tuning_job(name, trials)``: opt-in, before the job is created: its create starts it ``InProgress``
#   and every DescribeHyperParameterTuningJob afterwards takes one step of the plan (start the next trial,
#   or end the running one with its planned status and objective), then ``Completed``; so an operator's
#   wait loop sees a tuning job run, without anything sleeping;
# * the ``ListTrainingJobsForHyperParameterTuningJob`` handler: HyperParameterTrainingJobSummary per trial,
#   StatusEquals, SortBy (Name | CreationTime | Status | FinalObjectiveMetricValue), SortOrder, MaxResults
#   (default 10, as the service) and NextToken paging; a missing tuning job gives moto's ResourceNotFound.
# A StopHyperParameterTuningJob (above) also stops the job's InProgress trials once it reaches Stopped.

#: (account, region, tuning job) -> [{"name": trial, "tuned": {...}}] in launch order
_tuning_trials: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
#: (account, region, tuning job) -> {"steps": [...], "describes_per_step": n, "countdown": n}
_tuning_plans: dict[tuple[str, str, str], dict[str, Any]] = {}
_tuning_installed = False

_TRIAL_STATUSES = ("InProgress", "Completed", "Failed", "Stopping", "Stopped")


def _tuning_job(backend, name: str):
    job = backend.hyper_parameter_tuning_jobs.get(name)
    if job is None:
        raise KeyError(f"moto has no tuning job named {name!r}")
    return job


def _trial_objective(job, tuning) -> float | None:
    metric = tuning.hyper_parameter_tuning_job_config["HyperParameterTuningJobObjective"]["MetricName"]
    for m in job.final_metric_data_list or []:
        if m["MetricName"] == metric:
            return float(m["Value"])
    return None


def _trial_summary(backend, tuning, record: dict[str, Any]) -> dict[str, Any]:
    job = backend.training_jobs[record["name"]]
    objective = tuning.hyper_parameter_tuning_job_config["HyperParameterTuningJobObjective"]
    summary: dict[str, Any] = {
        "TrainingJobName": job.training_job_name, "TrainingJobArn": job.arn,
        "TuningJobName": tuning.hyper_parameter_tuning_job_name, "CreationTime": job.creation_time,
        "TrainingJobStatus": job.training_job_status, "TunedHyperParameters": dict(record["tuned"]),
    }
    if job.training_start_time:
        summary["TrainingStartTime"] = job.training_start_time
    if job.training_end_time and job.training_job_status not in ("InProgress", "Stopping"):
        summary["TrainingEndTime"] = job.training_end_time
    if getattr(job, "failure_reason", None):
        summary["FailureReason"] = job.failure_reason
    if job.training_job_status in ("InProgress", "Stopping"):
        summary["ObjectiveStatus"] = "Pending"
    else:
        value = None if job.training_job_status == "Failed" else _trial_objective(job, tuning)
        if value is None:
            summary["ObjectiveStatus"] = "Failed"
        else:
            summary["ObjectiveStatus"] = "Succeeded"
            summary["FinalHyperParameterTuningJobObjectiveMetric"] = {
                "Type": objective["Type"], "MetricName": objective["MetricName"], "Value": value}
    return summary


def _refresh_tuning_job(backend, name: str) -> None:
    """Counters and BestTrainingJob of tuning job ``name`` from its trials, as the service reports them."""
    tuning = _tuning_job(backend, name)
    records = _tuning_trials.get((backend.account_id, backend.region_name, name), [])
    summaries = [_trial_summary(backend, tuning, r) for r in records]
    counters = {"Completed": 0, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0, "Stopped": 0}
    objectives = {"Succeeded": 0, "Pending": 0, "Failed": 0}
    for s in summaries:
        status = {"Failed": "NonRetryableError", "Stopping": "InProgress"}.get(s["TrainingJobStatus"],
                                                                               s["TrainingJobStatus"])
        counters[status] += 1
        objectives[s["ObjectiveStatus"]] += 1
    tuning.training_job_status_counters = counters
    tuning.objective_status_counters = objectives
    scored = [s for s in summaries if s["ObjectiveStatus"] == "Succeeded"]
    maximize = tuning.hyper_parameter_tuning_job_config["HyperParameterTuningJobObjective"]["Type"] == "Maximize"
    pick = max if maximize else min
    tuning.best_training_job = (pick(scored, key=lambda s: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])
                                if scored else None)
    tuning.OverallBestTrainingJob = None
    tuning.tuning_job_completion_details = {"NumberOfTrainingJobsObjectiveNotImproving": 0}
    end = tuning.hyper_parameter_tuning_end_time or _now()
    tuning.consumed_resources = {"RuntimeInSeconds": int((end - tuning.creation_time).total_seconds())}
    tuning.last_modified_time = _now()


def start_tuning_job(name: str, *, account_id: str = ACCOUNT_ID, region: str = REGION) -> None:
    """Put tuning job ``name`` into ``InProgress`` with no trials (moto creates it Completed, with a canned
    best training job)."""
    backend = sagemaker_backend(account_id, region)
    tuning = _tuning_job(backend, name)
    tuning.hyper_parameter_tuning_job_status = "InProgress"
    tuning.hyper_parameter_tuning_end_time = None
    tuning.failure_reason = ""
    _tuning_trials.setdefault((account_id, region, name), [])
    _refresh_tuning_job(backend, name)


def _set_trial(backend, job, status: str, objective: float | None, failure_reason: str | None, tuning) -> None:
    if status not in _TRIAL_STATUSES:
        raise ValueError(f"status {status!r} is not one of {_TRIAL_STATUSES}")
    metric = tuning.hyper_parameter_tuning_job_config["HyperParameterTuningJobObjective"]["MetricName"]
    job.training_job_status = status
    job.secondary_status = _DEFAULT_SECONDARY.get(status, status)
    job.last_modified_time = _now()
    job.training_end_time = None if status in ("InProgress", "Stopping") else _now()
    if status in ("InProgress", "Stopping"):
        job.model_artifacts = None
    else:
        job.model_artifacts = {"S3ModelArtifacts": f"{job.output_data_config['S3OutputPath'].rstrip('/')}/"
                                                   f"{job.training_job_name}/output/model.tar.gz"}
    if status == "Failed":
        job.model_artifacts = None
    if objective is not None:
        job.final_metric_data_list = [{"MetricName": metric, "Value": float(objective), "Timestamp": _now()}]
    elif status in ("InProgress", "Stopping"):
        job.final_metric_data_list = []
    if failure_reason is not None:
        job.failure_reason = failure_reason
    _append_transition(job, job.secondary_status, f"{job.secondary_status} (set by the test)")


def add_tuning_trial(
    tuning_name: str,
    tuned: dict[str, str],
    *,
    status: str = "InProgress",
    objective: float | None = None,
    failure_reason: str | None = None,
    account_id: str = ACCOUNT_ID,
    region: str = REGION,
) -> str:
    """Launch a trial of tuning job ``tuning_name`` with hyperparameters ``tuned`` (API strings); returns
    its name. The training job is made from the tuning job's TrainingJobDefinition, in ``status``, with
    ``objective`` as the objective metric's final value."""
    import uuid

    backend = sagemaker_backend(account_id, region)
    tuning = _tuning_job(backend, tuning_name)
    records = _tuning_trials.setdefault((account_id, region, tuning_name), [])
    name = f"{tuning_name}-{len(records) + 1:03d}-{uuid.uuid4().hex[:8]}"
    definition = copy.deepcopy(tuning.training_job_definition)
    hyperparameters = dict(definition.get("StaticHyperParameters") or {})
    hyperparameters.update(tuned)
    hyperparameters["_tuning_objective_metric"] = (
        tuning.hyper_parameter_tuning_job_config["HyperParameterTuningJobObjective"]["MetricName"])
    spec = copy.deepcopy(definition["AlgorithmSpecification"])
    backend.create_training_job(
        training_job_name=name, hyper_parameters=hyperparameters, algorithm_specification=spec,
        role_arn=definition["RoleArn"], input_data_config=definition.get("InputDataConfig"),
        output_data_config=definition["OutputDataConfig"], resource_config=definition.get("ResourceConfig"),
        vpc_config=definition.get("VpcConfig"), stopping_condition=definition["StoppingCondition"],
        tags=tuning.tags, enable_network_isolation=definition.get("EnableNetworkIsolation", False),
        enable_inter_container_traffic_encryption=definition.get("EnableInterContainerTrafficEncryption", False),
        enable_managed_spot_training=definition.get("EnableManagedSpotTraining", False),
        checkpoint_config=definition.get("CheckpointConfig"), debug_hook_config=None, debug_rule_configurations=None,
        tensor_board_output_config=None, experiment_config=None)
    job = backend.training_jobs[name]
    spec_back = definition["AlgorithmSpecification"].get("MetricDefinitions")
    if spec_back is None:  # moto writes a canned one; the service keeps the definition's
        job.algorithm_specification.pop("MetricDefinitions", None)
    else:
        job.algorithm_specification["MetricDefinitions"] = spec_back
    job.training_start_time = _now()
    _set_trial(backend, job, status, objective, failure_reason, tuning)
    records.append({"name": name, "tuned": dict(tuned)})
    if tuning.hyper_parameter_tuning_job_status == "Completed" and not tuning.hyper_parameter_tuning_end_time:
        tuning.hyper_parameter_tuning_job_status = "InProgress"
    _refresh_tuning_job(backend, tuning_name)
    return name


def set_tuning_trial(
    trial_name: str,
    status: str,
    *,
    objective: float | None = None,
    failure_reason: str | None = None,
    account_id: str = ACCOUNT_ID,
    region: str = REGION,
) -> None:
    """Move trial ``trial_name`` to ``status`` (with ``objective`` as its final objective value)."""
    backend = sagemaker_backend(account_id, region)
    for (acct, reg, tuning_name), records in _tuning_trials.items():
        if (acct, reg) == (account_id, region) and any(r["name"] == trial_name for r in records):
            tuning = _tuning_job(backend, tuning_name)
            _set_trial(backend, backend.training_jobs[trial_name], status, objective, failure_reason, tuning)
            _refresh_tuning_job(backend, tuning_name)
            return
    raise KeyError(f"{trial_name!r} is not a trial of any tuning job")


def finish_tuning_job(name: str, status: str = "Completed", *, failure_reason: str | None = None,
                      account_id: str = ACCOUNT_ID, region: str = REGION) -> None:
    """End tuning job ``name`` in ``status`` (Completed, Failed or Stopped)."""
    backend = sagemaker_backend(account_id, region)
    tuning = _tuning_job(backend, name)
    tuning.hyper_parameter_tuning_job_status = status
    tuning.hyper_parameter_tuning_end_time = _now()
    if failure_reason is not None:
        tuning.failure_reason = failure_reason
    _refresh_tuning_job(backend, name)


def plan_tuning_job(name: str, trials: list[dict[str, Any]], *, describes_per_step: int = 1,
                    account_id: str = ACCOUNT_ID, region: str = REGION) -> None:
    """Script tuning job ``name`` before it is created. ``trials``: [{"tuned": {...}, "status": "Completed",
    "objective": 0.9, "failure_reason": None}, ...], run one after the other: each takes two steps (start
    InProgress, then end as planned), a step every ``describes_per_step`` Describe calls; then Completed."""
    steps: list[tuple[str, dict[str, Any]]] = []
    for t in trials:
        steps += [("start", t), ("end", t)]
    steps.append(("finish", {}))
    _tuning_plans[(account_id, region, name)] = {"steps": steps, "per": describes_per_step, "countdown": 0,
                                                 "current": None}


def _advance_plan(backend, name: str) -> None:
    key = (backend.account_id, backend.region_name, name)
    plan = _tuning_plans.get(key)
    tuning = backend.hyper_parameter_tuning_jobs.get(name)
    if plan is None or tuning is None or tuning.hyper_parameter_tuning_job_status != "InProgress":
        return
    if plan["countdown"] > 0:
        plan["countdown"] -= 1
        return
    plan["countdown"] = plan["per"] - 1
    kind, step = plan["steps"].pop(0)
    if kind == "start":
        plan["current"] = add_tuning_trial(name, step["tuned"], account_id=backend.account_id,
                                           region=backend.region_name)
    elif kind == "end":
        set_tuning_trial(plan["current"], step.get("status", "Completed"), objective=step.get("objective"),
                         failure_reason=step.get("failure_reason"), account_id=backend.account_id,
                         region=backend.region_name)
    else:
        del _tuning_plans[key]
        finish_tuning_job(name, account_id=backend.account_id, region=backend.region_name)


def _stop_trials_of_stopped(backend, name: str) -> None:
    tuning = backend.hyper_parameter_tuning_jobs.get(name)
    if tuning is None or tuning.hyper_parameter_tuning_job_status != "Stopped":
        return
    changed = False
    for record in _tuning_trials.get((backend.account_id, backend.region_name, name), []):
        job = backend.training_jobs.get(record["name"])
        if job is not None and job.training_job_status in ("InProgress", "Stopping"):
            _set_trial(backend, job, "Stopped", None, None, tuning)
            changed = True
    if changed:
        _refresh_tuning_job(backend, name)


_SORTS = {"Name": lambda s: s["TrainingJobName"], "CreationTime": lambda s: s["CreationTime"],
          "Status": lambda s: s["TrainingJobStatus"]}


def install_tuning_extensions() -> None:
    """Add ListTrainingJobsForHyperParameterTuningJob and the tuning job's running states (idempotent)."""
    global _tuning_installed
    if _tuning_installed:
        return
    from moto.core.responses import ActionResult
    from moto.sagemaker.responses import SageMakerResponse

    def list_training_jobs_for_hyper_parameter_tuning_job(self):
        backend = self.sagemaker_backend
        name = self._get_param("HyperParameterTuningJobName")
        if name not in backend.hyper_parameter_tuning_jobs:
            raise _not_found(backend, "tuning", name)
        _stop_trials_of_stopped(backend, name)
        tuning = backend.hyper_parameter_tuning_jobs[name]
        summaries = [_trial_summary(backend, tuning, r)
                     for r in _tuning_trials.get((backend.account_id, backend.region_name, name), [])]
        status = self._get_param("StatusEquals")
        if status:
            summaries = [s for s in summaries if s["TrainingJobStatus"] == status]
        sort_by = self._get_param("SortBy") or "Name"
        reverse = (self._get_param("SortOrder") or "Ascending") == "Descending"
        if sort_by == "FinalObjectiveMetricValue":
            scored = [s for s in summaries if "FinalHyperParameterTuningJobObjectiveMetric" in s]
            scored.sort(key=lambda s: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"], reverse=reverse)
            summaries = scored + [s for s in summaries if "FinalHyperParameterTuningJobObjectiveMetric" not in s]
        else:
            summaries.sort(key=_SORTS[sort_by], reverse=reverse)
        start = int(self._get_param("NextToken") or 0)
        size = int(self._get_param("MaxResults") or 10)
        page = summaries[start:start + size]
        result: dict[str, Any] = {"TrainingJobSummaries": page}
        if start + size < len(summaries):
            result["NextToken"] = str(start + size)
        return ActionResult(result)

    original_describe = SageMakerResponse.describe_hyper_parameter_tuning_job

    def describe_hyper_parameter_tuning_job(self):
        backend = self.sagemaker_backend
        name = self._get_param("HyperParameterTuningJobName")
        _advance_plan(backend, name)
        result = original_describe(self)  # advances pending stops first (install_sagemaker_extensions)
        if (backend.account_id, backend.region_name, name) in _tuning_trials:
            # a stop that just completed ends the running trials too; answer with the counters after it
            _stop_trials_of_stopped(backend, name)
            _refresh_tuning_job(backend, name)
            result = ActionResult(backend.describe_hyper_parameter_tuning_job(name))
        return result

    original_create = SageMakerResponse.create_hyper_parameter_tuning_job

    def create_hyper_parameter_tuning_job(self):
        result = original_create(self)
        backend = self.sagemaker_backend
        name = self._get_param("HyperParameterTuningJobName")
        if (backend.account_id, backend.region_name, name) in _tuning_plans:
            start_tuning_job(name, account_id=backend.account_id, region=backend.region_name)
        return result

    SageMakerResponse.list_training_jobs_for_hyper_parameter_tuning_job = (
        list_training_jobs_for_hyper_parameter_tuning_job)
    SageMakerResponse.describe_hyper_parameter_tuning_job = describe_hyper_parameter_tuning_job
    SageMakerResponse.create_hyper_parameter_tuning_job = create_hyper_parameter_tuning_job
    _tuning_installed = True


_install_sagemaker_extensions_without_tuning = install_sagemaker_extensions


# ---- List summaries and log filtering as the services answer them ------------------------------------------------
_summary_extensions_installed = False


def install_summary_and_log_extensions() -> None:
    """Two more gaps (idempotent):

    * moto's ListTrainingJobs summaries lack ``SecondaryStatus``, which the service's TrainingJobSummary
      carries; the handler adds it from moto's job.
    * moto's FilterLogEvents ignores ``logStreamNamePrefix`` (it returns every stream's events); the handler
      narrows to the streams with that prefix, as CloudWatch does.
    * moto's FilterLogEvents lists every stream it searched in ``searchedLogStreams`` (one entry per job's
      stream, for the client to parse every call); CloudWatch has returned an empty list there since
      May 2020 (the field is deprecated), and so does the handler.
    """
    global _summary_extensions_installed
    if _summary_extensions_installed:
        return
    import json

    from moto.logs.responses import LogsResponse
    from moto.sagemaker.responses import SageMakerResponse

    original_list = SageMakerResponse.list_training_jobs

    def list_training_jobs(self):
        result = original_list(self)
        body = result if isinstance(result, (str, bytes)) else result.result  # moto >= 5.1: an ActionResult
        body = json.loads(body) if isinstance(body, (str, bytes)) else body
        jobs = self.sagemaker_backend.training_jobs
        for summary in body.get("TrainingJobSummaries", []):
            job = jobs.get(summary["TrainingJobName"])
            if job is not None and getattr(job, "secondary_status", None):
                summary["SecondaryStatus"] = job.secondary_status
        return json.dumps(body, default=str) if isinstance(result, (str, bytes)) else result

    original_filter = LogsResponse.filter_log_events

    def none_searched(result):
        if not isinstance(result, (str, bytes)):
            return result
        body = json.loads(result)
        body["searchedLogStreams"] = []
        return json.dumps(body)

    def filter_log_events(self):
        prefix = self._get_param("logStreamNamePrefix")
        if not prefix or self._get_param("logStreamNames"):
            return none_searched(original_filter(self))
        body = json.loads(self.body or "{}")
        group = self.logs_backend.groups.get(body.get("logGroupName"))
        names = sorted(n for n in (group.streams if group else {}) if n.startswith(prefix))
        if group is not None and not names:
            return json.dumps({"events": [], "searchedLogStreams": []})
        body.pop("logStreamNamePrefix", None)
        if names:
            body["logStreamNames"] = names
        self.body = json.dumps(body)
        return none_searched(original_filter(self))

    SageMakerResponse.list_training_jobs = list_training_jobs
    LogsResponse.filter_log_events = filter_log_events
    _summary_extensions_installed = True


_LISTED = {"list_training_jobs": "TrainingJobSummaries", "list_processing_jobs": "ProcessingJobSummaries",
           "list_transform_jobs": "TransformJobSummaries"}
_filtered_pages_installed = False


def install_filter_then_page_extension() -> None:
    """moto's List{Training,Processing,Transform}Jobs cut a page of ``MaxResults`` jobs out of ALL jobs and
    only then apply the filters (``LastModifiedTimeAfter``, ``NameContains``, ``StatusEquals``, ...), so a
    filter that matches 3 of 2,000 jobs still makes the client page through 20 mostly empty pages. The
    service filters first and pages the matches; the wrapped backend methods do the same (idempotent)."""
    global _filtered_pages_installed
    if _filtered_pages_installed:
        return
    from moto.sagemaker.exceptions import AWSValidationException
    from moto.sagemaker.models import SageMakerModelBackend

    def make(name: str, key: str, original):
        def lister(self, next_token, max_results, **filters):
            matches = original(self, next_token=None, max_results=None, **filters)[key]
            try:
                start = int(next_token) if next_token else 0
                if not 0 <= start <= len(matches):
                    raise ValueError(next_token)
            except ValueError:
                raise AWSValidationException('Invalid pagination token because "{0}".') from None
            end = start + max_results if max_results else len(matches)
            return {key: matches[start:end], "NextToken": str(end) if end < len(matches) else None}

        lister.__name__ = name
        return lister

    for name, key in _LISTED.items():
        setattr(SageMakerModelBackend, name, make(name, key, getattr(SageMakerModelBackend, name)))
    _filtered_pages_installed = True


def install_sagemaker_extensions() -> None:
    """The extensions above plus this section's (MotoServer.start calls this name)."""
    _install_sagemaker_extensions_without_tuning()
    install_tuning_extensions()
    install_summary_and_log_extensions()
    install_filter_then_page_extension()


# =========================================================================================================
# ---- IAM enforcement (issue 30): the server authorizes each call as AWS would, for the policy test ------------
# =========================================================================================================
# moto authorizes calls against the caller's IAM policies once ``INITIAL_NO_AUTH_ACTION_COUNT`` calls have been
# served (an environment variable read when moto is imported: ``serve_with_iam`` runs the server in a process of
# its own, so the suite's other servers stay open). Where moto's authorization differs from AWS's, the test
# server is EXTENDED here, and each difference is said:
#
# * moto checks SageMaker and CloudWatch Logs calls against the resource ``*`` only, so a policy scoped to job
#   ARNs or log groups (as AWS authorizes them) is refused everything. ``_determine_resource`` gives moto the ARN
#   AWS authorizes: the job, model or tuning job the call names (``arn:aws:sagemaker:<region>:<account>:
#   training-job/<name>``; the ``ResourceArn`` of ListTags/AddTags; ``*`` for the List*Jobs calls, which take no
#   resource-level permissions), and the log group (``...:log-group:<group>``, with ``:log-stream:<stream>`` for
#   GetLogEvents).
# * moto names an action after the request's signing name; CloudWatch signs as ``monitoring``, while IAM's
#   actions are ``cloudwatch:...``: the action's prefix is mapped back.
# * every action authorized or refused is recorded (``authorized()``, ``denied()``), so a test can tell which
#   actions a path needs and which refusal a failure came from.
# What moto does not authorize at all is not faked: iam:PassRole when a Create* names a role, and
# sagemaker:AddTags for the tags a Create* carries (tag-on-create) are never checked (no call of their own).
_iam_installed = False
#: (IAM user, action) of each call refused / authorized
_denied: list[tuple[str, str]] = []
_authorized: list[tuple[str, str]] = []

#: SageMaker actions whose resource is their ``ResourceArn`` parameter
_TAG_ACTIONS = ("ListTags", "AddTags", "DeleteTags")
_VERBS = re.compile(r"^(Create|Describe|Stop|Delete|Update|ListTrainingJobsFor)")


def _kebab(noun: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", noun).lower()


def sagemaker_resource(action: str, params: dict[str, Any], region: str, account: str) -> str:
    """The resource AWS authorizes a SageMaker call on (see the section comment)."""
    if action in _TAG_ACTIONS:
        return str(params.get("ResourceArn") or "*")
    match = _VERBS.match(action)
    if not match:  # List*Jobs, Search, ...: no resource-level permissions
        return "*"
    noun = action[match.end():]
    name = params.get(f"{noun}Name")
    if not name:
        return "*"
    return f"arn:aws:sagemaker:{region}:{account}:{_kebab(noun)}/{str(name).lower()}"


def logs_resource(action: str, params: dict[str, Any], region: str, account: str) -> str:
    group = params.get("logGroupName")
    if not group:
        return "*"
    arn = f"arn:aws:logs:{region}:{account}:log-group:{group}"
    if action == "GetLogEvents" and params.get("logStreamName"):
        arn += f":log-stream:{params['logStreamName']}"
    return arn


def denied(user: str | None = None) -> list[str]:
    """The actions refused (to ``user``, default anyone) since the last ``reset_records()``, in order."""
    return [action for who, action in _denied if user in (None, who)]


def authorized(user: str | None = None) -> list[str]:
    """The actions authorized (to ``user``, default anyone) since the last ``reset_records()``, in order."""
    return [action for who, action in _authorized if user in (None, who)]


def _user_of(request) -> str:
    return getattr(getattr(request, "_access_key", None), "_owner_user_name", "?")


def reset_records() -> None:
    _denied.clear()
    _authorized.clear()


#: S3 operations whose IAM action has another name (AWS's "Amazon S3 API operations and the permissions they
#: need"): moto 5.2.6 authorizes an S3 request by its operation's name (HeadObject, ListObjectsV2, ...) where
#: earlier releases used the IAM action, so a policy granting s3:GetObject was refused HeadObject
S3_OPERATION_ACTIONS = {
    "s3:HeadObject": "s3:GetObject", "s3:ListObjectsV2": "s3:ListBucket", "s3:ListObjects": "s3:ListBucket",
    "s3:HeadBucket": "s3:ListBucket", "s3:CreateMultipartUpload": "s3:PutObject", "s3:UploadPart": "s3:PutObject",
    "s3:CompleteMultipartUpload": "s3:PutObject", "s3:CopyObject": "s3:PutObject",
    "s3:DeleteObjects": "s3:DeleteObject", "s3:ListMultipartUploads": "s3:ListBucketMultipartUploads",
    "s3:ListParts": "s3:ListMultipartUploadParts", "s3:ListBuckets": "s3:ListAllMyBuckets",
    "s3:GetObjectAttributes": "s3:GetObject",
}


def install_iam_extensions() -> None:
    """Resources and action names as AWS authorizes them, and a record of refusals (idempotent)."""
    global _iam_installed
    if _iam_installed:
        return
    import json

    from moto.iam.access_control import IAMRequest, IAMRequestBase, S3IAMRequest
    from moto.logs.responses import LogsResponse
    from moto.sagemaker.responses import SageMakerResponse

    def body(response) -> dict[str, Any]:
        try:
            return json.loads(response.body or "{}")
        except (TypeError, ValueError):
            return {}

    def sagemaker_determine(self) -> str:
        return sagemaker_resource(self._get_action(), body(self), self.region, self.current_account)

    def logs_determine(self) -> str:
        return logs_resource(self._get_action(), body(self), self.region, self.current_account)

    SageMakerResponse._determine_resource = sagemaker_determine
    LogsResponse._determine_resource = logs_determine

    original_init = IAMRequestBase.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if self._action.startswith("monitoring:"):
            self._action = "cloudwatch:" + self._action[len("monitoring:"):]
        self._action = S3_OPERATION_ACTIONS.get(self._action, self._action)

    IAMRequestBase.__init__ = init
    original_check = IAMRequestBase.check_action_permitted

    def check_action_permitted(self, resource):
        original_check(self, resource)  # raises when refused
        _authorized.append((_user_of(self), self._action))

    IAMRequestBase.check_action_permitted = check_action_permitted
    for cls in (IAMRequest, S3IAMRequest):
        def make(original):
            def raise_access_denied(self):
                _denied.append((_user_of(self), self._action))
                original(self)

            return raise_access_denied

        cls._raise_access_denied = make(cls._raise_access_denied)
    _iam_installed = True


def _set_new_job_status(kind: str, status: str | None) -> None:
    if status is None:
        _new_job_status.pop(kind, None)
    else:
        _new_job_status[kind] = status


#: what a test may ask the IAM server's process to do (``IamMotoServer.call``)
_IAM_SERVER_CALLS = {
    "set_job_status": lambda *a, **k: set_job_status(*a, **k),
    "set_training_job_status": lambda *a, **k: set_training_job_status(*a, **k),
    "set_new_job_status": _set_new_job_status,
    "plan_tuning_job": lambda *a, **k: plan_tuning_job(*a, **k),
    "denied": denied,
    "authorized": authorized,
    "reset_records": reset_records,
}


def serve_with_iam() -> None:
    """The IAM server's process (``python moto_server.py --iam``, ``INITIAL_NO_AUTH_ACTION_COUNT`` set): prints
    ``{"endpoint": url}``, then answers one JSON line ``{"call": name, "args": [...], "kwargs": {...}}`` of
    stdin at a time with ``{"result": ...}`` or ``{"error": "..."}`` on stdout, until stdin closes."""
    import json
    import sys

    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on the test's stderr
    install_iam_extensions()
    server = MotoServer()
    print(json.dumps({"endpoint": server.start()}), flush=True)
    try:
        for line in sys.stdin:
            request = json.loads(line)
            try:
                result = _IAM_SERVER_CALLS[request["call"]](*request.get("args", []), **request.get("kwargs", {}))
                answer = {"result": result}
            except Exception as exc:  # noqa: BLE001 - the test reads it
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer, default=str), flush=True)
    finally:
        server.stop()


class IamMotoServer:
    """A moto server in a process of its own that enforces IAM after its first ``no_auth_calls`` calls
    (moto's ``INITIAL_NO_AUTH_ACTION_COUNT``); ``call(name, ...)`` runs one of the state helpers above in it."""

    def __init__(self, no_auth_calls: int) -> None:
        self.no_auth_calls = no_auth_calls
        self.endpoint_url: str | None = None
        self._process: Any = None
        import threading

        self._lock = threading.Lock()  # one request and its answer at a time on the pipe

    def start(self) -> str:
        import json
        import os
        import subprocess
        import sys

        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(self.no_auth_calls)}
        self._process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--iam"], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the IAM moto server did not start (exit {self._process.wait()})")
        self.endpoint_url = json.loads(line)["endpoint"]
        return self.endpoint_url

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        import json

        with self._lock:
            self._process.stdin.write(json.dumps({"call": name, "args": list(args), "kwargs": kwargs}) + "\n")
            self._process.stdin.flush()
            answer = json.loads(self._process.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"{name}: {answer['error']}")
        return answer["result"]

    def stop(self) -> None:
        if self._process is not None:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=30)
            except Exception:  # noqa: BLE001 - it is ours to end
                self._process.kill()
                self._process.wait()
            self._process = None
        self.endpoint_url = None


if __name__ == "__main__" and sys.argv[1:] == ["--iam"]:
    serve_with_iam()
