"""Where a trigger keeps its job's log cursor, and the one writer that keeps it there (issue 31, item 6).

A trigger prints its job's lines live and remembers how far it printed (the *cursor*), so that a trigger rebuilt
from its kwargs resumes there: no line twice, none lost. The cursor goes to a store every triggerer reads:

* :class:`XComCursorStore`, the XCom ``smdist_log_cursor`` of the deferred task instance (``trigger.task_instance``),
  in Airflow's metadata database, which every triggerer of a deployment shares (a trigger moved to another
  triggerer, on MWAA or in a high-availability deployment, finds it there). A new try of the task starts with
  no XComs; the operator's ``execute_complete`` deletes it, so the task's XComs show only its result.
* the backend's file (:meth:`~airflow_smdist.backends.base.Backend.log_cursor_store`) where a trigger has no task
  instance (built by hand) or its backend's jobs and logs are on one machine (the local backend).

The record is ``{"key": <the deferral's cursor_key>, "cursor": <the backend's cursor>}``: a trigger resumes only a
cursor saved under its own deferral's key. :class:`CursorWriter` saves it after the lines it covers were logged (a
crash in between repeats lines, never loses them), off the event loop's critical path: one writer per trigger,
the last cursor wins, flushed before the trigger yields its event (and, for a few seconds at most, when the
trigger is cancelled: a triggerer that stops, or a trigger that moves).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_smdist.backends.base import Backend, LogCursorStore

#: the XCom key of a trigger's log cursor
XCOM_KEY = "smdist_log_cursor"
#: how long a trigger that ends (or is cancelled) waits for its last cursor to be saved
CLOSE_SECONDS = 5.0


def kept_in_xcom(ti: Any, backend: Backend) -> bool:
    """Whether a trigger of task instance ``ti`` (None: a trigger built by hand) keeps its cursor in the XCom (the
    trigger reads and writes it there; the operator seeds it there before it defers), else in the backend's file."""
    return ti is not None and backend.capabilities.shared_log_cursor


def cursor_record(cursor_key: str, cursor: Any) -> dict[str, Any]:
    """What a store keeps: the deferral's key and its cursor (None: the operator's seed, no line printed yet)."""
    return {"key": cursor_key, "cursor": cursor}


class XComCursorStore:
    """The log cursor as the XCom :data:`XCOM_KEY` of task instance ``ti`` (see ``_compat.trigger_xcom_get``)."""

    def __init__(self, ti: Any) -> None:
        self.ti = ti

    def __repr__(self) -> str:
        ti = self.ti
        return f"XComCursorStore({ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.map_index})"

    async def load(self) -> dict[str, Any] | None:
        from airflow_smdist._compat import trigger_xcom_get

        saved = await trigger_xcom_get(self.ti, XCOM_KEY)
        return saved if isinstance(saved, dict) else None

    async def save(self, record: dict[str, Any]) -> None:
        from airflow_smdist._compat import trigger_xcom_set

        await trigger_xcom_set(self.ti, XCOM_KEY, record)


class CursorWriter:
    """Saves a trigger's cursor records to ``store`` one at a time, in a task of its own: :meth:`put` never waits
    (a sink calls it right after logging the lines), a record put while a save runs replaces any record still
    waiting (the last cursor wins), and :meth:`flush` waits until the last record put is saved. A failed save is
    logged and dropped: a later one, or the cursor in the trigger's kwargs, is resumed instead (lines repeat,
    none is lost)."""

    def __init__(self, store: LogCursorStore, log: logging.Logger | logging.LoggerAdapter[Any] | Any) -> None:
        self.store = store
        self.log = log
        self.pending: dict[str, Any] | None = None
        self.task: asyncio.Task[None] | None = None
        #: records saved (a test's count)
        self.saved = 0

    def put(self, record: dict[str, Any]) -> None:
        self.pending = record
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self.pending is not None:
            record, self.pending = self.pending, None
            try:
                await self.store.save(record)
                self.saved += 1
            except Exception as exc:  # noqa: BLE001 - a cursor not kept repeats lines later; the wait goes on
                self.log.warning("could not keep the log cursor in %r: %s", self.store, exc)

    async def flush(self) -> None:
        """Wait until every record put so far is saved (or failed)."""
        while self.task is not None and not self.task.done():
            await asyncio.shield(self.task)

    async def close(self) -> None:
        """At the trigger's end, cancelled or not: let a save under way or waiting finish, for at most
        :data:`CLOSE_SECONDS` (a triggerer that stops gives its triggers a moment to clean up)."""
        if self.task is None or self.task.done():
            return
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self.flush()), CLOSE_SECONDS)
