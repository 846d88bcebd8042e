"""Deferrable waiting that scales: many waiting jobs, few API calls.

Every trigger of this provider that waits for a job registers with one :class:`CoalescedPoller` per
(backend, job kind, poll interval) in the triggerer's event loop. Each interval the poller makes one paged
``List*Jobs(LastModifiedTimeAfter=...)`` call for all the jobs it watches and hands each job whose summary
changed (status, secondary status) to its trigger; each List asks only for the changes since the previous
one (see :class:`CoalescedPoller`). A trigger starts from the status its operator saw just
before deferring (``job_status``, ``as_of``), so first sight costs nothing either: the List call asks for
changes since the oldest ``as_of``. The only Describe of a job's wait is the one in ``execute_complete``.
Throttling errors back off with jitter and never fail a task (:func:`airflow_smdist.lifecycle.acall_with_backoff`,
the same backoff the operators' and sensors' waits use). The local backend's jobs are watched the same
way (its list reads the jobs' state files).

Log lines (``print_logs``) are coalesced too: one :class:`CoalescedLogPoller` per (backend, kind, interval)
reads the new lines of every watched job in one round per interval, through the log reader of the backend's
status source (on SageMaker one paged CloudWatch ``FilterLogEvents`` call per log group for all the watched
jobs: :mod:`airflow_smdist.backends.sagemaker_async`; locally the jobs' log files:
:mod:`airflow_smdist.backends.local.status_source`). While every watched job is still provisioning (its
secondary status says no container runs yet, on a backend whose jobs write no line before that), no round
is made. Each trigger keeps its cursor where a trigger rebuilt from its kwargs finds it (a triggerer restart, or
the trigger moved to another triggerer): its task instance's XCom on SageMaker, a file next to a local job
(:mod:`airflow_smdist.triggers.cursor`), saved after the lines were logged and before the trigger yields its
event, so the rebuilt trigger resumes where the last one stopped: no line twice, none lost.

The pollers speak to the backend's :class:`~airflow_smdist.backends.base.StatusSource` only; its clients are
made on first use, never at import. Log lines go to the trigger's log, which Airflow shows in the task's log
while it is deferred.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_smdist.backends.base import Backend, LogCursorStore, LogEvent, LogReader, StatusSource
from airflow_smdist.kinds import kind_info
from airflow_smdist.lifecycle import (
    LIST_OVERLAP_SECONDS,
    LIST_SETTLE_SECONDS,
    THROTTLING_CODES,
    AsyncJobLifecycle,
    is_throttling,
)
from airflow_smdist.lifecycle import acall_with_backoff as with_backoff
from airflow_smdist.triggers.cursor import CursorWriter, XComCursorStore, cursor_record, kept_in_xcom

# the backoff and the List margins live in lifecycle.py (the blocking waits use them too)
__all__ = ["LIST_OVERLAP_SECONDS", "LIST_SETTLE_SECONDS", "THROTTLING_CODES", "is_throttling", "with_backoff"]

#: the status sources, now in their backends' adapters: still importable from here (lazily, see __getattr__)
_MOVED = {"SageMakerStatusSource": "airflow_smdist.backends.sagemaker_async",
          "CloudWatchLogReader": "airflow_smdist.backends.sagemaker_async",
          "LocalStatusSource": "airflow_smdist.backends.local.status_source"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
#: a log poller that follows a status poller reads on its own only when that one made no round for this long
#: (its first round makes the clients; a throttled List backs off)
LEADER_LATE_SECONDS = 30.0


class CoalescedPoller:
    """Watches many jobs of one kind with one List call per interval; a Describe only for a job whose
    trigger did not say what status it started from.

    A round's work follows what changed, not how many jobs are watched: each List asks only for the jobs
    modified since the previous List (on the service's clock, less :data:`LIST_SETTLE_SECONDS`), and looks
    further back (the trigger's ``as_of`` less :data:`LIST_OVERLAP_SECONDS`) only in the first round of a job
    that was just watched."""

    def __init__(self, source: StatusSource, kind: str, interval: float) -> None:
        self.source = source
        self.kind = kind
        self.interval = interval
        self.watchers: dict[str, list[asyncio.Queue[Any]]] = {}
        #: (status, secondary status) of each watched job, as last seen
        self.known: dict[str, tuple[str, str | None]] = {}
        #: jobs no List has covered yet: the time (this machine's clock) their status was seen
        self.as_of: dict[str, float] = {}
        #: jobs watched without a status: described once, in the next round
        self.unknown: set[str] = set()
        #: every change the service made before this time (its clock, epoch) has been read
        self.cursor: float | None = None
        self.task: asyncio.Task[None] | None = None
        #: called after each round (the log poller of the same jobs, which reads right after it)
        self.after_round: list[Callable[[], None]] = []

    def watch(self, name: str, status: str | None = None, as_of: float | None = None) -> asyncio.Queue[Any]:
        """Watch job ``name``; ``status`` as seen at time ``as_of`` (epoch), if known, saves its first Describe."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self.watchers.setdefault(name, []).append(queue)
        if name not in self.known:
            if status is not None and as_of is not None:
                self.known[name] = (status, None)
                self.as_of[name] = as_of
            else:
                self.unknown.add(name)
        if self.task is None or self.task.done():
            self.source.acquire()
            self.task = asyncio.get_running_loop().create_task(self._run())
        return queue

    def unwatch(self, name: str, queue: asyncio.Queue[Any]) -> None:
        queues = self.watchers.get(name, [])
        if queue in queues:
            queues.remove(queue)
        if not queues:
            self.watchers.pop(name, None)
            self.known.pop(name, None)
            self.as_of.pop(name, None)
            self.unknown.discard(name)

    def _send(self, name: str, item: Any) -> None:
        for q in self.watchers.get(name, []):
            q.put_nowait(item)

    async def _describe(self, name: str) -> None:
        try:
            description = await self.source.describe(self.kind, name)
        except Exception as exc:  # noqa: BLE001 - the waiting trigger decides what an error means
            self._send(name, exc)
            return
        self.unknown.discard(name)
        if name not in self.watchers:
            return
        self.known[name] = (kind_info(self.kind).status(description), description.get("SecondaryStatus"))
        self.as_of[name] = time.time()
        self._send(name, description)

    def _since(self) -> float | None:
        """Where this round's List starts: the cursor, or further back for jobs no List has covered yet."""
        if not self.as_of:
            return self.cursor
        first_sight = min(self.as_of.values()) - LIST_OVERLAP_SECONDS
        return first_sight if self.cursor is None else min(self.cursor, first_sight)

    async def poll_once(self) -> None:
        for name in list(self.unknown):  # no status from the trigger
            await self._describe(name)
        if not self.known:
            return  # nothing watched with a status yet
        started = time.time()
        covered = list(self.as_of)
        changed, server_time = await self.source.changes(self.kind, self._since())
        status_key = kind_info(self.kind).status_key
        for name, summary in changed.items():
            if name not in self.watchers:
                continue
            seen = (summary[status_key], summary.get("SecondaryStatus"))
            old = self.known.get(name)
            if old is None or seen[0] != old[0] or (seen[1] is not None and seen[1] != old[1]):
                self.known[name] = seen
                self._send(name, summary)
        for name in covered:
            self.as_of.pop(name, None)
        # without the service's clock, this machine's, less the skew allowance (as for a first sight)
        now = server_time - LIST_SETTLE_SECONDS if server_time is not None else started - LIST_OVERLAP_SECONDS
        self.cursor = now if self.cursor is None else max(self.cursor, now)

    async def _run(self) -> None:
        try:
            while self.watchers:
                try:
                    await self.poll_once()
                except Exception as exc:  # noqa: BLE001 - a failed poll is retried next interval
                    for queues in list(self.watchers.values()):
                        for q in queues:
                            q.put_nowait(exc)
                for listener in list(self.after_round):
                    listener()
                await asyncio.sleep(self.interval * random.uniform(0.9, 1.1))
        finally:
            self.task = None  # a watch() from here on starts a new task
            await self.source.close()


class CoalescedLogPoller:
    """Reads the new log lines of every watched job of one kind in one round per interval (one paged
    FilterLogEvents call on SageMaker). ``flush(name)`` asks for a round now and waits for it: a trigger
    whose job ended prints the job's last lines before it yields.

    Following the status poller of the same jobs (:meth:`follow`), a round runs right after each of its
    List rounds rather than on a timer of its own: the round that prints the last lines of the jobs a List
    found ended is that interval's round too, so a job ending costs no log call of its own. Its own timer
    only runs a round when the status poller made none for :data:`LEADER_LATE_SECONDS` (and two intervals).
    While no watched job's containers have started, no round is made (:meth:`nothing_to_read`)."""

    def __init__(self, source: StatusSource, kind: str, interval: float) -> None:
        self.source = source
        self.kind = kind
        self.interval = interval
        self.watchers: dict[str, dict[str, Any]] = {}
        self.task: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()
        self.round_done: asyncio.Future[None] | None = None
        self.reader: LogReader = source.log_reader(kind)
        self.leader: CoalescedPoller | None = None

    def follow(self, poller: CoalescedPoller) -> None:
        """Run a round right after each of ``poller``'s rounds (instead of on this poller's own timer)."""
        if self.leader is not poller:
            if self.leader is not None:
                self.leader.after_round.remove(self.wake.set)
            self.leader = poller
            poller.after_round.append(self.wake.set)

    def watch(self, name: str, cursor: Any, sink: Callable[[list[LogEvent], Any], None]) -> None:
        # the watcher's context: Airflow's triggerer routes a log line to a trigger's log file by the
        # contextvars bound in that trigger's task, so each sink runs in the context of the trigger that
        # registered it, not in the context of whichever trigger started this shared poller
        self.watchers[name] = {"cursor": cursor, "sink": sink, "context": contextvars.copy_context()}
        self.reader.add(name, cursor)
        if self.task is None or self.task.done():
            self.source.acquire()
            self.task = asyncio.get_running_loop().create_task(self._run())

    def unwatch(self, name: str) -> None:
        if self.watchers.pop(name, None) is not None:
            self.reader.remove(name)
        if not self.watchers:
            self.wake.set()

    async def flush(self, name: str) -> None:
        """Wait until a round that started after this call has read ``name``'s lines."""
        if name not in self.watchers:
            return
        if self.round_done is None or self.round_done.done():
            self.round_done = asyncio.get_running_loop().create_future()
        waiter = self.round_done
        self.wake.set()
        await asyncio.shield(waiter)

    def nothing_to_read(self) -> bool:
        """Whether no watched job can have a line to read: on CloudWatch, a job whose containers have not
        started (the secondary status the status poller's List saw last, e.g. ``Starting`` or ``Downloading``)
        has none, so while every watched job is so (minutes of provisioning on SageMaker), a round is not made.
        Nothing is read later than otherwise: the List that sees a job move on is followed by a round."""
        if self.leader is None or not self.reader.silent_before_containers:
            return False
        known = self.leader.known
        return kind_info(self.kind).no_lines_yet([known.get(name, (None, None))[1] for name in self.watchers])

    async def round(self) -> None:
        if not self.watchers or self.nothing_to_read():
            return
        # only the jobs with new lines: a quiet job costs no call into its trigger, nor any work here
        results = await self.reader.read()
        for name, (events, cursor) in results.items():
            w = self.watchers.get(name)
            if w is None:
                continue
            w["cursor"] = cursor
            if not events:
                continue
            try:
                w["context"].run(w["sink"], events, cursor)
            except Exception:  # noqa: BLE001 - one trigger's logging must not stop the others' lines
                pass

    async def _wait(self) -> None:
        """Until the leader's next round ends, a flush, or this poller's own timer."""
        if self.leader is not None:
            timeout = max(2 * self.interval, LEADER_LATE_SECONDS)
        else:
            timeout = self.interval * random.uniform(0.9, 1.1)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.wake.wait(), timeout)

    async def _run(self) -> None:
        try:
            if self.leader is not None and self.round_done is None:
                await self._wait()  # the first round follows the status poller's first round
            while self.watchers:
                self.wake.clear()  # a leader's round or a flush from here on asks for the next round
                done, self.round_done = self.round_done, None
                try:
                    await self.round()
                except Exception:  # noqa: BLE001 - logs are best effort; the status decides
                    pass
                if done is not None and not done.done():
                    done.set_result(None)
                if self.round_done is not None:  # a flush came in during the round: go again now
                    continue
                await self._wait()
        finally:
            self.task = None
            if self.round_done is not None and not self.round_done.done():
                self.round_done.set_result(None)
            await self.source.close()


#: per event loop (weakly: a loop that is gone takes its pollers with it, and a new loop never meets a dead
#: one's pollers, as it could when they were keyed by ``id(loop)``, which CPython reuses), by key
_POLLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary())
_SOURCES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], StatusSource]] = (
    weakref.WeakKeyDictionary())

