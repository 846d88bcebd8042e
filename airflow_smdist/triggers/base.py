"""Deferrable waiting that scales: many waiting jobs, few API calls.

Every trigger of this provider that waits for a job registers with one :class:`CoalescedPoller` per
(backend, job kind, poll interval) in the triggerer's event loop. Each interval the poller makes one
paged ``List*Jobs(LastModifiedTimeAfter=...)`` call for all the jobs it watches, and a ``Describe*`` only
for a job that is new to it or whose status changed, instead of one Describe per job per poll.
Throttling errors back off with jitter and never fail a task (:func:`airflow_smdist.lifecycle.acall_with_backoff`,
the same backoff the operators' and sensors' waits use). The local backend's jobs are watched the
same way (its list reads the jobs' state files).

Clients are async: the Amazon provider's ``SageMakerHook.get_async_conn()`` (aiobotocore). Log lines
(``print_logs``) go to the trigger's log, which Airflow shows in the task's log while it is deferred.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_smdist.kinds import kind_info
from airflow_smdist.lifecycle import THROTTLING_CODES, AsyncJobLifecycle, is_throttling
from airflow_smdist.lifecycle import acall_with_backoff as with_backoff

__all__ = ["THROTTLING_CODES", "is_throttling", "with_backoff"]  # the backoff lives in lifecycle.py

#: how far before the previous poll a List call looks, to cover clock skew between us and the service
LIST_OVERLAP_SECONDS = 60.0


class SageMakerStatusSource:
    """Job statuses from the SageMaker API through an aiobotocore client."""

    def __init__(self, aws_conn_id: str | None, region_name: str | None) -> None:
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.calls: dict[str, int] = {}
        self._client = None
        self._client_cm = None

    async def _conn(self):
        if self._client is None:
            from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

            hook = SageMakerHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
            self._client_cm = await hook.get_async_conn()
            self._client = await self._client_cm.__aenter__()
        return self._client

    async def close(self) -> None:
        if self._client_cm is not None:
            await self._client_cm.__aexit__(None, None, None)
            self._client = self._client_cm = None

    async def changed_since(self, kind: str, since: float | None) -> dict[str, str]:
        client = await self._conn()
        kwargs: dict[str, Any] = {"MaxResults": 100}
        if since is not None:
            kwargs["LastModifiedTimeAfter"] = datetime.fromtimestamp(since, tz=timezone.utc)
        out: dict[str, str] = {}
        info = kind_info(kind)
        while True:
            page = await with_backoff(lambda: getattr(client, info.method("list"))(**kwargs), counter=self.calls,
                                      what="list")
            for summary in page.get(info.summaries_key, []):
                out[summary[info.name_key]] = summary[info.status_key]
            token = page.get("NextToken")
            if not token or token == kwargs.get("NextToken"):
                return out
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


class LocalStatusSource:
    """Job statuses of the local backend (state files read in a worker thread)."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.calls: dict[str, int] = {}

    async def changed_since(self, kind: str, since: float | None) -> dict[str, str]:
        self.calls["list"] = self.calls.get("list", 0) + 1
        jobs = await asyncio.to_thread(self.backend.list_jobs, kind)
        info = kind_info(kind)
        return {j[info.name_key]: j[info.status_key] for j in jobs
                if since is None or (j["LastModifiedTime"] and j["LastModifiedTime"].timestamp() >= since)}

    async def describe(self, kind: str, name: str) -> dict[str, Any]:
        self.calls["describe"] = self.calls.get("describe", 0) + 1
        return await asyncio.to_thread(self.backend.describe, kind, name)

    async def close(self) -> None:
        return None


