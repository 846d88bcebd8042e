"""The Backend protocol: one interface for every job kind, in the SageMaker API's own shapes.

A backend takes a Create*Job request (the dict the SageMaker API takes), runs it, and answers Describe*
in the shape SageMaker answers it, with SageMaker's statuses. Operators, sensors and triggers only talk
to this protocol, so the same DAG runs on the ``local`` backend and on ``sagemaker``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from airflow_smdist.kinds import JOB_KINDS, KINDS, JobKind, kind_info

if TYPE_CHECKING:
    from airflow_smdist.storage import Storage

__all__ = ["JOB_KINDS", "KINDS", "JobKind", "kind_info"]  # re-exported: the registry lives in kinds.py

RUNNING_STATES = frozenset({"InProgress", "Stopping", "Pending"})
TERMINAL_STATES = frozenset({"Completed", "Failed", "Stopped"})
#: a SageMaker job name, every kind's (the API's TrainingJobName, ProcessingJobName, ... pattern): 1 to 63 letters,
#: digits and hyphens, starting and ending with a letter or digit; no path separators, no dots
JOB_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
#: what a user is told when a name is not one
JOB_NAME_RULE = "a job name is 1 to 63 letters, digits and hyphens, starting and ending with a letter or digit"
SUCCESS_STATES = frozenset({"Completed"})


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
        # "DescribeTrainingJob failed (ValidationException): ...", "(ValidationException): ..." (no operation)
        prefix = " ".join(p for p in (f"{operation} failed" if operation else "", f"({code})" if code else "") if p)
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


@dataclass(frozen=True)
class Capabilities:
    """What a backend allows and offers, as facts the operators, links and waits read instead of its name."""

    #: requests may name ``file://`` URIs (the job's data and code stay on this machine)
    local_uris: bool = False
    #: jobs run as a real IAM role: an operator needs ``role`` (the local placeholder is refused)
    iam_role: bool = False
    #: where a job's console links go: "aws" (the AWS console's job and log pages), "plugin" (the job page the
    #: provider's Airflow plugin serves), None (no links)
    console: Literal["aws", "plugin"] | None = None
    #: a blocking wait of several jobs reads their statuses and lines from the backend's status source in
    #: coalesced rounds (one List, one log read for all; see lifecycle.CoalescedRounds) instead of per job
    coalesced_waits: bool = False
    #: a job's log is read the same from any machine (CloudWatch), so a trigger keeps its log cursor where every
    #: triggerer reads it (its task instance's XCom) rather than in :meth:`Backend.log_cursor_store`'s file; the
    #: local backend's jobs, and their logs, are on one machine, and its cursor file goes with the job
    shared_log_cursor: bool = False


#: each backend's capabilities by name, for the callers that hold a backend's name only (an XCom's link
#: arguments, a plan made for a named backend): the adapters' own ``capabilities`` are these
CAPABILITIES: dict[str, Capabilities] = {
    "local": Capabilities(local_uris=True, iam_role=False, console="plugin", coalesced_waits=False,
                          shared_log_cursor=False),
    "sagemaker": Capabilities(local_uris=False, iam_role=True, console="aws", coalesced_waits=True,
                              shared_log_cursor=True),
}


def capabilities(backend: Backend | str | None) -> Capabilities:
    """A backend's capabilities (a Backend, or its name: none for a name no backend has)."""
    if backend is None or isinstance(backend, str):
        return CAPABILITIES.get(backend or "", Capabilities())
    return backend.capabilities


class LogCursorStore(Protocol):
    """Where a trigger keeps a job's log cursor, so that a trigger rebuilt from its kwargs (a triggerer restart,
    or the trigger moved to another triggerer) resumes it: no line twice, none lost. A record is
    ``{"key": <the deferral's cursor_key>, "cursor": <the backend's JSON-serialisable cursor>}``. Both calls are
    awaited in the triggerer's event loop and must not block it."""

    async def load(self) -> dict[str, Any] | None:
        """The record saved last (None: none, or unreadable)."""
        ...

    async def save(self, record: dict[str, Any]) -> None:
        """Keep ``record`` in place of the one saved before. Raises OSError (or the store's error) on failure."""
        ...


