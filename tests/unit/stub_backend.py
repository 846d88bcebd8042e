"""An in-memory :class:`~airflow_smdist.backends.base.Backend` for unit tests of the lifecycle and the pollers
(as the Kubernetes provider tests its ``PodManager`` against a stubbed client).

* **Jobs move through scripted states.** ``add_job`` makes a job that exists already (an earlier try's),
  ``plan`` says what a job created later will answer; each Describe takes the next scripted answer (the last
  one sticks). An answer is a status (``"InProgress"``) or a dict of Describe fields (``state(...)``); the
  key ``"_lines"`` of an answer appends those log lines to the job when the answer is reached.
* **Typed errors.** ``fail(op, *errors)`` makes the next calls of ``op`` raise ``errors`` (one each), the same
  typed errors the real backends raise: :func:`throttling`, :func:`validation`, :func:`access_denied`
  (``BackendError`` with the service's code), ``JobNotFound`` for a job that does not exist, the local
  backend's name conflict on a second Create of a name.
* **Every call is recorded** in ``calls`` (``Call(op, kind, name)``); ``count(op, name)`` counts them.
* **Its status source** (:class:`StubStatusSource`) answers ``changes`` (the List round) from a script of
  its own (``script_list``: summaries or an error per List call), describes the backend's jobs, and reads
  their log lines through the production per-job reader (``PerJobLogReader``: cursor = index of the next
  line). Like the SageMaker source it retries throttling errors inside (``acall_with_backoff``); with
  ``backoff=False`` they reach the caller (as from a source with no backoff of its own).

Nothing sleeps: ``wait_for_change`` returns at once (it records the pause it was asked for).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from airflow_smdist.backends.base import (
    TERMINAL_STATES,
    Backend,
    BackendError,
    Capabilities,
    FileCursorStore,
    JobNotFound,
    LogEvent,
    ModelNotFound,
    ResourceExists,
    StatusSource,
)
from airflow_smdist.backends.local.status_source import PerJobLogReader
from airflow_smdist.kinds import kind_info
from airflow_smdist.lifecycle import acall_with_backoff
from airflow_smdist.storage import Storage

#: a scripted Describe answer: a status, or Describe fields (a missing status keeps the previous one)
State = str | dict[str, Any]


def throttling(operation: str = "DescribeTrainingJob") -> BackendError:
    """The error SageMaker answers "slow down" with, as the sagemaker backend raises it."""
    return BackendError("Rate exceeded", code="ThrottlingException", operation=operation)


def validation(message: str, operation: str = "CreateTrainingJob") -> BackendError:
    return BackendError(message, code="ValidationException", operation=operation)


def access_denied(operation: str = "ListTrainingJobs") -> BackendError:
    return BackendError("User is not authorized to perform: sagemaker:" + operation, code="AccessDeniedException",
                        operation=operation)


def state(status: str | None = None, secondary: str | None = None, **fields: Any) -> dict[str, Any]:
    """A scripted answer: ``state("Failed", "Failed", FailureReason="AlgorithmError: boom")``; ``_lines=[...]``
    appends those lines to the job's log when the answer is reached."""
    out = dict(fields)
    if status is not None:
        out["_status"] = status
    if secondary is not None:
        out["SecondaryStatus"] = secondary
    return out


def summary(kind: str, name: str, status: str, secondary: str | None = None, *,
            modified: float | None = None, **fields: Any) -> dict[str, Any]:
    """A List*Jobs summary of job ``name`` (what a List round returns for it)."""
    info = kind_info(kind)
    out: dict[str, Any] = {info.name_key: name, info.status_key: status,
                           "LastModifiedTime": datetime.fromtimestamp(modified or time.time(), tz=UTC), **fields}
    if secondary is not None:
        out["SecondaryStatus"] = secondary
    return out


class Call(NamedTuple):
    op: str
    kind: str | None
    name: str | None


@dataclass
class StubJob:
    kind: str
    name: str
    answers: deque[dict[str, Any]]
    current: dict[str, Any]
    tags: list[dict[str, str]] = field(default_factory=list)
    request: dict[str, Any] | None = None
    lines: list[LogEvent] = field(default_factory=list)
    #: a Stop makes it answer Stopping, then Stopped (False: it ignores Stop)
    stops: bool = True

    @property
    def status(self) -> str:
        return str(self.current.get(kind_info(self.kind).status_key, ""))


def _as_answer(entry: State) -> dict[str, Any]:
    return {"_status": entry} if isinstance(entry, str) else dict(entry)