class CoalescedPoller:
    """Watches many jobs of one kind with one List call per interval (plus a Describe per change)."""

    def __init__(self, source, kind: str, interval: float) -> None:
        self.source = source
        self.kind = kind
        self.interval = interval
        self.watchers: dict[str, list[asyncio.Queue]] = {}
        self.known: dict[str, str] = {}
        self.task: asyncio.Task | None = None
        self.last_poll: float | None = None

    def watch(self, name: str) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        self.watchers.setdefault(name, []).append(queue)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())
        return queue

    def unwatch(self, name: str, queue: asyncio.Queue) -> None:
        queues = self.watchers.get(name, [])
        if queue in queues:
            queues.remove(queue)
        if not queues:
            self.watchers.pop(name, None)
            self.known.pop(name, None)

    async def _publish(self, name: str) -> None:
        try:
            description = await self.source.describe(self.kind, name)
        except Exception as exc:  # noqa: BLE001 - the waiting trigger decides what an error means
            for q in self.watchers.get(name, []):
                q.put_nowait(exc)
            return
        self.known[name] = kind_info(self.kind).status(description)
        for q in self.watchers.get(name, []):
            q.put_nowait(description)

    async def poll_once(self) -> None:
        started = time.time()
        new = [n for n in list(self.watchers) if n not in self.known]
        for name in new:  # a job seen for the first time is described once
            await self._publish(name)
        if self.last_poll is not None and any(n not in new for n in self.watchers):
            changed = await self.source.changed_since(self.kind, self.last_poll - LIST_OVERLAP_SECONDS)
            for name, status in changed.items():
                if name in self.watchers and name not in new and status != self.known.get(name):
                    await self._publish(name)
        self.last_poll = started

    async def _run(self) -> None:
        try:
            while self.watchers:
                try:
                    await self.poll_once()
                except Exception as exc:  # noqa: BLE001 - a failed poll is retried next interval
                    for queues in list(self.watchers.values()):
                        for q in queues:
                            q.put_nowait(exc)
                await asyncio.sleep(self.interval * random.uniform(0.9, 1.1))
        finally:
            if not self.watchers:
                await self.source.close()


_POLLERS: dict[tuple, CoalescedPoller] = {}


def poller_for(key: tuple, kind: str, interval: float, make_source) -> CoalescedPoller:
    """The one poller of this event loop for (backend key, kind, interval)."""
    loop_key = (id(asyncio.get_running_loop()), *key, kind, float(interval))
    poller = _POLLERS.get(loop_key)
    if poller is None or (poller.task is not None and poller.task.done() and not poller.watchers):
        poller = _POLLERS[loop_key] = CoalescedPoller(make_source(), kind, interval)
    return poller


class SmdistJobTrigger(BaseTrigger):
    """Waits for one job of any kind through the coalesced poller; yields one event at the end:
    ``{"status": "success"|"failed"|"stopped", "job_name", "job_status", "failure_reason"}``."""

    kind = "training"

    def __init__(self, *, job_name: str, backend: str = "local", smdist_conn_id: str | None = "smdist_default",
                 aws_conn_id: str | None = None, region_name: str | None = None, poll_interval: float = 30,
                 print_logs: bool = True, log_cursor: Any = None, kind: str | None = None,
                 secret_hyperparameters: list[str] | None = None) -> None:
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

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_name": self.job_name, "backend": self.backend, "smdist_conn_id": self.smdist_conn_id,
            "aws_conn_id": self.aws_conn_id, "region_name": self.region_name, "poll_interval": self.poll_interval,
            "print_logs": self.print_logs, "log_cursor": self.log_cursor, "kind": self.kind,
            "secret_hyperparameters": self.secret_hyperparameters})

    def _backend(self):
        from airflow_smdist.hooks.smdist import SmdistHook

        return SmdistHook(self.smdist_conn_id, aws_conn_id=self.aws_conn_id,
                          region_name=self.region_name).get_backend(self.backend)

    def _poller(self) -> CoalescedPoller:
        backend = self._backend()
        if backend.name == "sagemaker":
            key = ("sagemaker", backend.aws_conn_id, backend.region_name)
            return poller_for(key, self.kind, self.poll_interval,
                              lambda: SageMakerStatusSource(backend.aws_conn_id, backend.region_name))
        key = ("local", str(backend.store.root))
        return poller_for(key, self.kind, self.poll_interval, lambda: LocalStatusSource(backend))

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

    async def run(self) -> AsyncIterator[TriggerEvent]:
        poller = self._poller()
        queue = poller.watch(self.job_name)
        lifecycle = AsyncJobLifecycle(self._backend(), self.kind, self.job_name, log=self.log,
                                      poll_interval=self.poll_interval, log_cursor=self.log_cursor)
        logs = None  # started once the first description has told the masker the secrets
        masked = False
        try:
            while True:
                item = await queue.get()
                if not masked and not isinstance(item, Exception):
                    self.mask_secrets(item)
                    masked = True
                    if self.print_logs:
                        logs = asyncio.get_running_loop().create_task(lifecycle.stream_logs())
                event = lifecycle.error(item) if isinstance(item, Exception) else lifecycle.observe(item)
                if event is None:
                    continue
                if logs is not None and event["job_status"] is not None:
                    logs.cancel()
                    await lifecycle.print_new_logs()  # the last lines may land after the status
                self.log_cursor = lifecycle.log_cursor
                yield TriggerEvent(event)
                return
        finally:
            if logs is not None:
                logs.cancel()
            self.log_cursor = lifecycle.log_cursor
            poller.unwatch(self.job_name, queue)
