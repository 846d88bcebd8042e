"""The Backend protocol: one interface for every job kind, in the SageMaker API's own shapes.

A backend takes a Create*Job request (the dict the SageMaker API takes), runs it, and answers Describe*
in the shape SageMaker answers it, with SageMaker's statuses. Operators, sensors and triggers only talk
to this protocol, so the same DAG runs on the ``local`` backend and on ``sagemaker``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from airflow_smdist.kinds import JOB_KINDS, KINDS, JobKind, Operation, kind_info

__all__ = ["JOB_KINDS", "KINDS", "JobKind", "kind_info"]  # re-exported: the registry lives in kinds.py

RUNNING_STATES = frozenset({"InProgress", "Stopping", "Pending"})
TERMINAL_STATES = frozenset({"Completed", "Failed", "Stopped"})
SUCCESS_STATES = frozenset({"Completed"})


def operation(kind: str, what: Operation) -> str:
    """The API operation ``what`` (create, describe, stop, list) of job kind ``kind``."""
    return kind_info(kind).operation(what)


def job_name_of(kind: str, request: dict[str, Any]) -> str:
    return kind_info(kind).job_name(request)


def status_of(kind: str, description: dict[str, Any]) -> str:
    return kind_info(kind).status(description)


@dataclass(frozen=True)
class LogEvent:
    """One log line of one host of a job. ``timestamp`` is epoch seconds."""

    timestamp: float
    host: str
    message: str

    def format(self) -> str:
        return f"[{self.host}] {self.message}"


def tuning_log_events(backend: Any, name: str, cursor: Any = None) -> tuple[list[LogEvent], dict[str, Any]]:
    """A tuning job's logs are its trials' (training jobs') logs: every host of every trial, merged by
    time, each line prefixed ``<trial suffix>/<host>``. ``cursor`` holds one cursor per trial."""
    cursor = dict(cursor or {})
    events: list[LogEvent] = []
    for summary in backend.list_training_jobs_for_tuning_job(name):
        trial = summary["TrainingJobName"]
        try:
            new, cursor[trial] = backend.log_events("training", trial, cursor.get(trial))
        except JobNotFound:
            continue
        short = trial[len(name) + 1:] if trial.startswith(name + "-") else trial
        events += [LogEvent(e.timestamp, f"{short}/{e.host}", e.message) for e in new]
    events.sort(key=lambda e: (e.timestamp, e.host))
    return events, cursor


class BackendError(RuntimeError):
    """A backend call failed. Keeps the service's own error code and message (never 'request failed')."""

    def __init__(self, message: str, *, code: str | None = None, operation: str | None = None) -> None:
        self.code = code
        self.operation = operation
        prefix = ""
        if operation:
            prefix += f"{operation} failed"
        if code:
            prefix += f" ({code})"
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ResourceNotFound(BackendError):
    """A call named a job or model that does not exist (SageMaker answers ValidationException)."""


class ResourceExists(BackendError):
    """A Create call named a job or model that already exists."""


class ModelNotFound(ResourceNotFound):
    """DescribeModel/DeleteModel of a model that does not exist."""

    def __init__(self, message: str, *, operation: str | None = None) -> None:
        super().__init__(message, code="ValidationException", operation=operation)


class JobNotFound(ResourceNotFound):
    """Describe/Stop of a job that does not exist."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f"{kind} job {name!r} does not exist", code="ValidationException")


@runtime_checkable
class Backend(Protocol):
    """What every backend does, for every job kind."""

    name: str

    def check(self, kind: JobKind, request: dict[str, Any]) -> None:
        """Raise SpecError for what :meth:`submit` would refuse of ``request`` before calling or writing
        anything (its validation, and what this backend cannot run); starts nothing."""

    def submit(self, kind: JobKind, request: dict[str, Any]) -> str:
        """Start the job the Create*Job ``request`` describes; return its name. Raises BackendError."""

    def describe(self, kind: JobKind, name: str) -> dict[str, Any]:
        """Describe*Job response (SageMaker's shape and statuses). Raises JobNotFound."""

    def stop(self, kind: JobKind, name: str) -> None:
        """Stop*Job: ask the job to stop (it then goes Stopping -> Stopped). No-op for a finished job."""

    def wait_for_change(self, kind: JobKind, names: str | list[str], timeout: float) -> None:
        """Block until the state of the job ``names`` (or of any of several) may have changed, at most ``timeout`` seconds (sagemaker: sleeps the
        poll interval; local: returns within a fraction of a second of a state change)."""

    def log_events(
        self, kind: JobKind, name: str, cursor: Any = None
    ) -> tuple[list[LogEvent], Any]:
        """New log events of every host since ``cursor`` (None: from the start), ordered by time, and the
        cursor to pass next time. Cursors are JSON-serialisable so a trigger can carry them."""