class StubBackend:
    """An in-memory backend whose jobs follow scripts; see the module docstring."""

    name = "stub"
    silent_before_containers = False
    s3_endpoint_url: str | None = None

    def __init__(self, *, coalesced_waits: bool = False, backoff: bool = True, root: Path | None = None,
                 default_states: Iterable[State] = ("InProgress", "Completed")) -> None:
        self.capabilities = Capabilities(coalesced_waits=coalesced_waits)
        self.jobs: dict[tuple[str, str], StubJob] = {}
        self.plans: dict[tuple[str, str], list[State]] = {}
        self.default_states = list(default_states)
        self.errors: dict[str, deque[BaseException]] = {}
        self.calls: list[Call] = []
        #: the ``timeout`` of every wait_for_change call (the lifecycle's pauses)
        self.pauses: list[float] = []
        #: called on every wait_for_change (a test's hook: the world moves on while the lifecycle pauses)
        self.on_pause: Callable[[], None] | None = None
        self.models: dict[str, dict[str, Any]] = {}
        self.root = root or Path(tempfile.gettempdir()) / f"smdist-stub-{id(self)}"
        self.source = StubStatusSource(self, backoff=backoff)

    # -- scripting -------------------------------------------------------------------------------------------
    def add_job(self, kind: str, name: str, states: Iterable[State], *, tags: list[dict[str, str]] | None = None,
                lines: Iterable[str] = (), stops: bool = True) -> StubJob:
        """A job that exists already (an earlier try's): ``states`` are its Describe answers, in order."""
        job = StubJob(kind, name, deque(_as_answer(s) for s in states), self._fields(kind, name, "InProgress"),
                      tags=list(tags or []), stops=stops)
        if job.answers:  # what List and ListTags see before the first Describe (which answers the same)
            self._apply(job, job.answers[0], lines=False)
        job.lines += [LogEvent(float(i), "algo-1", line) for i, line in enumerate(lines)]
        self.jobs[(kind, name)] = job
        return job

    def plan(self, kind: str, name: str, states: Iterable[State]) -> None:
        """What the job ``name`` answers once it is created (default: ``default_states``)."""
        self.plans[(kind, name)] = list(states)

    def fail(self, op: str, *errors: BaseException) -> None:
        """The next ``len(errors)`` calls of ``op`` ("submit", "describe", "stop", "log_events", "list_tags",
        ...) raise these errors, one each."""
        self.errors.setdefault(op, deque()).extend(errors)

    def add_lines(self, kind: str, name: str, *lines: str, host: str = "algo-1") -> None:
        job = self.job(kind, name)
        job.lines += [LogEvent(float(len(job.lines) + i), host, line) for i, line in enumerate(lines)]

    def job(self, kind: str, name: str) -> StubJob:
        job = self.jobs.get((kind, name))
        if job is None:
            raise JobNotFound(kind, name)
        return job

    def count(self, op: str, name: str | None = None) -> int:
        return sum(1 for c in self.calls if c.op == op and (name is None or c.name == name))

    # -- internals -------------------------------------------------------------------------------------------
    def _fields(self, kind: str, name: str, status: str) -> dict[str, Any]:
        info = kind_info(kind)
        now = datetime.now(tz=UTC)
        return {info.name_key: name, info.status_key: status, info.arn_key: info.arn("us-east-1", "123456789012", name),
                "CreationTime": now, "LastModifiedTime": now}

    def _record(self, op: str, kind: str | None = None, name: str | None = None) -> None:
        self.calls.append(Call(op, kind, name))
        pending = self.errors.get(op)
        if pending:
            raise pending.popleft()

    def _advance(self, job: StubJob) -> None:
        """The job's next scripted answer becomes its state (the last one stays)."""
        if job.answers:
            self._apply(job, job.answers.popleft(), lines=True)

    def _apply(self, job: StubJob, answer: dict[str, Any], *, lines: bool) -> None:
        fields = {k: v for k, v in answer.items() if not k.startswith("_")}
        job.current = {**job.current, **fields, "LastModifiedTime": datetime.now(tz=UTC)}
        if "_status" in answer:
            job.current[kind_info(job.kind).status_key] = answer["_status"]
        for line in answer.get("_lines", ()) if lines else ():
            job.lines.append(LogEvent(float(len(job.lines)), "algo-1", line))

    def peek(self, kind: str, name: str) -> dict[str, Any]:
        """The job's Describe answer, advancing its script (no call recorded: the status source's describe)."""
        job = self.job(kind, name)
        self._advance(job)
        return dict(job.current)

    # -- the protocol ----------------------------------------------------------------------------------------
    def check(self, kind: str, request: dict[str, Any]) -> None:
        self._record("check", kind, kind_info(kind).job_name(request))

    def submit(self, kind: str, request: dict[str, Any]) -> str:
        self.check(kind, request)
        name = kind_info(kind).job_name(request)
        self._record("submit", kind, name)
        if (kind, name) in self.jobs:  # the local backend's answer (SageMaker's is the same ValidationException)
            raise validation(f"Job name must be unique within an AWS account and region, and a job with this "
                             f"name already exists ({name})", kind_info(kind).create_op)
        job = self.add_job(kind, name, self.plans.pop((kind, name), self.default_states),
                           tags=list(request.get("Tags") or []))
        job.request = request
        return name

    def describe(self, kind: str, name: str) -> dict[str, Any]:
        self._record("describe", kind, name)
        return self.peek(kind, name)

    def stop(self, kind: str, name: str) -> None:
        self._record("stop", kind, name)
        job = self.job(kind, name)
        if job.status in TERMINAL_STATES or not job.stops:
            return
        job.answers = deque([{"_status": "Stopping"}, {"_status": "Stopped"}])

    def wait_for_change(self, kind: str, names: str | list[str], timeout: float) -> None:
        self._record("wait_for_change", kind, names if isinstance(names, str) else ",".join(names))
        self.pauses.append(timeout)
        if self.on_pause is not None:
            self.on_pause()

    def log_events(self, kind: str, name: str, cursor: Any = None) -> tuple[list[LogEvent], Any]:
        self._record("log_events", kind, name)
        job = self.job(kind, name)
        start = int(cursor or 0)
        return job.lines[start:], len(job.lines)

    def list_tags(self, kind: str, name: str) -> list[dict[str, str]]:
        self._record("list_tags", kind, name)
        return list(self.job(kind, name).tags)

    def list_jobs(self, kind: str, *, name_contains: str | None = None,
                  status: str | None = None) -> list[dict[str, Any]]:
        self._record("list_jobs", kind)
        info = kind_info(kind)
        return [summary(kind, job.name, job.status, job.current.get("SecondaryStatus"),
                        modified=job.current["LastModifiedTime"].timestamp())
                for (k, n), job in self.jobs.items()
                if k == kind and (not name_contains or name_contains in n)
                and (status is None or job.current.get(info.status_key) == status)]

    def list_training_jobs_for_tuning_job(self, name: str, *, status_equals: str | None = None,
                                          sort_by: str | None = None,
                                          sort_order: str | None = None) -> list[dict[str, Any]]:
        self._record("list_training_jobs_for_tuning_job", "tuning", name)
        return [s for s in self.list_jobs("training", name_contains=name + "-")
                if status_equals is None or s["TrainingJobStatus"] == status_equals]

    def create_model(self, request: dict[str, Any]) -> str:
        name = str(request["ModelName"])
        self._record("create_model", None, name)
        if name in self.models:
            raise ResourceExists(f"Model {name} already exists", code="ValidationException", operation="CreateModel")
        self.models[name] = dict(request)
        return f"arn:aws:sagemaker:us-east-1:123456789012:model/{name.lower()}"

    def describe_model(self, name: str) -> dict[str, Any]:
        self._record("describe_model", None, name)
        if name not in self.models:
            raise ModelNotFound(f"Could not find model {name}", operation="DescribeModel")
        return dict(self.models[name])

    def delete_model(self, name: str) -> None:
        self._record("delete_model", None, name)
        if self.models.pop(name, None) is None:
            raise ModelNotFound(f"Could not find model {name}", operation="DeleteModel")

    def status_source(self) -> StubStatusSource:
        """This stub's one status source (the same each call, so a test scripts what the pollers read)."""
        return self.source

    def status_source_key(self) -> tuple[Any, ...]:
        return ("stub", id(self))

    def first_log_cursor(self, created: float | None) -> Any:
        return None

    def log_cursor_store(self, kind: str, name: str) -> FileCursorStore:
        return FileCursorStore(self.root / kind / f"{name}.cursor.json")

    def job_dir(self, kind: str, name: str) -> Path | None:
        return None

    def storage(self) -> Storage:
        return Storage()

    def default_code_location(self) -> str:
        return "s3://stub-bucket/code"


