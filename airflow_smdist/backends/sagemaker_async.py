"""The sagemaker backend's asynchronous status and log source: what the triggers' coalesced pollers and the
blocking ``CoalescedRounds`` read SageMaker jobs with (the port is ``backends.base.StatusSource``).

Statuses: one paged ``List*Jobs(LastModifiedTimeAfter=...)`` call a round for every watched job of a kind.
Log lines: one paged CloudWatch ``FilterLogEvents`` call per log group a round, narrowed with
``logStreamNamePrefix`` to the watched jobs' common name prefix and routed to each job by stream name. (A
departure from batching 100 ``logStreamNames`` per call: a host's stream name carries its start epoch, which
only a DescribeLogStreams per job would tell.) A round reads from ``LOG_SETTLE_SECONDS`` before the previous
read (on CloudWatch's clock), and once every ``LOG_LAG_SECONDS`` a sweep reads the whole lag window for lines
CloudWatch ingested late, so a round's work follows the lines written since the last one; lines read twice are
skipped by event id. The watched jobs share one cursor, and a round touches a job's own state only when it got
lines or just joined (see :class:`CloudWatchLogReader`): a quiet round costs the same for 2,000 jobs as for 10.

Clients are async: the Amazon provider's ``SageMakerHook``/``AwsLogsHook`` ``get_async_conn()`` (aiobotocore),
made on first use (never at import). Throttling errors back off with jitter
(:func:`airflow_smdist.lifecycle.acall_with_backoff`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from airflow_smdist.backends.base import LogEvent
from airflow_smdist.backends.sagemaker_common import host_of_stream, job_error
from airflow_smdist.kinds import kind_info
from airflow_smdist.lifecycle import acall_with_backoff as with_backoff

#: CloudWatch may make a line visible after later ones, up to this long after its timestamp: a sweep every
#: this long reads from this far back (see CloudWatchLogReader)
LOG_LAG_SECONDS = 30.0
#: most lines are visible this soon after their timestamp: each round reads from this long before the last read
LOG_SETTLE_SECONDS = 5.0
#: a tuning job's trials are training jobs "<tuning job>-<3 digits>-<8 hex>" logging to the training group
_TRIAL_STREAM = re.compile(r"^(?P<trial>(?P<tuning>.+)-\d{3}-[0-9a-f]{8})/")

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

    async def _conn(self, service: str = "sagemaker") -> Any:
        if service not in self._clients:
            hook: Any
            if service == "sagemaker":
                from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

                hook = cast(Any, SageMakerHook)(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
            else:
                from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook

                hook = AwsLogsHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
            cm = await hook.get_async_conn()
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

    async def changed_since(self, kind: str, since: float | None) -> dict[str, dict[str, Any]]:
        """Summaries (List*Jobs) of the jobs of ``kind`` modified after ``since``, by name."""
        return (await self.changes(kind, since))[0]

    async def changes(self, kind: str, since: float | None) -> tuple[dict[str, dict[str, Any]], float | None]:
        """(:meth:`changed_since`, the service's time when it answered the first page (epoch, from the
        response's Date header; None when it sent none))."""
        client = await self._conn()
        kwargs: dict[str, Any] = {"MaxResults": 100}
        if since is not None:
            kwargs["LastModifiedTimeAfter"] = datetime.fromtimestamp(since, tz=UTC)
        out: dict[str, dict[str, Any]] = {}
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

        client = await self._conn()
        info = kind_info(kind)
        try:
            d = await with_backoff(lambda: getattr(client, info.method("describe"))(**{info.name_key: name}),
                                   counter=self.calls, what="describe")
        except ClientError as exc:
            raise job_error(exc, kind, name, info.describe_op) from exc
        d.pop("ResponseMetadata", None)
        return dict(d)

    def log_reader(self, kind: str) -> CloudWatchLogReader:
        """A reader of the new CloudWatch lines of a changing set of jobs of ``kind`` (one per log poller)."""
        return CloudWatchLogReader(self, kind)

    async def filter_events(self, kind: str, start: int, prefix: str, owners: Callable[[str], bool]
                            ) -> tuple[dict[str, list[tuple[int, int, LogEvent, str]]], int | None]:
        """One paged FilterLogEvents call over ``kind``'s log group from ``start`` (ms), streams named
        ``prefix...``: the lines of the jobs ``owners`` accepts, by job, as (timestamp, order, event, id); and
        the service's time of the read (ms, less a second: the Date header's resolution; None if unknown)."""
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

    def __init__(self, t: int, seen: list[Any]) -> None:
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

    async def read(self) -> dict[str, tuple[list[LogEvent], dict[str, Any]]]:
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
        out: dict[str, tuple[list[LogEvent], dict[str, Any]]] = {}
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

    def _new_lines(self, name: str, events: list[Any], horizon: int, seen: dict[str, int]) -> list[Any]:
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
