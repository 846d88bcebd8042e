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
reads the new lines of every watched job in one round per interval. On SageMaker that is one paged
CloudWatch ``FilterLogEvents`` call per log group, narrowed with ``logStreamNamePrefix`` to the watched jobs'
common name prefix and routed to each job by stream name. (A departure from batching 100
``logStreamNames`` per call: a host's stream name carries its start epoch, which only a DescribeLogStreams
per job would tell.) A round reads from ``LOG_SETTLE_SECONDS`` before the previous read (on CloudWatch's
clock), and once every ``LOG_LAG_SECONDS`` a sweep reads the whole lag window for lines CloudWatch ingested
late, so a round's work follows the lines written since the last one; lines read twice are skipped by event
id. The watched jobs share one cursor, and a round touches a job's own state only when it got lines or just
joined (see :class:`CloudWatchLogReader`): a quiet round costs the same for 2,000 jobs as for 10. While every
watched job is still provisioning (its secondary status says no container runs yet), no round is made. Each trigger keeps its cursor in a small file (next
to a local job; under the local root for SageMaker jobs) written after the lines were logged, so a trigger
rebuilt after a triggerer restart resumes where the last one stopped: no line twice, none lost.

Clients are async: the Amazon provider's ``SageMakerHook``/``AwsLogsHook`` ``get_async_conn()``
(aiobotocore). Log lines go to the trigger's log, which Airflow shows in the task's log while it is deferred.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import random
import re
import time
import weakref
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_smdist.backends.base import JobNotFound, LogEvent
from airflow_smdist.kinds import kind_info
from airflow_smdist.lifecycle import THROTTLING_CODES, AsyncJobLifecycle, is_throttling
from airflow_smdist.lifecycle import acall_with_backoff as with_backoff

__all__ = ["THROTTLING_CODES", "is_throttling", "with_backoff"]  # the backoff lives in lifecycle.py

#: how far before the status a trigger started from (``as_of``, this machine's clock) its first List call looks,
#: to cover clock skew between us and the service
LIST_OVERLAP_SECONDS = 60.0
#: later List calls look back this far before the previous call's time on the service's own clock (its
#: response's Date header): a change is visible to List within this long of its LastModifiedTime (the
#: service's List index is eventually consistent; the margin also covers the Date header's 1 s resolution)
LIST_SETTLE_SECONDS = 5.0
#: CloudWatch may make a line visible after later ones, up to this long after its timestamp: a sweep every
#: this long reads from this far back (see CloudWatchLogReader)
LOG_LAG_SECONDS = 30.0
#: most lines are visible this soon after their timestamp: each round reads from this long before the last read
LOG_SETTLE_SECONDS = 5.0
#: a log poller that follows a status poller reads on its own only when that one made no round for this long
#: (its first round makes the clients; a throttled List backs off)
LEADER_LATE_SECONDS = 30.0
#: a tuning job's trials are training jobs "<tuning job>-<3 digits>-<8 hex>" logging to the training group
_TRIAL_STREAM = re.compile(r"^(?P<trial>(?P<tuning>.+)-\d{3}-[0-9a-f]{8})/")


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.timestamp()


def _response_time(response: dict[str, Any]) -> float | None:
    """The service's clock when it answered (the HTTP Date header botocore keeps in ResponseMetadata)."""
    from email.utils import parsedate_to_datetime

    date = ((response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}).get("date")
    try:
        return parsedate_to_datetime(date).timestamp() if date else None
    except (TypeError, ValueError):
        return None


def common_prefix(names: list[str]) -> str:
    if not names:
        return ""
    lo, hi = min(names), max(names)
    i = 0
    while i < min(len(lo), len(hi)) and lo[i] == hi[i]:
        i += 1
    return lo[:i]