#: how long a status source call waits for a script before it fails the test (the pollers' next round waits here)
SCRIPT_WAIT_SECONDS = 2.0


class StubStatusSource:
    """The stub backend's asynchronous status source: List rounds and errors from a script, the backend's jobs
    for Describe and log lines. ``list_calls`` keeps the ``since`` of every List call answered (throttled
    ones too, as the service sees them); ``calls`` counts as the real sources count."""

    def __init__(self, backend: StubBackend, *, backoff: bool = True) -> None:
        self.backend = backend
        self.backoff = backoff
        self.calls: dict[str, int] = {}
        self.lists: deque[tuple[dict[str, dict[str, Any]], float | None] | BaseException] = deque()
        self.errors: dict[str, deque[BaseException]] = {}
        self.list_calls: list[float | None] = []
        self.describes: list[str] = []
        #: each log round: the cursors it was asked to read from, by job
        self.log_reads: list[dict[str, Any]] = []
        self.acquired = 0
        self.closed = 0
        #: the readers made (``log_reader``): their ``silent_before_containers`` is this
        self.silent_before_containers = False
        #: a call is waiting for a List answer that is not scripted yet
        self.waiting = False

    # -- scripting -------------------------------------------------------------------------------------------
    def script_list(self, *summaries: dict[str, Any], server_time: float | None = None) -> None:
        """The next List round answers these summaries (see :func:`summary`)."""
        by_name = {}
        for s in summaries:
            key = next(k for k in s if k.endswith("JobName"))
            by_name[s[key]] = s
        self.lists.append((by_name, server_time))

    def script_list_error(self, *errors: BaseException) -> None:
        """The next List calls raise these, one each."""
        self.lists.extend(errors)

    def fail(self, what: str, *errors: BaseException) -> None:
        """The next ``what`` ("describe", "logs") calls raise these, one each."""
        self.errors.setdefault(what, deque()).extend(errors)

    async def until_waiting(self) -> None:
        """Until a List call waits for an answer not scripted yet (every scripted round has been made); fails
        the test after SCRIPT_WAIT_SECONDS."""
        deadline = time.monotonic() + SCRIPT_WAIT_SECONDS
        while not (self.waiting and not self.lists):
            if time.monotonic() > deadline:
                raise AssertionError(f"the poller made no List call after its scripted ones ({self.list_calls})")
            await asyncio.sleep(0.001)

    # -- internals -------------------------------------------------------------------------------------------
    async def _call(self, what: str, call: Callable[[], Awaitable[Any]]) -> Any:
        if self.backoff:
            return await acall_with_backoff(call, counter=self.calls, what=what)
        self.calls[what] = self.calls.get(what, 0) + 1
        return await call()

    def _raise_scripted(self, what: str) -> None:
        pending = self.errors.get(what)
        if pending:
            raise pending.popleft()

    async def _list(self, since: float | None) -> tuple[dict[str, dict[str, Any]], float | None]:
        deadline = time.monotonic() + SCRIPT_WAIT_SECONDS
        while not self.lists:
            self.waiting = True
            if time.monotonic() > deadline:
                self.waiting = False
                raise AssertionError("a List call was made that the test did not script")
            await asyncio.sleep(0.001)
        self.waiting = False
        answer = self.lists.popleft()
        self.list_calls.append(since)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    # -- the StatusSource port -------------------------------------------------------------------------------
    def acquire(self) -> None:
        self.acquired += 1

    async def close(self) -> None:
        self.closed += 1

    async def changes(self, kind: str, since: float | None) -> tuple[dict[str, dict[str, Any]], float | None]:
        answer: tuple[dict[str, dict[str, Any]], float | None] = await self._call("list", lambda: self._list(since))
        return answer

    async def changed_since(self, kind: str, since: float | None) -> dict[str, dict[str, Any]]:
        return (await self.changes(kind, since))[0]

    async def describe(self, kind: str, name: str) -> dict[str, Any]:
        async def call() -> dict[str, Any]:
            self.describes.append(name)
            self._raise_scripted("describe")
            return self.backend.peek(kind, name)

        answer: dict[str, Any] = await self._call("describe", call)
        return answer

    async def read_logs(self, kind: str, cursors: dict[str, Any]) -> dict[str, tuple[list[LogEvent], Any]]:
        """Every asked job's lines from its cursor (the index of its next line), as the local source reads."""
        async def call() -> dict[str, tuple[list[LogEvent], Any]]:
            self.log_reads.append(dict(cursors))
            self._raise_scripted("logs")
            out: dict[str, tuple[list[LogEvent], Any]] = {}
            for name, cursor in cursors.items():
                job = self.backend.jobs.get((kind, name))
                lines = job.lines if job is not None else []
                out[name] = (lines[int(cursor or 0):], len(lines)) if job is not None else ([], cursor)
            return out

        answer: dict[str, tuple[list[LogEvent], Any]] = await self._call("logs", call)
        return answer

    def log_reader(self, kind: str) -> PerJobLogReader:
        reader = PerJobLogReader(self, kind)
        reader.silent_before_containers = self.silent_before_containers
        return reader


# the stub satisfies the ports for mypy too (structural checks: a missing or mistyped member fails lint)
def _is_backend(stub: StubBackend) -> Backend:
    return stub


def _is_status_source(source: StubStatusSource) -> StatusSource:
    return source