class FileCursorStore:
    """A log cursor in a small JSON file on this machine (the backend says where): what a trigger uses when it
    has no task instance (built by hand) or on a backend whose cursor does not travel (the local backend)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"FileCursorStore({str(self.path)!r})"

    def read(self) -> dict[str, Any] | None:
        try:
            saved = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return saved if isinstance(saved, dict) else None

    def write(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.path)

    async def load(self) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.read)

    async def save(self, record: dict[str, Any]) -> None:
        await asyncio.to_thread(self.write, record)


class LogReader(Protocol):
    """The new log lines of a changing set of jobs of one kind, one read for all of them a round (what the
    triggers' ``CoalescedLogPoller`` and the blocking ``CoalescedRounds`` read with)."""

    #: a job has no line to read before its containers start (its secondary status says so): a wait makes
    #: no round while every job it watches is so
    silent_before_containers: bool

    def add(self, name: str, cursor: Any) -> None:
        """Read ``name``'s lines from ``cursor`` (None: from the start) from the next round on."""

    def remove(self, name: str) -> None:
        """Read no more of ``name``'s lines."""

    async def read(self) -> dict[str, tuple[list[LogEvent], Any]]:
        """One round: the new lines of each job that has some, and its cursor after them."""
        ...


class StatusSource(Protocol):
    """A backend's statuses and log lines for many jobs with few calls, asynchronously: what the triggers'
    pollers and ``CoalescedRounds`` share. Shared by several pollers: each calls :meth:`acquire` when it
    starts using it and :meth:`close` when it stops; the last close releases the clients."""

    #: calls made so far, by what ("list", "describe", "logs", ...)
    calls: dict[str, int]

    def acquire(self) -> None: ...

    async def close(self) -> None: ...

    async def changes(self, kind: str, since: float | None) -> tuple[dict[str, dict[str, Any]], float | None]:
        """(the summaries of the jobs of ``kind`` modified after ``since`` (epoch), by name; the source's
        clock when it answered (epoch; None when unknown))."""
        ...

    async def changed_since(self, kind: str, since: float | None) -> dict[str, dict[str, Any]]: ...

    async def describe(self, kind: str, name: str) -> dict[str, Any]:
        """Describe*Job. Raises JobNotFound."""
        ...

    def log_reader(self, kind: str) -> LogReader:
        """A reader of the new lines of a changing set of jobs of ``kind`` (one per log poller)."""
        ...


@runtime_checkable
class Backend(Protocol):
    """What every backend does, for every job kind: all that the operators, sensors, triggers and the
    lifecycle use of a backend (nothing outside ``backends/`` asks for a backend by its name)."""

    name: str
    #: what this backend allows and offers (see :class:`Capabilities`)
    capabilities: Capabilities
    #: a job writes no log line the backend can read before its containers start (CloudWatch): see
    #: ``JobKindInfo.no_lines_yet``
    silent_before_containers: bool
    #: the S3 endpoint this backend's jobs use, where it sets one (the local backend's connection setting)
    s3_endpoint_url: str | None

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
        """Block until the state of the job ``names`` (or of any of several) may have changed, at most
        ``timeout`` seconds (sagemaker: sleeps the poll interval; local: returns within a fraction of a second of
        a state change)."""

    def log_events(
        self, kind: JobKind, name: str, cursor: Any = None
    ) -> tuple[list[LogEvent], Any]:
        """New log events of every host since ``cursor`` (None: from the start), ordered by time, and the
        cursor to pass next time. Cursors are JSON-serialisable so a trigger can carry them."""

    def list_tags(self, kind: JobKind, name: str) -> list[dict[str, str]]:
        """ListTags of the job (every page). Raises JobNotFound."""
        ...

    def list_jobs(self, kind: JobKind, *, name_contains: str | None = None,
                  status: str | None = None) -> list[dict[str, Any]]:
        """List*Jobs summaries (every page), optionally filtered by name substring and status."""
        ...

    def list_training_jobs_for_tuning_job(self, name: str, *, status_equals: str | None = None,
                                          sort_by: str | None = None,
                                          sort_order: str | None = None) -> list[dict[str, Any]]:
        """ListTrainingJobsForHyperParameterTuningJob: every trial's summary (every page)."""
        ...

    def create_model(self, request: dict[str, Any]) -> str:
        """CreateModel; the model's ARN. Raises ResourceExists."""
        ...

    def describe_model(self, name: str) -> dict[str, Any]:
        """DescribeModel. Raises ModelNotFound."""
        ...

    def delete_model(self, name: str) -> None: ...

    def status_source(self) -> StatusSource:
        """A new asynchronous source of this backend's statuses and log lines (not yet acquired)."""
        ...

    def status_source_key(self) -> tuple[Any, ...]:
        """What identifies this backend's status source: backends with the same key share one source (and its
        pollers) in a triggerer's event loop."""
        ...

    def first_log_cursor(self, created: float | None) -> Any:
        """The log cursor a wait starts from for a job created at ``created`` (epoch; None: unknown)."""
        ...

    def log_cursor_store(self, kind: JobKind, name: str) -> LogCursorStore:
        """The file where a trigger keeps the job's log cursor when the trigger has no task instance, or on a
        backend without :attr:`Capabilities.shared_log_cursor` (a trigger with a task instance on a backend
        with it keeps the cursor in the task instance's XCom: ``airflow_smdist.triggers.cursor``)."""
        ...

    def job_dir(self, kind: JobKind, name: str) -> Path | None:
        """The job's directory on this machine (state, logs, hosts' trees); None where the backend keeps none."""
        ...

    def storage(self) -> Storage:
        """Storage that reaches this backend's objects (S3 as its jobs see it; file:// locally)."""
        ...

    def default_code_location(self) -> str:
        """Where local code goes when the operator names no ``code_location`` (the SageMaker SDK's default
        bucket on SageMaker)."""
        ...