class SageMakerStatusSource:
    """Job statuses and log lines from the SageMaker and CloudWatch Logs APIs through aiobotocore clients."""

    def __init__(self, aws_conn_id: str | None, region_name: str | None) -> None:
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.calls: dict[str, int] = {}
        self._clients: dict[str, Any] = {}
        self._cms: dict[str, Any] = {}
        self._users = 0

    async def _conn(self, service: str = "sagemaker"):
        if service not in self._clients:
            if service == "sagemaker":
                from airflow.providers.amazon.aws.hooks.sagemaker import (
                    SageMakerHook as Hook,
                )
            else:
                from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook as Hook

            cm = await Hook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).get_async_conn()
            self._clients[service] = await cm.__aenter__()
            self._cms[service] = cm
        return self._clients[service]

    def acquire(self) -> None:
        self._users += 1

    async def close(self) -> None:
        """Called by each poller sharing this source when it stops; the last one closes the clients."""
        self._users = max(0, self._users - 1)
        if self._users:
            return
        cms, self._cms, self._clients = self._cms, {}, {}
        for cm in cms.values():
            await cm.__aexit__(None, None, None)

    async def changed_since(self, kind: str, since: float | None) -> dict[str, dict]:
        """Summaries (List*Jobs) of the jobs of ``kind`` modified after ``since``, by name."""
        return (await self.changes(kind, since))[0]

    async def changes(self, kind: str, since: float | None) -> tuple[dict[str, dict], float | None]:
        """(:meth:`changed_since`, the service's time when it answered the first page (epoch, from the
        response's Date header; None when it sent none))."""
        client = await self._conn()
        kwargs: dict[str, Any] = {"MaxResults": 100}
        if since is not None:
            kwargs["LastModifiedTimeAfter"] = datetime.fromtimestamp(since, tz=UTC)
        out: dict[str, dict] = {}
        info = kind_info(kind)
        server_time = None
        while True:
            page = await with_backoff(lambda: getattr(client, info.method("list"))(**kwargs), counter=self.calls,
                                      what="list")
            if server_time is None and "NextToken" not in kwargs:
                server_time = _response_time(page)
            for summary in page.get(info.summaries_key, []):
                out[summary[info.name_key]] = summary
            token = page.get("NextToken")
            if not token or token == kwargs.get("NextToken"):
                return out, server_time
            kwargs["NextToken"] = token

    async def describe(self, kind: str, name: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        from airflow_smdist.backends.sagemaker import job_error

        client = await self._conn()
        info = kind_info(kind)
        try:
            d = await with_backoff(lambda: getattr(client, info.method("describe"))(**{info.name_key: name}),
                                   counter=self.calls, what="describe")
        except ClientError as exc:
            raise job_error(exc, kind, name, info.describe_op) from exc
        d.pop("ResponseMetadata", None)
        return d

    def log_reader(self, kind: str) -> CloudWatchLogReader:
        """A reader of the new CloudWatch lines of a changing set of jobs of ``kind`` (one per log poller)."""
        return CloudWatchLogReader(self, kind)

    async def filter_events(self, kind: str, start: int, prefix: str, owners: Callable[[str], bool]
                            ) -> tuple[dict[str, list[tuple[int, int, LogEvent, str]]], int | None]:
        """One paged FilterLogEvents call over ``kind``'s log group from ``start`` (ms), streams named
        ``prefix...``: the lines of the jobs ``owners`` accepts, by job, as (timestamp, order, event, id); and
        the service's time of the read (ms, less a second: the Date header's resolution; None if unknown)."""
        from airflow_smdist.backends.sagemaker import host_of_stream

        kwargs: dict[str, Any] = {"logGroupName": kind_info(kind).log_group, "startTime": start}
        if prefix:
            kwargs["logStreamNamePrefix"] = prefix
        client = await self._conn("logs")
        found: dict[str, list[tuple[int, int, LogEvent, str]]] = {}
        order = 0
        server_time = None
        while True:
            try:
                page = await with_backoff(lambda: client.filter_log_events(**kwargs), counter=self.calls, what="logs")
            except Exception as exc:
                if (getattr(exc, "response", None) or {}).get("Error", {}).get("Code") == "ResourceNotFoundException":
                    break  # the log group does not exist (yet)
                raise
            if server_time is None and "nextToken" not in kwargs:
                server_time = _response_time(page)
            for e in page.get("events", []):
                stream = e["logStreamName"]
                owner, host = stream.split("/", 1)[0], None
                if kind == "tuning":
                    m = _TRIAL_STREAM.match(stream)
                    if m:
                        owner, trial = m["tuning"], m["trial"]
                        host = f"{trial[len(owner) + 1:]}/{host_of_stream(trial, stream)}"
                if not owners(owner):
                    continue
                host = host or host_of_stream(owner, stream)
                order += 1
                found.setdefault(owner, []).append((
                    e["timestamp"], order, LogEvent(e["timestamp"] / 1000.0, host, e["message"]),
                    e.get("eventId") or f"{stream}@{e['timestamp']}@{order}"))
            token = page.get("nextToken")
            if not token or token == kwargs.get("nextToken"):
                break
            kwargs["nextToken"] = token
        return found, None if server_time is None else int(server_time * 1000) - 1000


class _LogCursor:
    """A job's log cursor as a trigger keeps it (``{"t", "seen", "r"}``, see :class:`CloudWatchLogReader`):
    every line stamped before ``t - LOG_LAG_SECONDS`` (ms) was read; ``seen``: the ids of the lines stamped
    since then that were read."""

    def __init__(self, t: int, seen: list) -> None:
        self.t = int(t)
        self.seen = {str(i): int(ts) for ts, i in seen}

    @classmethod
    def load(cls, cursor: Any) -> _LogCursor:
        if isinstance(cursor, dict) and "t" in cursor:
            return cls(cursor["t"], cursor.get("seen", []))
        return cls(0, [])

    def start_ms(self) -> int:
        """Where a sweep reads from: no line stamped earlier can be new."""
        return max(0, self.t - int(LOG_LAG_SECONDS * 1000))


class CloudWatchLogReader:
    """The new lines of the jobs of one kind a log poller watches, one paged FilterLogEvents call a round, with
    work that follows the lines read and the jobs that joined or left, not the number of jobs watched.

    One cursor for the whole group: ``t`` (ms): every line of every member stamped before
    ``t - LOG_LAG_SECONDS`` was read (a line reaches CloudWatch within ``LOG_LAG_SECONDS`` of its timestamp);
    ``r`` (ms): the service's time of the last read (None: unknown). A round reads from
    ``r - LOG_SETTLE_SECONDS`` (most lines arrive that soon), so it re-reads seconds of lines, not the whole lag
    window; once every ``LOG_LAG_SECONDS`` a round sweeps from ``t - LOG_LAG_SECONDS`` for the lines that
    arrived later than that, and only such a round moves ``t`` on. Lines read twice are skipped by event id.

    Per job, only: the ids of its lines stamped since the group's horizon (so a job without lines costs nothing
    a round), and, while it is later than the group's, the horizon of the cursor it joined with. A job that
    joins (a new wait, or a trigger rebuilt with its saved cursor) is read in the next round from its own
    cursor (a sweep of its lag window) and is a member from then on. A job's cursor, in the form a trigger
    saves and resumes from, is made only when the job has new lines."""

    #: CloudWatch holds a job's lines only once its containers run (the local backend's supervisor writes
    #: lines of its own while it starts a job): see :meth:`CoalescedLogPoller.nothing_to_read`
    silent_before_containers = True

    def __init__(self, source: SageMakerStatusSource, kind: str) -> None:
        self.source = source
        self.kind = kind
        self.t: int | None = None
        self.r: int | None = None
        self.members: set[str] = set()
        self.joining: dict[str, _LogCursor] = {}
        #: job -> {event id: timestamp} of its lines read since the group's horizon (jobs with such lines only)
        self.seen: dict[str, dict[str, int]] = {}
        #: job -> the horizon (ms) of the cursor it joined with, while that is later than the group's
        self.floor: dict[str, int] = {}
        self._prefix: str | None = None  # the watched jobs' common name prefix (None: to be worked out)

    def add(self, name: str, cursor: Any) -> None:
        self.remove(name)
        self.joining[name] = _LogCursor.load(cursor)
        if self._prefix is not None:
            self._prefix = common_prefix([self._prefix, name])

    def remove(self, name: str) -> None:
        if name not in self.members and name not in self.joining:
            return
        self.members.discard(name)
        self.joining.pop(name, None)
        self.seen.pop(name, None)
        self.floor.pop(name, None)
        self._prefix = None
        if not self.members and not self.joining:  # a group that joins later starts from its own cursors
            self.t = self.r = None
            self.seen.clear()
            self.floor.clear()

    def _horizon(self) -> int:
        return max(0, (self.t or 0) - int(LOG_LAG_SECONDS * 1000))

    def _read_from(self) -> int | None:
        """Where the members' next round reads from: a sweep when one is due or the last read's time is unknown."""
        if self.t is None:
            return None
        if self.r is None or self.r - self.t >= LOG_LAG_SECONDS * 1000:
            return self._horizon()
        return max(self._horizon(), self.r - int(LOG_SETTLE_SECONDS * 1000))

    def _prefix_now(self) -> str:
        if self._prefix is None:
            ends = [min(self.members), max(self.members)] if self.members else []
            self._prefix = common_prefix(ends + list(self.joining))
        return self._prefix

    async def read(self) -> dict[str, tuple[list[LogEvent], dict]]:
        """One round: the new lines of each job that has some, and its cursor after them."""
        joining = dict(self.joining)  # read from their own cursors this round
        members = self.members
        starts = [c.start_ms() for c in joining.values()]
        group_from = self._read_from() if members else None
        if group_from is not None:
            starts.append(group_from)
        if not starts:
            return {}
        start = min(starts)
        found, read_ms = await self.source.filter_events(
            self.kind, start, self._prefix_now(), lambda owner: owner in members or owner in joining)
        latest = max((e[0] for events in found.values() for e in events), default=None)
        evidence = max((x for x in (read_ms, latest) if x is not None), default=None)  # the service's "now"
        out: dict[str, tuple[list[LogEvent], dict]] = {}
        for name in [n for n in found if n in self.members and n not in joining]:
            new = self._new_lines(name, found[name], max(self._horizon(), self.floor.get(name, 0)),
                                  self.seen.get(name, {}))
            if new:
                out[name] = ([e[2] for e in new], {})
        if group_from is not None:
            self._advance(start <= self._horizon(), evidence, read_ms)
        for name, cursor in joining.items():
            if self.joining.get(name) is cursor:  # not left meanwhile
                new = self._new_lines(name, found.get(name, []), cursor.start_ms(), cursor.seen)
                self._join(name, cursor, evidence, read_ms)
                if new:
                    out[name] = ([e[2] for e in new], {})
        return {name: (events, self.cursor(name)) for name, (events, _c) in out.items()}

    def _new_lines(self, name: str, events: list, horizon: int, seen: dict[str, int]) -> list:
        new = [e for e in sorted(events) if e[0] >= horizon and e[3] not in seen]
        if new:
            kept = self.seen.setdefault(name, {})
            kept.update({e[3]: e[0] for e in new})
        return new

    def _advance(self, sweep: bool, evidence: int | None, read_ms: int | None) -> None:
        """The group's cursor after a round (a sweep of its lag window moves ``t`` on)."""
        if self.t is None:  # every member left during the round
            return
        if read_ms is not None:
            self.r = read_ms if self.r is None else max(self.r, read_ms)
        if not sweep or evidence is None or evidence <= self.t:
            return
        self.t = evidence
        horizon = self._horizon()
        for name in list(self.seen):  # the lines of the last LOG_LAG_SECONDS, not the jobs
            kept = {i: ts for i, ts in self.seen[name].items() if ts >= horizon}
            if kept:
                self.seen[name] = kept
            else:
                del self.seen[name]
        self.floor = {name: f for name, f in self.floor.items() if f > horizon}

    def _join(self, name: str, cursor: _LogCursor, evidence: int | None, read_ms: int | None) -> None:
        """A job read from its own cursor (a sweep of its lag window) becomes a member."""
        del self.joining[name]
        t = cursor.t if evidence is None else max(cursor.t, evidence)
        if self.t is None:  # the first member: the group's cursor is its own
            self.t, self.r = t, read_ms
        self.members.add(name)
        own = max(0, t - int(LOG_LAG_SECONDS * 1000))
        if own > self._horizon():
            self.floor[name] = own
        horizon = max(own, self._horizon())
        kept = {i: ts for i, ts in (cursor.seen | self.seen.get(name, {})).items() if ts >= horizon}
        if kept:
            self.seen[name] = kept
        else:
            self.seen.pop(name, None)

    def cursor(self, name: str) -> dict[str, Any]:
        """``name``'s cursor as a trigger saves it: resumed, it reads no line twice and loses none."""
        t = max(self.t or 0, self.floor.get(name, 0) + int(LOG_LAG_SECONDS * 1000))
        horizon = max(0, t - int(LOG_LAG_SECONDS * 1000))
        seen = sorted([ts, i] for i, ts in self.seen.get(name, {}).items() if ts >= horizon)
        out: dict[str, Any] = {"t": t, "seen": seen}
        if self.r is not None:
            out["r"] = self.r
        return out


class LocalStatusSource:
    """Job statuses and log lines of the local backend (state and log files read in a worker thread)."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.calls: dict[str, int] = {}

    def acquire(self) -> None:
        return None

    async def changed_since(self, kind: str, since: float | None) -> dict[str, dict]:
        return (await self.changes(kind, since))[0]

    async def changes(self, kind: str, since: float | None) -> tuple[dict[str, dict], float | None]:
        """(the jobs of ``kind`` modified at or after ``since``, the time the state files were read): the
        local backend's jobs share this machine's clock."""
        self.calls["list"] = self.calls.get("list", 0) + 1
        read_at = time.time()
        jobs = await asyncio.to_thread(self.backend.list_jobs, kind)
        name_key = kind_info(kind).name_key
        return {j[name_key]: j for j in jobs
                if since is None or (j["LastModifiedTime"] and j["LastModifiedTime"].timestamp() >= since)}, read_at

    async def describe(self, kind: str, name: str) -> dict[str, Any]:
        self.calls["describe"] = self.calls.get("describe", 0) + 1
        return await asyncio.to_thread(self.backend.describe, kind, name)

    async def read_logs(self, kind: str, cursors: dict[str, Any]) -> dict[str, tuple[list[LogEvent], Any]]:
        self.calls["logs"] = self.calls.get("logs", 0) + 1

        def read():
            out = {}
            for name, cursor in cursors.items():
                try:
                    out[name] = self.backend.log_events(kind, name, cursor)
                except JobNotFound:
                    out[name] = ([], cursor)
            return out

        return await asyncio.to_thread(read)

    async def close(self) -> None:
        return None


class CoalescedPoller:
    """Watches many jobs of one kind with one List call per interval; a Describe only for a job whose
    trigger did not say what status it started from.

    A round's work follows what changed, not how many jobs are watched: each List asks only for the jobs
    modified since the previous List (on the service's clock, less :data:`LIST_SETTLE_SECONDS`), and looks
    further back (the trigger's ``as_of`` less :data:`LIST_OVERLAP_SECONDS`) only in the first round of a job
    that was just watched."""

    def __init__(self, source, kind: str, interval: float) -> None:
        self.source = source
        self.kind = kind
        self.interval = interval
        self.watchers: dict[str, list[asyncio.Queue]] = {}
        self.known: dict[str, tuple] = {}
        #: jobs no List has covered yet: the time (this machine's clock) their status was seen
        self.as_of: dict[str, float] = {}
        #: jobs watched without a status: described once, in the next round
        self.unknown: set[str] = set()
        #: every change the service made before this time (its clock, epoch) has been read
        self.cursor: float | None = None
        self.task: asyncio.Task | None = None
        #: called after each round (the log poller of the same jobs, which reads right after it)
        self.after_round: list[Callable[[], None]] = []

    def watch(self, name: str, status: str | None = None, as_of: float | None = None) -> asyncio.Queue:
        """Watch job ``name``; ``status`` as seen at time ``as_of`` (epoch), if known, saves its first Describe."""
        queue: asyncio.Queue = asyncio.Queue()
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

    def unwatch(self, name: str, queue: asyncio.Queue) -> None:
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


class _PerJobLogReader:
    """A source's ``read_logs(kind, cursors)`` (every watched job's cursor in, a result per job out; the local
    backend reads each job's log files) in the reader form :class:`CoalescedLogPoller` uses."""

    def __init__(self, source, kind: str) -> None:
        self.source = source
        self.kind = kind
        self.cursors: dict[str, Any] = {}

    def add(self, name: str, cursor: Any) -> None:
        self.cursors[name] = cursor

    def remove(self, name: str) -> None:
        self.cursors.pop(name, None)

    async def read(self) -> dict[str, tuple[list[LogEvent], Any]]:
        asked = dict(self.cursors)
        if not asked:
            return {}
        results = await self.source.read_logs(self.kind, asked)
        out = {}
        for name, (events, cursor) in results.items():
            if self.cursors.get(name, self) is asked[name]:  # still watched, from the same cursor
                self.cursors[name] = cursor
                if events:
                    out[name] = (events, cursor)
        return out


class CoalescedLogPoller:
    """Reads the new log lines of every watched job of one kind in one round per interval (one paged
    FilterLogEvents call on SageMaker). ``flush(name)`` asks for a round now and waits for it: a trigger
    whose job ended prints the job's last lines before it yields.

    Following the status poller of the same jobs (:meth:`follow`), a round runs right after each of its
    List rounds rather than on a timer of its own: the round that prints the last lines of the jobs a List
    found ended is that interval's round too, so a job ending costs no log call of its own. Its own timer
    only runs a round when the status poller made none for :data:`LEADER_LATE_SECONDS` (and two intervals).
    While no watched job's containers have started, no round is made (:meth:`nothing_to_read`)."""

    def __init__(self, source, kind: str, interval: float) -> None:
        self.source = source
        self.kind = kind
        self.interval = interval
        self.watchers: dict[str, dict[str, Any]] = {}
        self.task: asyncio.Task | None = None
        self.wake = asyncio.Event()
        self.round_done: asyncio.Future | None = None
        log_reader = getattr(source, "log_reader", None)
        self.reader = log_reader(kind) if log_reader is not None else _PerJobLogReader(source, kind)
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
        if self.leader is None or not getattr(self.reader, "silent_before_containers", False):
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
            except Exception:  # noqa: BLE001,S110 - one trigger's logging must not stop the others' lines
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
                except Exception:  # noqa: BLE001,S110 - logs are best effort; the status decides
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
_POLLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, Any]] = weakref.WeakKeyDictionary()
_SOURCES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, Any]] = weakref.WeakKeyDictionary()


