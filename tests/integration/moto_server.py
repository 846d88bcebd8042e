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
* moto's CreateProcessingJob drops ``ProcessingResources`` and ``Environment``; the wrapper keeps them, so
  DescribeProcessingJob returns them as the service does.
* moto's CreateTrainingJob replaces the request's ``AlgorithmSpecification.MetricDefinitions`` with a
  canned one; the wrapper puts the request's back (or removes the key if the request had none).
* ``set_job_status`` / ``set_training_job_status`` drive a job's state directly in moto's backend
  (``moto.sagemaker.models.sagemaker_backends[account][region]``), for tests needing InProgress or Failed.
* moto makes no log streams; ``seed_log_stream`` writes one through the real Logs API on the server.
* moto's List* time filters (``LastModifiedTimeAfter``, ...) arrive over the JSON protocol as epoch numbers
  and moto compares them with datetimes (a 500); ``_get_param`` hands moto datetimes for them.
"""

from __future__ import annotations

import contextlib
import copy
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


def install_sagemaker_extensions() -> None:
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
            if kind == "processing":  # moto drops these two; DescribeProcessingJob returns them
                job = _job(backend, kind, name)
                job.processing_resources = self._get_param("ProcessingResources")
                job.environment = self._get_param("Environment")
            if kind == "training":
                spec = _job(backend, kind, name).algorithm_specification
                if requested is None:
                    spec.pop("MetricDefinitions", None)
                else:
                    spec["MetricDefinitions"] = requested
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
