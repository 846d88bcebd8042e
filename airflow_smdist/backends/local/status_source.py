"""The local backend's asynchronous status and log source: what the triggers' coalesced pollers read local
jobs with (the port is ``backends.base.StatusSource``): the jobs' state and log files, read in a worker thread."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from airflow_smdist.backends.base import JobNotFound, LogEvent
from airflow_smdist.kinds import kind_info

if TYPE_CHECKING:
    from airflow_smdist.backends.local import LocalBackend


class PerJobLogs(Protocol):
    def read_logs(self, kind: str, cursors: dict[str, Any]) -> Awaitable[dict[str, tuple[list[LogEvent], Any]]]:
        ...


class PerJobLogReader:
    """A source's ``read_logs(kind, cursors)`` (every watched job's cursor in, a result per job out; the local
    backend reads each job's log files) in the reader form the triggers' ``CoalescedLogPoller`` uses."""

    #: the supervisor writes lines of its own while it starts a job: there is something to read at once
    silent_before_containers = False

    def __init__(self, source: PerJobLogs, kind: str) -> None:
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


class LocalStatusSource:
    """Job statuses and log lines of the local backend (state and log files read in a worker thread)."""

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend
        self.calls: dict[str, int] = {}

    def acquire(self) -> None:
        return None

    async def changed_since(self, kind: str, since: float | None) -> dict[str, dict[str, Any]]:
        return (await self.changes(kind, since))[0]

    async def changes(self, kind: str, since: float | None) -> tuple[dict[str, dict[str, Any]], float | None]:
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

        def read() -> dict[str, tuple[list[LogEvent], Any]]:
            out: dict[str, tuple[list[LogEvent], Any]] = {}
            for name, cursor in cursors.items():
                try:
                    out[name] = self.backend.log_events(kind, name, cursor)
                except JobNotFound:
                    out[name] = ([], cursor)
            return out

        return await asyncio.to_thread(read)

    def log_reader(self, kind: str) -> PerJobLogReader:
        """Each watched job's log files, read in one thread hop a round."""
        return PerJobLogReader(self, kind)

    async def close(self) -> None:
        return None