def _shared(key: tuple, cls, kind: str, interval: float, make_source):
    loop = asyncio.get_running_loop()
    sources = _SOURCES.setdefault(loop, {})
    source = sources.get(key)
    if source is None:
        source = sources[key] = make_source()
    pollers = _POLLERS.setdefault(loop, {})
    poller_key = (cls.__name__, *key, kind, float(interval))
    poller = pollers.get(poller_key)
    if poller is None:
        poller = pollers[poller_key] = cls(source, kind, interval)
    return poller


def poller_for(key: tuple, kind: str, interval: float, make_source) -> CoalescedPoller:
    """The one status poller of this event loop for (backend key, kind, interval)."""
    return _shared(key, CoalescedPoller, kind, interval, make_source)


def log_poller_for(key: tuple, kind: str, interval: float, make_source) -> CoalescedLogPoller:
    """The one log poller of this event loop for (backend key, kind, interval)."""
    return _shared(key, CoalescedLogPoller, kind, interval, make_source)


def cursor_path(backend, kind: str, name: str) -> Path:
    """Where a trigger keeps a job's log cursor: next to a local job; under the local root for SageMaker."""
    if backend.name == "local":
        return backend.job_dir(kind, name) / "trigger-log-cursor.json"
    from airflow_smdist.backends.local.store import default_root

    region = backend.region_name or os.environ.get("AWS_DEFAULT_REGION") or "default"
    return default_root() / "trigger-log-cursors" / "sagemaker" / region / kind / f"{name}.json"


