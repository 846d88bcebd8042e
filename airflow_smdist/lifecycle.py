"""The job lifecycle: what every operator, sensor, trigger, shard fan-out, chain link and tuning task does
with a job, written once.

:class:`JobLifecycle` (synchronous: operators and sensors) owns

* **the name**: :meth:`~JobLifecycle.choose` finds the job of this task instance among its attempt names
  (``<base>``, ``<base>-r2``, ... ``-r30``): one still running is reattached, one completed is returned,
  and after ones that failed or were stopped the next free attempt name is taken;
* **submit or reattach**: :meth:`~JobLifecycle.start`;
* **waiting**: :meth:`~JobLifecycle.wait` (one job) and :meth:`~JobLifecycle.wait_all` (many, e.g. the
  shards of a fan-out, each may be replaced by a retry) poll Describe, print new log lines of every host,
  metrics and status changes, and pause up to ``poll_interval`` between rounds (the one polling pause:
  ``Backend.wait_for_change``, which the local backend ends as soon as a job changes); several jobs on
  SageMaker are watched with one List and one log call a round (:class:`CoalescedRounds`);
* **the result or the error**: :meth:`~JobLifecycle.failure_reason` (FailureReason, else the secondary
  status, else the status; plus the ExitMessage where the kind has one) and :meth:`~JobLifecycle.check`,
  which raises :class:`JobFailed` carrying that reason and the last log lines;
* **stopping on kill**: :meth:`~JobLifecycle.stop` stops every job it started or reattached that has not
  ended, and waits (bounded) until they have;
* **throttling**: every call it makes to the backend goes through :func:`call_with_backoff` (full-jitter
  exponential backoff on the service's throttling codes), so waiting, poking, killing and (through
  :func:`acall_with_backoff`) the triggers' polling all slow down under throttling instead of failing.

:class:`AsyncJobLifecycle` is the triggers' half: the status line and the event that ends the wait
(modelled on the Kubernetes provider's ``PodManager``/``AsyncPodManager``).

Ownership. Every job created carries the tags ``smdist:task-instance`` (dag/task/run/map index of the task
instance that made it) and ``smdist:try``. :meth:`JobLifecycle.accept_reattach` is the one place that
decides whether an existing job may be taken over: a job of the chosen name that another task instance
made (or that has no such tag) is refused with :class:`ForeignJob`, never reattached, returned or stopped.

On retry and on clear. A retried task instance runs with the same job name base, so it meets the jobs of
its earlier tries: one still running is reattached (no second job), one completed is returned (not run
again), and after a failed or stopped one the next attempt name is used. A task instance the user
*cleared* runs its job again (``rerun_on_clear=True``, the default: a completed job made before the clear
is passed over for the next attempt name); ``rerun_on_clear=False`` returns that job's result instead.
Two tries of one task instance at once (a zombie and its retry) both choose the same name; the one whose Create
fails because the other's went first takes that job over (:meth:`JobLifecycle.join_concurrent`), as a retry
reattaches to an earlier try's job, once its tags say it is this task instance's.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import random
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar
from typing import Protocol

from airflow_smdist._compat import AirflowException
from airflow_smdist.backends.base import (
    RUNNING_STATES,
    TERMINAL_STATES,
    Backend,
    BackendError,
    JobNotFound,
    LogEvent,
    ResourceExists,
    StatusSource,
    capabilities,
)
from airflow_smdist.kinds import MAX_ATTEMPT_NAMES, JobKindInfo, kind_info

T = TypeVar("T")

#: Error codes AWS services use for "slow down" (the SageMaker API, CloudWatch Logs, S3).
THROTTLING_CODES = frozenset({"Throttling", "ThrottlingException", "TooManyRequestsException",
                              "RequestLimitExceeded", "ProvisionedThroughputExceededException",
                              "SlowDown", "RequestThrottled"})
BASE_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 60.0
#: how far before the status a wait started from (a trigger's ``as_of``, this machine's clock) its first List
#: call looks, to cover clock skew between us and the service
LIST_OVERLAP_SECONDS = 60.0
#: later List calls look back this far before the previous call's time on the service's own clock (its
#: response's Date header): a change is visible to List within this long of its LastModifiedTime (the
#: service's List index is eventually consistent; the margin also covers the Date header's 1 s resolution)
LIST_SETTLE_SECONDS = 5.0
#: log lines kept for the error of a failed job
LAST_LINES = 20
#: how long stopping waits for the jobs to end
STOP_TIMEOUT_SECONDS = 180.0
#: how long a try that lost the race for a job name looks for the winner's job (SageMaker may not show a job
#: it has just created to a Describe at once)
CONFLICT_DESCRIBE_SECONDS = 10.0

Action = Literal["create", "reattach-running", "reattach-completed"]
#: the tags every job carries: which task instance made it, and in which try
OWNER_TAG = "smdist:task-instance"
TRY_TAG = "smdist:try"
_TAG_VALUE = re.compile(r"[^\w\s.:/=+\-@]")


@dataclass(frozen=True)
class Owner:
    """The task instance a job belongs to (its SageMaker Tags; the local job's request carries them too).

    ``first_try`` is the first try of the current series: Airflow raises ``max_tries`` when a task instance
    is cleared, so ``max_tries - retries + 1`` is the try the last clear started (as its task runner
    computes it); a completed job made before it belongs to a run the user cleared."""

    identity: str
    try_number: int = 1
    first_try: int = 1

    @classmethod
    def of(cls, context: Any, retries: int = 0) -> Owner:
        ti = context["ti"]
        full = (f"{ti.dag_id}/{ti.task_id}/{context.get('run_id') or getattr(ti, 'run_id', '')}/"
                f"{getattr(ti, 'map_index', -1)}")
        identity = _TAG_VALUE.sub("_", full)
        if len(identity) > 256:  # SageMaker's tag value limit: keep it readable and unique
            identity = identity[:200] + "#" + hashlib.sha1(full.encode()).hexdigest()[:16]
        try_number = int(getattr(ti, "try_number", None) or 1)
        max_tries = getattr(ti, "max_tries", None)
        first = int(max_tries) - int(retries or 0) + 1 if isinstance(max_tries, int) and max_tries >= 0 else 1
        return cls(identity, try_number, max(1, min(first, try_number)))

    def tags(self) -> list[dict[str, str]]:
        return [{"Key": OWNER_TAG, "Value": self.identity}, {"Key": TRY_TAG, "Value": str(self.try_number)}]


class ForeignJob(AirflowException):
    """A job of the chosen name exists but belongs to another task instance (or to no task of this provider)."""


# -- throttling: the one backoff ---------------------------------------------------------------------------
def is_throttling(exc: BaseException) -> bool:
    """Whether ``exc`` is the service asking us to slow down (a BackendError or a botocore ClientError)."""
    if isinstance(exc, BackendError):
        return exc.code in THROTTLING_CODES
    code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
    return code in THROTTLING_CODES


def backoff_delay(attempt: int) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)]."""
    return random.uniform(0, min(MAX_BACKOFF_SECONDS, BASE_BACKOFF_SECONDS * 2 ** attempt))


def _count(counter: dict[str, int] | None, what: str) -> None:
    if counter is not None:
        counter[what] = counter.get(what, 0) + 1


def call_with_backoff(call: Callable[[], T], *, counter: dict[str, int] | None = None, what: str = "call",
                      give_up_after: float | None = None, sleep: Callable[[float], Any] = time.sleep) -> T:
    """``call()``, retrying throttling errors with jittered backoff: forever, or until ``give_up_after``
    seconds have passed (then the last throttling error is raised). Other errors are raised at once."""
    deadline = None if give_up_after is None else time.monotonic() + give_up_after
    attempt = 0
    while True:
        _count(counter, what)
        try:
            return call()
        except Exception as exc:
            if not is_throttling(exc):
                raise
            attempt += 1
            _count(counter, "throttled")
            delay = backoff_delay(attempt)
            if deadline is not None and time.monotonic() + delay > deadline:
                raise
            sleep(delay)


async def acall_with_backoff(call: Callable[[], Awaitable[T]], *, counter: dict[str, int] | None = None,
                             what: str = "call") -> T:
    """Await ``call()`` retrying throttling errors with the same backoff, forever: a storm of
    ThrottlingExceptions slows a deferred wait down but never fails the task."""
    attempt = 0
    while True:
        _count(counter, what)
        try:
            return await call()
        except Exception as exc:
            if not is_throttling(exc):
                raise
            attempt += 1
            _count(counter, "throttled")
            await asyncio.sleep(backoff_delay(attempt))


def is_name_conflict(exc: BaseException) -> bool:
    """Whether a Create*Job failed because a job of that name exists: the local backend's and SageMaker's
    ValidationException "... must be unique ...", SageMaker's ResourceInUse."""
    if isinstance(exc, ResourceExists):
        return True
    if not isinstance(exc, BackendError):
        return False
    if exc.code in ("ResourceInUse", "ResourceInUseException"):
        return True
    return exc.code == "ValidationException" and ("must be unique" in str(exc) or "already exists" in str(exc))


# -- results -----------------------------------------------------------------------------------------------
class JobFailed(AirflowException):
    """A job ended Failed or Stopped (or vanished). Carries its status, reason and last log lines."""

    def __init__(self, kind: str, name: str, status: str | None, reason: str, last_lines: Iterable[str] = ()) -> None:
        self.kind = kind
        self.name = name
        self.status = status
        self.reason = reason
        self.last_lines = list(last_lines)
        tail = "\n".join(self.last_lines[-10:])
        ended = f"ended {status}" if status else "is gone"
        super().__init__(f"{kind} job {name} {ended}: {reason}" + (f"\nLast log lines:\n{tail}" if tail else ""))


def failure_reason(info: JobKindInfo, description: dict[str, Any]) -> str:
    """Why a job did not complete: its FailureReason, else its secondary status, else its status; with the
    ExitMessage of a processing job's script when there is one."""
    reason = str(description.get("FailureReason") or description.get("SecondaryStatus") or info.status(description))
    if description.get("ExitMessage"):
        reason += f" (ExitMessage: {description['ExitMessage']})"
    return reason


@dataclass(frozen=True)
class Started:
    """A job of this task instance: its name and whether it was created now or reattached."""

    name: str
    action: Action


# -- the synchronous lifecycle -----------------------------------------------------------------------------
class TaskLog(Protocol):
    """What a lifecycle logs through: a logging.Logger, or an operator's ``self.log`` (a logging.Logger on
    Airflow 2, the Task SDK's structured logger on Airflow 3: both take a %-format and its arguments)."""

    def debug(self, msg: str, /, *args: Any) -> object: ...

    def info(self, msg: str, /, *args: Any) -> object: ...

    def warning(self, msg: str, /, *args: Any) -> object: ...


class JobLifecycle:
    """The lifecycle of the jobs of one kind that one task drives on one backend."""

    def __init__(self, backend: Backend, kind: str, *, log: TaskLog | None = None,
                 poll_interval: float = 10.0, print_logs: bool = True,
                 stop_timeout: float = STOP_TIMEOUT_SECONDS, owner: Owner | None = None,
                 rerun_on_clear: bool = True) -> None:
        self.backend = backend
        #: the task instance whose jobs these are: its tags go on every job created, and a job of the
        #: chosen name that carries another's (or none) is refused, never adopted
        self.owner = owner
        #: a cleared task instance runs its job again (True) or returns the completed job's result (False)
        self.rerun_on_clear = rerun_on_clear
        self.info = kind_info(kind)
        self.log: TaskLog = log or logging.getLogger(__name__)
        self.poll_interval = float(poll_interval)
        self.print_logs = print_logs
        self.stop_timeout = stop_timeout
        #: jobs started or reattached and not yet seen ended: what :meth:`stop` stops
        self.running: list[str] = []
        #: the last log lines of the jobs waited for (for the error of a failed job)
        self.last_lines: deque[str] = deque(maxlen=LAST_LINES)
        #: the last description :meth:`check` saw (lineage reads it)
        self.last_description: dict[str, Any] | None = None
        #: backend calls made, by kind of call, and how many were throttled
        self.calls: dict[str, int] = {}
        self._cursors: dict[str, Any] = {}
        self._metrics: dict[str, dict[str, float]] = {}
        self._secondary: dict[str, str | None] = {}

    @property
    def kind(self) -> str:
        return self.info.name

    # -- calls ---------------------------------------------------------------------------------------------
    def describe(self, name: str, *, give_up_after: float | None = None) -> dict[str, Any]:
        return call_with_backoff(lambda: self.backend.describe(self.info.name, name),
                                 counter=self.calls, what="describe", give_up_after=give_up_after)

    def log_events(self, name: str, cursor: Any = None) -> tuple[list[LogEvent], Any]:
        """The job's log events since ``cursor`` (None: from the start) and the next cursor."""
        return call_with_backoff(lambda: self.backend.log_events(self.info.name, name, cursor),
                                 counter=self.calls, what="logs")

    def status(self, description: dict[str, Any]) -> str:
        return self.info.status(description)

    def ended(self, description: dict[str, Any]) -> bool:
        return self.status(description) in TERMINAL_STATES

    def pause(self, names: list[str], seconds: float) -> None:
        """The one polling pause of the operators: until one of ``names`` changes (the local backend wakes
        at once) or ``seconds`` have passed."""
        self.backend.wait_for_change(self.info.name, names, seconds)

    # -- name, submit or reattach ----------------------------------------------------------------------------
    def job_tags(self, name: str) -> dict[str, str]:
        tags = call_with_backoff(lambda: self.backend.list_tags(self.info.name, name),
                                 counter=self.calls, what="tags")
        return {t["Key"]: t["Value"] for t in tags}

    def accept_reattach(self, name: str, description: dict[str, Any]) -> None:
        """Called before an existing job is taken over (running or completed): refuse, with
        :class:`ForeignJob`, a job that another task instance made (its owner tag differs or is missing)."""
        if self.owner is None:
            return
        owner = self.job_tags(name).get(OWNER_TAG)
        if owner != self.owner.identity:
            whose = f"task instance {owner}" if owner else "no task of this provider (it has no smdist owner tag)"
            raise ForeignJob(f"{self.info.label} {name} already exists and belongs to {whose}, not to this task "
                             f"instance ({self.owner.identity}): not attaching to it, nor stopping it. Give this "
                             "task another job_name (or leave job_name unset for a name of its own).")

    def cleared_since(self, name: str) -> bool:
        """Whether the completed job ``name`` was made before the task instance was last cleared."""
        if self.owner is None or not self.rerun_on_clear:
            return False
        made_in = self.job_tags(name).get(TRY_TAG)
        return made_in is not None and made_in.isdigit() and int(made_in) < self.owner.first_try

    def choose(self, base: str) -> Started:
        """Reattach to a running or completed job of this task instance, or pick the first free attempt
        name after ones that failed or were stopped."""
        for attempt in range(1, MAX_ATTEMPT_NAMES + 1):
            name = base if attempt == 1 else f"{base}-r{attempt}"
            try:
                description = self.describe(name)
            except JobNotFound:
                return Started(name, "create")
            status = self.status(description)
            if status in RUNNING_STATES or status == "Completed":
                self.accept_reattach(name, description)
                if status == "Completed" and self.cleared_since(name):
                    self.log.info("Job %s completed before this task instance was cleared; running it again under "
                                  "the next attempt name (rerun_on_clear=False returns its result instead).", name)
                    continue
                return Started(name, "reattach-running" if status in RUNNING_STATES else "reattach-completed")
            self.log.info("Job %s of an earlier try ended %s; the next attempt gets a new name.", name, status)
        raise AirflowException(f"{MAX_ATTEMPT_NAMES} attempts of job {base} ended without success; "
                               "not starting another. Give a new job_name to try again.")

    def submit(self, request: dict[str, Any]) -> str:
        """Create the job (no retry: a second Create of a name that went through would fail as a duplicate)."""
        _count(self.calls, "create")
        if self.owner is not None:
            own = {t["Key"] for t in self.owner.tags()}
            request = {**request, "Tags": [t for t in request.get("Tags") or [] if t.get("Key") not in own]
                       + self.owner.tags()}
        name = self.backend.submit(self.info.name, request)
        self.track(name)
        return name

    def start(self, base: str, build_request: Callable[[str], dict[str, Any]]) -> Started:
        """The job of this task instance: reattached, or created from ``build_request(name)`` (called only
        for a new job, so uploads happen only then)."""
        started = self.choose(base)
        label, backend = self.info.name, self.backend.name
        if started.action == "create":
            started = self.submit_or_join(started.name, build_request(started.name))
            if started.action != "create":
                return started
            self.log.info("Started %s job %s on the %s backend.", label, started.name, backend)
        elif started.action == "reattach-running":
            self.track(started.name)
            self.log.info("Reattaching to %s job %s, still running from an earlier try (no second job started).",
                          label, started.name)
        else:
            self.log.info("%s job %s of an earlier try already completed; returning its result.", label,
                          started.name)
        return started

    def submit_or_join(self, name: str, request: dict[str, Any]) -> Started:
        """Create the job ``name`` (action "create"), or, where another try of this task instance created it
        meanwhile, take that one over (:meth:`join_concurrent`)."""
        try:
            self.submit(request)
        except Exception as exc:
            if not is_name_conflict(exc):
                raise
            return self.join_concurrent(name, exc)
        return Started(name, "create")

    def join_concurrent(self, name: str, conflict: Exception) -> Started:
        """The job ``name`` that another try of this task instance created between this try's choice of the
        name and its Create (a zombie try and its retry, started at once): reattached, as a retry reattaches to
        an earlier try's job. Its tags decide: a job of another task instance is refused (:class:`ForeignJob`);
        without an owner to compare, the Create's own error stands."""
        if self.owner is None:
            raise conflict
        deadline = time.monotonic() + CONFLICT_DESCRIBE_SECONDS
        while True:
            try:
                description = self.describe(name)
                break
            except JobNotFound:  # created, not yet visible (SageMaker), or gone again: look once more
                if time.monotonic() > deadline:
                    raise conflict from None
                time.sleep(0.5)
        self.accept_reattach(name, description)
        status = self.status(description)
        if status in RUNNING_STATES:
            self.track(name)
            self.log.info("Another try of this task instance created %s job %s at the same moment; reattaching "
                          "to it (no second job started).", self.info.name, name)
            return Started(name, "reattach-running")
        self.log.info("Another try of this task instance created %s job %s at the same moment; it already "
                      "ended %s: returning its result.", self.info.name, name, status)
        return Started(name, "reattach-completed")

    def track(self, name: str) -> None:
        """Count ``name`` among the running jobs (what a kill stops)."""
        if name not in self.running:
            self.running.append(name)

    def untrack(self, name: str) -> None:
        if name in self.running:
            self.running.remove(name)

    # -- waiting -------------------------------------------------------------------------------------------
    def print_new_logs(self, name: str, *, label: bool = False) -> None:
        """Print the job's log lines since the last call (every host, merged by time)."""
        try:
            events, self._cursors[name] = self.log_events(name, self._cursors.get(name))
        except JobNotFound:
            return
        except BackendError as exc:  # logs are best effort; the status decides
            self.log.warning("could not read the logs of %s job %s: %s", self.info.name, name, exc)
            return
        self.print_events(name, events, label=label)

    def no_lines_yet(self, secondary_statuses: list[Any]) -> bool:
        """Whether jobs in these secondary statuses have no log line to read yet on this backend (on SageMaker:
        their containers have not started), so a wait makes no log call for them."""
        return self.backend.silent_before_containers and self.info.no_lines_yet(secondary_statuses)

    def print_events(self, name: str, events: Iterable[LogEvent], *, label: bool = False) -> None:
        """Log a job's lines (each behind the job's name when ``label``) and keep them for its error."""
        for event in events:
            line = event.format()
            self.log.info("%s", f"{name} {line}" if label else line)
            self.last_lines.append(line)

    def fetch_last_lines(self, name: str) -> None:
        """The job's last log lines, without printing them (after a deferred wait, for the error)."""
        events, _ = self.log_events(name)
        self.last_lines.clear()
        self.last_lines.extend(e.format() for e in events)

    def report(self, name: str, description: dict[str, Any]) -> None:
        """Log the job's metrics summary line and its secondary status, each when it changed (both wait paths:
        the blocking one every poll, the deferred one once, in execute_complete)."""
        self._report(name, description)

    def _report(self, name: str, description: dict[str, Any]) -> None:
        metrics = {m["MetricName"]: m["Value"] for m in description.get("FinalMetricDataList") or []}
        if metrics and metrics != self._metrics.get(name):
            self.log.info("%s job %s metrics: %s", self.info.name, name,
                          ", ".join(f"{k}={v:g}" for k, v in sorted(metrics.items())))
            self._metrics[name] = metrics
        secondary = description.get("SecondaryStatus")
        if secondary and secondary != self._secondary.get(name):
            self.log.info("%s job %s: %s / %s", self.info.name, name, self.status(description), secondary)
            self._secondary[name] = secondary

    def poll(self, name: str, *, label: bool = False) -> dict[str, Any]:
        """One look at a job: Describe, new log lines, metric and status changes."""
        description = self.describe(name)
        if self.print_logs and not self.no_lines_yet([description.get("SecondaryStatus")]):
            self.print_new_logs(name, label=label)
        self._report(name, description)
        if self.ended(description) and self.print_logs:  # the last lines may land after the status
            self.print_new_logs(name, label=label)
        return description

    def wait_all(self, names: Iterable[str], on_end: Callable[[str, dict[str, Any]], str | None]) -> None:
        """Poll every job until each has ended. ``on_end(name, description)`` is called as each ends and may
        return the name of a job to watch in its place (a retry). Several jobs on a backend with a status
        source (SageMaker) are watched in :class:`CoalescedRounds`: a List and a log call per round for all."""
        watching = list(names)
        for name in watching:
            self.track(name)
        label = len(watching) > 1
        rounds = CoalescedRounds.open(self) if label else None
        try:
            while watching:
                for name, description in rounds.round(watching) if rounds else self.round(watching, label=label):
                    watching.remove(name)
                    self.untrack(name)
                    replacement = on_end(name, description)
                    if replacement:
                        watching.append(replacement)
                        self.track(replacement)
                if watching:
                    self.pause(watching, self.poll_interval)
        finally:
            if rounds:
                rounds.close()

    def round(self, names: list[str], *, label: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """One look at each job (:meth:`poll`); the ones that have ended, with their last description."""
        out = []
        for name in list(names):
            description = self.poll(name, label=label)
            if self.ended(description):
                out.append((name, description))
        return out

    def wait(self, name: str) -> dict[str, Any]:
        """Wait for one job to end; its last description."""
        ended: dict[str, dict[str, Any]] = {}
        self.wait_all([name], lambda n, d: ended.__setitem__(n, d))
        return ended[name]

    # -- result or error -----------------------------------------------------------------------------------
    def failure_reason(self, description: dict[str, Any]) -> str:
        return failure_reason(self.info, description)

    def failure(self, description: dict[str, Any]) -> JobFailed | None:
        """The error of a job that did not complete (None when it completed)."""
        status = self.status(description)
        if status == "Completed":
            return None
        return JobFailed(self.info.name, self.info.job_name(description), status, self.failure_reason(description),
                         self.last_lines)

    def check(self, description: dict[str, Any]) -> dict[str, Any]:
        """``description`` when the job completed; raises :class:`JobFailed` otherwise."""
        self.last_description = description
        error = self.failure(description)
        if error is not None:
            raise error
        return description

    def gone(self, name: str, reason: str | None) -> JobFailed:
        """The error for a job that no longer exists (e.g. reported by a trigger)."""
        return JobFailed(self.info.name, name, None, reason or "the job does not exist")

    # -- stopping ------------------------------------------------------------------------------------------
    def stop(self, names: Iterable[str] | None = None) -> None:
        """Stop the jobs (default: every running one) and wait until they have ended, at most
        ``stop_timeout`` seconds."""
        names = list(self.running if names is None else names)
        label = self.info.name
        for name in list(names):
            self.log.info("Task killed: stopping %s job %s.", label, name)
            try:
                call_with_backoff(functools.partial(self.backend.stop, self.info.name, name),
                                  counter=self.calls, what="stop", give_up_after=self.stop_timeout)
            except JobNotFound:
                names.remove(name)
            except Exception as exc:  # noqa: BLE001 - stop the others anyway
                self.log.warning("could not stop %s: %s", name, exc)
        deadline = time.monotonic() + self.stop_timeout
        while names and time.monotonic() < deadline:
            for name in list(names):
                try:
                    description = self.describe(name, give_up_after=self.stop_timeout)
                except JobNotFound:
                    names.remove(name)
                    continue
                if self.ended(description):
                    self.log.info("%s job %s is %s.", label, name, self.status(description))
                    names.remove(name)
                    self.untrack(name)
            if names:
                self.pause(names, min(2.0, self.poll_interval))
        if names:
            self.log.warning("%s job(s) %s did not stop within %.0f s.", label, ", ".join(names), self.stop_timeout)


class CoalescedRounds:
    """:meth:`JobLifecycle.wait_all`'s rounds over several jobs on a backend whose capabilities say
    ``coalesced_waits`` (SageMaker), read from its ``status_source()``: per round one ``List*Jobs`` call for
    the changes since the last one and one log round (one ``FilterLogEvents`` for every job's streams), where
    polling each job would make a Describe and its own log calls. A job is described once, when its summary
    says it has ended (its FailureReason, metrics and artifacts are not in the summary). The blocking twin of
    the triggers' ``CoalescedPoller`` and ``CoalescedLogPoller``, with the same source (so the same throttling
    backoff). A List call that fails for another reason than throttling (a role without ``sagemaker:List*Jobs``)
    falls back to polling each job."""

    def __init__(self, lifecycle: JobLifecycle, source: StatusSource) -> None:
        self.lc = lifecycle
        self.source = source
        self.runner = asyncio.Runner()
        #: jobs made or reattached by this task changed after it started (less the clock-skew margin)
        self.since: float | None = time.time() - LIST_OVERLAP_SECONDS
        self.seen: dict[str, tuple[Any, Any]] = {}
        self.fallback = False
        #: the triggers' log reader: one FilterLogEvents call a round for every job added to it
        self.reader = source.log_reader(lifecycle.info.name)
        self.reading: set[str] = set()

    @classmethod
    def open(cls, lifecycle: JobLifecycle) -> CoalescedRounds | None:
        """The rounds of a backend whose waits of several jobs coalesce (its capabilities say), else None."""
        if not capabilities(lifecycle.backend).coalesced_waits:
            return None
        source = lifecycle.backend.status_source()
        source.acquire()
        return cls(lifecycle, source)

    def _run(self, coro: Awaitable[T]) -> T:
        before = dict(self.source.calls)
        try:
            return self.runner.run(coro)  # type: ignore[arg-type]
        finally:
            for what, n in self.source.calls.items():
                self.lc.calls[what] = self.lc.calls.get(what, 0) + n - before.get(what, 0)

    def round(self, names: list[str]) -> list[tuple[str, dict[str, Any]]]:
        if self.fallback:
            return self.lc.round(names, label=True)
        info = self.lc.info
        try:
            summaries, server_time = self._run(self.source.changes(info.name, self.since))
        except Exception as exc:  # noqa: BLE001 - e.g. AccessDenied on List*Jobs: poll each job instead
            self.lc.log.warning("%s: listing %s jobs failed (%s); describing each job every round instead.",
                                info.list_op, info.name, exc)
            self.fallback = True
            return self.lc.round(names, label=True)
        self.since = (server_time or time.time()) - LIST_SETTLE_SECONDS
        if self.lc.print_logs and not self.lc.no_lines_yet([self.secondary(n, summaries) for n in names]):
            self.print_logs(names)
        out = []
        for name in list(names):
            summary = summaries.get(name)
            if summary is None:
                continue
            state = (info.status(summary), summary.get("SecondaryStatus"))
            if self.seen.get(name) == state:
                continue
            self.seen[name] = state
            self.lc._report(name, summary)
            if state[0] in TERMINAL_STATES:
                description = self.lc.describe(name)
                self.lc._report(name, description)
                out.append((name, description))
        if out and self.lc.print_logs:  # the last lines may land after the status: one more read for the ended
            self.print_logs([name for name, _ in out])
        self.forget([name for name, _ in out])
        return out

    def secondary(self, name: str, summaries: dict[str, dict[str, Any]]) -> str | None:
        """A job's secondary status: this round's summary's, else the last one seen (None: not seen yet)."""
        summary = summaries.get(name)
        return summary.get("SecondaryStatus") if summary is not None else self.seen.get(name, (None, None))[1]

    def print_logs(self, names: list[str]) -> None:
        """Print the new lines of every job in ``names`` (one read for all of them)."""
        for name in names:
            if name not in self.reading:
                self.reader.add(name, self.lc._cursors.get(name))
                self.reading.add(name)
        try:
            read = self._run(self.reader.read())
        except Exception as exc:  # noqa: BLE001 - logs are best effort; the status decides
            self.lc.log.warning("could not read the logs of %s jobs %s: %s", self.lc.info.name, ", ".join(names), exc)
            return
        for name, (events, cursor) in read.items():
            self.lc._cursors[name] = cursor
            self.lc.print_events(name, events, label=True)

    def forget(self, names: list[str]) -> None:
        for name in names:
            if name in self.reading:
                self.reader.remove(name)
                self.reading.discard(name)

    def close(self) -> None:
        """Close the source's clients and the event loop (best effort: also on the way out of a kill)."""
        try:
            self._run(self.source.close())
        except Exception as exc:  # noqa: BLE001 - the wait's own outcome matters, not the clients' close
            self.lc.log.debug("closing the status source failed: %s", exc)
        finally:
            self.runner.close()


# -- the asynchronous half (triggers) ----------------------------------------------------------------------
class AsyncJobLifecycle:
    """What a trigger does with one job while it waits: report status changes, and turn the job's end (or its
    disappearance) into the event that resumes the task. (The trigger's log lines come from its
    ``CoalescedLogPoller``, one round of log calls for every job it watches.)"""

    def __init__(self, kind: str, name: str, *, log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self.info = kind_info(kind)
        self.name = name
        self.log = log
        self._last: tuple[str, str | None] | None = None

    def observe(self, description: dict[str, Any]) -> dict[str, Any] | None:
        """Log a status change; the event payload once the job has ended (else None)."""
        status = self.info.status(description)
        secondary = description.get("SecondaryStatus")
        if (status, secondary) != self._last:
            self.log.info("%s job %s: %s%s", self.info.name, self.name, status, f" / {secondary}" if secondary else "")
            self._last = (status, secondary)
        if status not in TERMINAL_STATES:
            return None
        return {"status": {"Completed": "success", "Failed": "failed", "Stopped": "stopped"}[status],
                "job_name": self.name, "job_status": status, "failure_reason": description.get("FailureReason")}

    def error(self, exc: BaseException) -> dict[str, Any] | None:
        """The event payload for a polling error that ends the wait (the job does not exist); None for an
        error worth retrying (logged)."""
        if isinstance(exc, JobNotFound):
            return {"status": "failed", "job_name": self.name, "job_status": None, "failure_reason": str(exc)}
        self.log.warning("polling %s job %s failed, retrying: %s", self.info.name, self.name, exc)
        return None