_Poller = TypeVar("_Poller", "CoalescedPoller", "CoalescedLogPoller")


def _shared(key: tuple[Any, ...], cls: type[_Poller], kind: str, interval: float,
            make_source: Callable[[], StatusSource]) -> _Poller:
    loop = asyncio.get_running_loop()
    sources = _SOURCES.setdefault(loop, {})
    source = sources.get(key)
    if source is None:
        source = sources[key] = make_source()
    pollers = _POLLERS.setdefault(loop, {})
    poller_key = (cls.__name__, *key, kind, float(interval))
    poller = pollers.get(poller_key)
    if not isinstance(poller, cls):
        poller = pollers[poller_key] = cls(source, kind, interval)
    return poller


def poller_for(key: tuple[Any, ...], kind: str, interval: float,
               make_source: Callable[[], StatusSource]) -> CoalescedPoller:
    """The one status poller of this event loop for (backend key, kind, interval)."""
    return _shared(key, CoalescedPoller, kind, interval, make_source)


def log_poller_for(key: tuple[Any, ...], kind: str, interval: float,
                   make_source: Callable[[], StatusSource]) -> CoalescedLogPoller:
    """The one log poller of this event loop for (backend key, kind, interval)."""
    return _shared(key, CoalescedLogPoller, kind, interval, make_source)