class SmdistJobTrigger(BaseTrigger):
    """Waits for one job of any kind through the coalesced pollers; yields one event at the end:
    ``{"status": "success"|"failed"|"stopped", "job_name", "job_status", "failure_reason"}``.

    ``job_status`` / ``as_of`` / ``created``: the job's status, when it was seen, and its creation time (epoch),
    from the operator's Describe before deferring. ``cursor_key`` identifies this deferral: the persisted log
    cursor is resumed only by a trigger rebuilt from the same kwargs (a triggerer restart), so a later try
    prints the job's log afresh into its own task log. With ``secret_hyperparameters`` the trigger describes
    the job once, to mask their values before it writes any log line."""

    kind = "training"

    def __init__(self, *, job_name: str, backend: str = "local", smdist_conn_id: str | None = "smdist_default",
                 aws_conn_id: str | None = None, region_name: str | None = None, poll_interval: float = 30,
                 print_logs: bool = True, log_cursor: Any = None, kind: str | None = None,
                 secret_hyperparameters: list[str] | None = None, job_status: str | None = None,
                 as_of: float | None = None, created: float | None = None, cursor_key: str | None = None) -> None:
        super().__init__()
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
        self._resolved = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_name": self.job_name, "backend": self.backend, "smdist_conn_id": self.smdist_conn_id,
            "aws_conn_id": self.aws_conn_id, "region_name": self.region_name, "poll_interval": self.poll_interval,
            "print_logs": self.print_logs, "log_cursor": self.log_cursor, "kind": self.kind,
            "secret_hyperparameters": self.secret_hyperparameters, "job_status": self.job_status,
            "as_of": self.as_of, "created": self.created, "cursor_key": self.cursor_key})

    async def _backend(self):
        """The backend, resolved once per trigger (one connection lookup, in a thread: it may block)."""
        if self._resolved is None:
            from airflow_smdist.hooks.smdist import SmdistHook

            hook = SmdistHook(self.smdist_conn_id, aws_conn_id=self.aws_conn_id, region_name=self.region_name)
            self._resolved = await asyncio.to_thread(hook.get_backend, self.backend)
        return self._resolved

    def _pollers(self, backend) -> tuple[CoalescedPoller, CoalescedLogPoller]:
        if backend.name == "sagemaker":
            key = ("sagemaker", backend.aws_conn_id, backend.region_name)

            def make():
                return SageMakerStatusSource(backend.aws_conn_id, backend.region_name)
        else:
            key = ("local", str(backend.store.root))

            def make():
                return LocalStatusSource(backend)
        status = poller_for(key, self.kind, self.poll_interval, make)
        logs = log_poller_for(key, self.kind, self.poll_interval, make)
        logs.follow(status)
        return status, logs

    def mask_secrets(self, description: dict[str, Any]) -> None:
        """Register the secret hyperparameters' values (read from the job's description) with this
        triggerer's secrets masker, before the trigger writes any line of the job's log."""
        if not self.secret_hyperparameters:
            return
        from airflow_smdist._compat import mask_hyperparameter

        definitions = [description.get("TrainingJobDefinition") or {}, *(description.get("TrainingJobDefinitions") or [])]
        sources = [description.get("HyperParameters") or {}] + [d.get("StaticHyperParameters") or {}
                                                                 for d in definitions]
        for hps in sources:
            for name in self.secret_hyperparameters:
                mask_hyperparameter(hps.get(name))

    # -- the log cursor, persisted so a rebuilt trigger resumes ------------------------------------------------
    def _load_cursor(self, backend) -> Any:
        try:
            saved = json.loads(cursor_path(backend, self.kind, self.job_name).read_text())
        except (OSError, ValueError):
            saved = None
        if isinstance(saved, dict) and self.cursor_key and saved.get("key") == self.cursor_key:
            return saved.get("cursor")
        if self.log_cursor is not None:
            return self.log_cursor
        if backend.name == "sagemaker" and self.created:
            return {"t": int(self.created * 1000), "seen": []}
        return None

    def _save_cursor(self, backend, cursor: Any) -> None:
        if not self.cursor_key:
            return
        path = cursor_path(backend, self.kind, self.job_name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": self.cursor_key, "cursor": cursor}))
            os.replace(tmp, path)
        except OSError as exc:
            self.log.debug("could not save the log cursor of %s: %s", self.job_name, exc)

    def _log_sink(self, backend):
        def sink(events: list[LogEvent], cursor: Any) -> None:
            for e in events:
                self.log.info("%s", e.format())
            self.log_cursor = cursor
            if events:  # after the lines went to the log: a crash in between repeats them, never loses them
                self._save_cursor(backend, cursor)
        return sink

    # -- the wait ---------------------------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[TriggerEvent]:
        backend = await self._backend()
        poller, log_poller = self._pollers(backend)
        lifecycle = AsyncJobLifecycle(self.kind, self.job_name, log=self.log)
        secrets = bool(self.secret_hyperparameters)  # their values come from one Describe, before any log line
        queue = poller.watch(self.job_name, None if secrets else self.job_status, self.as_of)
        logging_started = False
        if self.job_status and not secrets:
            lifecycle.observe({kind_info(self.kind).status_key: self.job_status})
        try:
            while True:
                if self.print_logs and not logging_started and not secrets:
                    log_poller.watch(self.job_name, self._load_cursor(backend), self._log_sink(backend))
                    logging_started = True
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
                if logging_started and payload["job_status"] is not None:
                    # the job's last lines, in a round shared with every job ending now
                    await log_poller.flush(self.job_name)
                yield TriggerEvent(payload)
                return
        finally:
            log_poller.unwatch(self.job_name)
            poller.unwatch(self.job_name, queue)