class SmdistJobTrigger(BaseTrigger):
    """Waits for one job of any kind through the coalesced pollers; yields one event at the end:
    ``{"status": "success"|"failed"|"stopped", "job_name", "job_status", "failure_reason"}``.

    ``job_status`` / ``as_of`` / ``created``: the job's status, when it was seen, and its creation time (epoch),
    from the operator's Describe before deferring. ``cursor_key`` identifies this deferral: the kept log
    cursor (:meth:`cursor_store`) is resumed only by a trigger rebuilt from the same kwargs (a triggerer restart,
    or the trigger moved to another triggerer), so a later try prints the job's log afresh into its own task log.
    With ``secret_hyperparameters`` the trigger describes the job once, to mask their values before it writes any
    log line."""

    kind = "training"

    def __init__(self, *, job_name: str, backend: str = "local", smdist_conn_id: str | None = "smdist_default",
                 aws_conn_id: str | None = None, region_name: str | None = None, poll_interval: float = 30,
                 print_logs: bool = True, log_cursor: Any = None, kind: str | None = None,
                 secret_hyperparameters: list[str] | None = None, job_status: str | None = None,
                 as_of: float | None = None, created: float | None = None, cursor_key: str | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger is not annotated
        #: names only (never values): the trigger masks their values from the job's description
        self.secret_hyperparameters = list(secret_hyperparameters or [])
        self.kind = kind or self.kind
        self.job_name = job_name
        self.backend = backend
        self.smdist_conn_id = smdist_conn_id
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.poll_interval = poll_interval
        self.print_logs = print_logs
        self.log_cursor = log_cursor
        self.job_status = job_status
        self.as_of = as_of
        self.created = created
        self.cursor_key = cursor_key
        self._resolved: Backend | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_name": self.job_name, "backend": self.backend, "smdist_conn_id": self.smdist_conn_id,
            "aws_conn_id": self.aws_conn_id, "region_name": self.region_name, "poll_interval": self.poll_interval,
            "print_logs": self.print_logs, "log_cursor": self.log_cursor, "kind": self.kind,
            "secret_hyperparameters": self.secret_hyperparameters, "job_status": self.job_status,
            "as_of": self.as_of, "created": self.created, "cursor_key": self.cursor_key})

    async def _backend(self) -> Backend:
        """The backend, resolved once per trigger (one connection lookup, in a thread: it may block)."""
        if self._resolved is None:
            from airflow_smdist.hooks.smdist import SmdistHook

            hook = SmdistHook(self.smdist_conn_id, aws_conn_id=self.aws_conn_id, region_name=self.region_name)
            self._resolved = await asyncio.to_thread(hook.get_backend, self.backend)
        return self._resolved

    def _pollers(self, backend: Backend) -> tuple[CoalescedPoller, CoalescedLogPoller]:
        key = backend.status_source_key()
        status = poller_for(key, self.kind, self.poll_interval, backend.status_source)
        logs = log_poller_for(key, self.kind, self.poll_interval, backend.status_source)
        logs.follow(status)
        return status, logs

    def mask_secrets(self, description: dict[str, Any]) -> None:
        """Register the secret hyperparameters' values (read from the job's description) with this
        triggerer's secrets masker, before the trigger writes any line of the job's log."""
        if not self.secret_hyperparameters:
            return
        from airflow_smdist._compat import mask_hyperparameter

        definitions = [description.get("TrainingJobDefinition") or {},
                       *(description.get("TrainingJobDefinitions") or [])]
        sources = [description.get("HyperParameters") or {}] + [d.get("StaticHyperParameters") or {}
                                                                 for d in definitions]
        for hps in sources:
            for name in self.secret_hyperparameters:
                mask_hyperparameter(hps.get(name))

    # -- the log cursor, kept so a rebuilt trigger resumes (airflow_smdist.triggers.cursor) ----------------------
    def cursor_store(self, backend: Backend) -> LogCursorStore:
        """Where this trigger keeps its log cursor: its task instance's XCom, which every triggerer reads, when it
        has a task instance (Airflow sets it on a trigger it runs) and its backend's logs read the same from any
        machine; else the backend's file."""
        ti = getattr(self, "task_instance", None)
        if kept_in_xcom(ti, backend):
            return XComCursorStore(ti)
        return backend.log_cursor_store(kind_info(self.kind).name, self.job_name)

    async def _load_cursor(self, backend: Backend, store: LogCursorStore) -> Any:
        """The cursor saved under this deferral's key (read once, when the trigger starts), else the one in the
        kwargs, else where the backend starts a wait."""
        saved = None
        if self.cursor_key:
            try:
                saved = await store.load()
            except Exception as exc:  # noqa: BLE001 - no cursor: lines repeat, none is lost
                self.log.warning("could not read the log cursor from %r: %s", store, exc)
        if isinstance(saved, dict) and saved.get("key") == self.cursor_key and saved.get("cursor") is not None:
            return saved["cursor"]  # (the operator seeds the record with no cursor before it defers)
        if self.log_cursor is not None:
            return self.log_cursor
        return backend.first_log_cursor(self.created)

    def _log_sink(self, writer: CursorWriter) -> Callable[[list[LogEvent], Any], None]:
        def sink(events: list[LogEvent], cursor: Any) -> None:
            for e in events:
                self.log.info("%s", e.format())
            self.log_cursor = cursor
            if events and self.cursor_key:  # after the lines went to the log: a crash in between repeats them
                writer.put(cursor_record(self.cursor_key, cursor))
        return sink

    # -- the wait ---------------------------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[TriggerEvent]:
        backend = await self._backend()
        poller, log_poller = self._pollers(backend)
        lifecycle = AsyncJobLifecycle(self.kind, self.job_name, log=self.log)  # type: ignore[arg-type]
        secrets = bool(self.secret_hyperparameters)  # their values come from one Describe, before any log line
        queue = poller.watch(self.job_name, None if secrets else self.job_status, self.as_of)
        writer: CursorWriter | None = None  # once the job's lines are followed
        # a job that had already ended when its status was taken ends the wait now: no List reports it again
        payload = (lifecycle.observe({kind_info(self.kind).status_key: self.job_status})
                   if self.job_status and not secrets else None)
        try:
            while True:
                if self.print_logs and writer is None and not secrets:
                    store = self.cursor_store(backend)
                    writer = CursorWriter(store, self.log)
                    log_poller.watch(self.job_name, await self._load_cursor(backend, store), self._log_sink(writer))
                if payload is None:
                    item = await queue.get()
                    if isinstance(item, Exception):
                        payload = lifecycle.error(item)
                    else:
                        if secrets:
                            self.mask_secrets(item)
                            secrets = False
                        payload = lifecycle.observe(item)
                if payload is None:
                    continue
                if writer is not None:
                    if payload["job_status"] is not None:
                        # the job's last lines, in a round shared with every job ending now
                        await log_poller.flush(self.job_name)
                    await writer.flush()  # the cursor kept before the event: the task may resume at once
                yield TriggerEvent(payload)  # type: ignore[no-untyped-call]
                return
        finally:
            log_poller.unwatch(self.job_name)
            poller.unwatch(self.job_name, queue)
            if writer is not None:  # cancelled (the triggerer stops, or the trigger moves): keep the last cursor
                await writer.close()
