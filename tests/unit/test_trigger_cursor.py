"""Where a trigger keeps its log cursor (airflow_smdist/triggers/cursor.py, issue 31 item 6): the store it chooses,
the order of logging and saving, the one writer (last cursor wins, flushed before the event), and the Airflow 3
XCom round trip through the triggerer's supervisor channel (a fake ``SUPERVISOR_COMMS`` playing the supervisor).
Against the in-memory backend (tests/unit/stub_backend.py); nothing sleeps longer than a few milliseconds."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from stub_backend import StubBackend, summary

from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS, task_xcom_delete
from airflow_smdist.backends.base import Capabilities, FileCursorStore
from airflow_smdist.triggers.base import SmdistJobTrigger
from airflow_smdist.triggers.cursor import XCOM_KEY, CursorWriter, XComCursorStore

KIND = "training"
INTERVAL = 0.001
TI = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


def capture(trigger: SmdistJobTrigger, records: list[str]) -> None:
    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger(f"smdist.test.cursor.{uuid.uuid4().hex}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(Keep())
    trigger._log = logger


def trigger_for(backend: StubBackend, ti: Any = None, **kw: Any) -> SmdistJobTrigger:
    kw.setdefault("cursor_key", "deferral-1")
    trigger = SmdistJobTrigger(job_name="job", backend="stub", poll_interval=INTERVAL, kind=KIND,
                               job_status="InProgress", as_of=time.time(), **kw)
    trigger._resolved = backend
    trigger.task_instance = ti
    return trigger


def shared(backend: StubBackend) -> StubBackend:
    backend.capabilities = Capabilities(shared_log_cursor=True)
    return backend


async def first_event(trigger: SmdistJobTrigger) -> Any:
    events = trigger.run()
    try:
        return await events.__anext__()
    finally:
        await events.aclose()


class FakeComms:
    """The triggerer's (or a task's) supervisor channel, answering GetXCom/SetXCom/DeleteXCom from a dict, as
    the supervisor does through the execution API."""

    def __init__(self) -> None:
        self.xcoms: dict[tuple[str, str, str, int | None, str], Any] = {}
        self.sent: list[Any] = []

    def _answer(self, msg: Any) -> Any:
        from airflow.sdk.execution_time.comms import XComResult

        self.sent.append(msg)
        key = (msg.dag_id, msg.run_id, msg.task_id, msg.map_index, msg.key)
        if msg.type == "SetXCom":
            self.xcoms[key] = msg.value
        elif msg.type == "DeleteXCom":
            self.xcoms.pop(key, None)
        elif msg.type == "GetXCom":
            return XComResult(key=msg.key, value=self.xcoms.get(key))
        return None

    async def asend(self, msg: Any) -> Any:
        await asyncio.sleep(0)
        return self._answer(msg)

    def send(self, msg: Any) -> Any:
        return self._answer(msg)


@pytest.fixture
def comms(monkeypatch: pytest.MonkeyPatch) -> FakeComms:
    if not AIRFLOW_V_3_0_PLUS:
        pytest.skip("the supervisor channel is Airflow 3's")
    from airflow.sdk.execution_time import task_runner

    fake = FakeComms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", fake, raising=False)
    return fake


# -- which store ----------------------------------------------------------------------------------------------
def test_a_trigger_with_a_task_instance_keeps_its_cursor_in_the_xcom_where_the_backend_allows_else_in_the_file(
        tmp_path: Any) -> None:
    file_backend = StubBackend(root=tmp_path)
    by_hand = trigger_for(file_backend).cursor_store(file_backend)
    assert isinstance(by_hand, FileCursorStore) and by_hand.path == tmp_path / KIND / "job.cursor.json"
    # a backend whose jobs' logs are on one machine keeps the file even for a trigger Airflow runs
    assert isinstance(trigger_for(file_backend, TI).cursor_store(file_backend), FileCursorStore)
    backend = shared(StubBackend(root=tmp_path))
    assert isinstance(trigger_for(backend).cursor_store(backend), FileCursorStore)  # no task instance
    store = trigger_for(backend, TI).cursor_store(backend)
    assert isinstance(store, XComCursorStore) and store.ti is TI


# -- the writer -----------------------------------------------------------------------------------------------
class SlowStore:
    """A store whose saves wait for ``release``; what each save was asked, and what the trigger had logged then."""

    def __init__(self, logged: list[str] | None = None) -> None:
        self.release = asyncio.Event()
        self.saves: list[tuple[dict[str, Any], list[str]]] = []
        self.logged = logged if logged is not None else []
        self.record: dict[str, Any] | None = None
        self.asked = asyncio.Event()

    async def load(self) -> dict[str, Any] | None:
        return self.record

    async def save(self, record: dict[str, Any]) -> None:
        self.saves.append((record, list(self.logged)))
        self.asked.set()
        await self.release.wait()
        self.record = record


def test_the_writer_saves_the_last_cursor_put_while_a_save_runs_and_flush_waits_for_it() -> None:
    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any] | None, int]:
        store = SlowStore()
        writer = CursorWriter(store, logging.getLogger("test"))
        for n in range(1, 5):  # 1 starts saving; 2 and 3 are replaced by 4 while it runs
            writer.put({"key": "k", "cursor": n})
            await asyncio.sleep(0)
        flushed = asyncio.ensure_future(writer.flush())
        await asyncio.sleep(0.01)
        assert not flushed.done()  # the save still runs
        store.release.set()
        await flushed
        return [r for r, _ in store.saves], store.record, writer.saved

    saves, kept, count = run(scenario())
    assert saves == [{"key": "k", "cursor": 1}, {"key": "k", "cursor": 4}] and kept == {"key": "k", "cursor": 4}
    assert count == 2


def test_a_failed_save_is_logged_and_the_next_one_still_made() -> None:
    class Flaky(SlowStore):
        async def save(self, record: dict[str, Any]) -> None:
            if record["cursor"] == 1:
                raise OSError("disk full")
            self.record = record

    warnings: list[str] = []
    log = logging.getLogger(f"smdist.test.cursor.{uuid.uuid4().hex}")
    log.propagate = False
    log.addHandler(type("Keep", (logging.Handler,), {"emit": lambda self, r: warnings.append(r.getMessage())})())

    async def scenario() -> dict[str, Any] | None:
        store = Flaky()
        writer = CursorWriter(store, log)
        writer.put({"key": "k", "cursor": 1})
        await writer.flush()
        writer.put({"key": "k", "cursor": 2})
        await writer.flush()
        return store.record

    assert run(scenario()) == {"key": "k", "cursor": 2}
    assert len(warnings) == 1 and "disk full" in warnings[0]


def test_the_trigger_saves_a_cursor_only_after_its_lines_were_logged_and_before_it_yields_its_event(
        tmp_path: Any) -> None:
    backend = StubBackend(root=tmp_path)
    backend.add_job(KIND, "job", ["InProgress"], lines=["epoch 1", "epoch 2"])
    backend.source.script_list(summary(KIND, "job", "Completed", "Completed"), server_time=time.time() + 1)
    trigger = trigger_for(backend)
    logged: list[str] = []
    capture(trigger, logged)
    store = SlowStore(logged)
    trigger.cursor_store = lambda _backend: store  # type: ignore[method-assign]

    async def scenario() -> Any:
        event = asyncio.ensure_future(first_event(trigger))
        await store.asked.wait()
        await asyncio.sleep(0.02)
        assert not event.done(), "the event came before the cursor was kept"
        store.release.set()
        return await event

    event = run(scenario())
    assert event.payload["job_status"] == "Completed"
    record, logged_then = store.saves[-1]
    assert record == {"key": "deferral-1", "cursor": 2}
    # both lines were in the log before the save
    assert [m for m in logged_then if m.startswith("[algo-1]")] == ["[algo-1] epoch 1", "[algo-1] epoch 2"]


def test_a_trigger_resumes_only_a_cursor_saved_under_its_own_deferral(tmp_path: Any) -> None:
    backend = StubBackend(root=tmp_path)
    backend.add_job(KIND, "job", ["InProgress"], lines=["a", "b", "c"])
    for key, expected in (("deferral-1", ["[algo-1] c"]), ("deferral-2", ["[algo-1] a", "[algo-1] b", "[algo-1] c"])):
        backend.log_cursor_store(KIND, "job").write({"key": "deferral-1", "cursor": 2})
        backend.source.script_list(summary(KIND, "job", "Completed", "Completed"), server_time=time.time() + 1)
        trigger = trigger_for(backend, cursor_key=key)
        logged: list[str] = []
        capture(trigger, logged)
        run(first_event(trigger))
        assert [m for m in logged if m.startswith("[algo-1]")] == expected, key


# -- Airflow 3: the XCom through the triggerer's supervisor ------------------------------------------------------
def test_the_xcom_store_round_trips_through_the_supervisor_channel(comms: FakeComms) -> None:
    store = XComCursorStore(TI)

    async def scenario() -> tuple[Any, Any]:
        before = await store.load()
        await store.save({"key": "k", "cursor": {"t": 1700000000000, "seen": ["e1"]}})
        return before, await store.load()

    assert run(scenario()) == (None, {"key": "k", "cursor": {"t": 1700000000000, "seen": ["e1"]}})
    assert [m.type for m in comms.sent] == ["GetXCom", "SetXCom", "GetXCom"]
    assert {(m.dag_id, m.run_id, m.task_id, m.map_index, m.key) for m in comms.sent} == {("d", "r", "t", -1, XCOM_KEY)}
    task_xcom_delete(TI, XCOM_KEY)  # what the operator does back from the trigger
    assert comms.sent[-1].type == "DeleteXCom" and comms.xcoms == {}


def test_a_trigger_moved_to_another_triggerer_with_another_home_prints_no_line_twice_and_loses_none(
        tmp_path: Any, comms: FakeComms) -> None:
    """Triggerer 1 prints the first lines and is stopped (its trigger cancelled); triggerer 2, whose file store is
    elsewhere (another home), rebuilds the trigger from the same kwargs and resumes from the XCom."""
    home1 = shared(StubBackend(root=tmp_path / "home1"))
    home1.add_job(KIND, "job", ["InProgress"], lines=["line 0", "line 1", "line 2"])
    first = trigger_for(home1, TI)
    shown: list[str] = []
    capture(first, shown)

    async def until_moved() -> None:
        task = asyncio.ensure_future(first_event(first))
        for _ in range(1000):  # until the three lines are printed
            if sum(m.startswith("[algo-1]") for m in shown) >= 3:
                break
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)  # the writer's save
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    home1.source.script_list(summary(KIND, "job", "InProgress", "Training"), server_time=time.time() + 1)
    for _ in range(1000):
        home1.source.script_list(server_time=time.time() + 1)
    run(until_moved())
    assert comms.xcoms[("d", "r", "t", -1, XCOM_KEY)] == {"key": "deferral-1", "cursor": 3}

    home2 = shared(StubBackend(root=tmp_path / "home2"))  # the same job, seen from the other machine
    home2.add_job(KIND, "job", ["InProgress"], lines=["line 0", "line 1", "line 2", "line 3", "line 4"])
    home2.source.script_list(summary(KIND, "job", "Completed", "Completed"), server_time=time.time() + 1)
    _path, kwargs = first.serialize()
    again = SmdistJobTrigger(**kwargs)
    again._resolved = home2
    again.task_instance = TI
    capture(again, shown)
    event = run(first_event(again))
    assert event.payload["job_status"] == "Completed"
    assert [m for m in shown if m.startswith("[algo-1]")] == [f"[algo-1] line {i}" for i in range(5)]
    assert not (tmp_path / "home1").exists() and not (tmp_path / "home2").exists()  # no file was the store


def test_a_cancelled_trigger_lets_its_last_save_finish_before_it_ends(tmp_path: Any) -> None:
    """The triggerer stops (or the trigger moves) while a cursor is being saved: the trigger's task ends only once
    the save is done, so the trigger rebuilt elsewhere resumes after the lines already printed."""
    backend = StubBackend(root=tmp_path)
    backend.add_job(KIND, "job", ["InProgress"], lines=["epoch 1"])
    for _ in range(1000):
        backend.source.script_list(server_time=time.time() + 1)
    trigger = trigger_for(backend)
    capture(trigger, [])
    store = SlowStore()
    trigger.cursor_store = lambda _backend: store  # type: ignore[method-assign]

    async def scenario() -> tuple[bool, dict[str, Any] | None]:
        task = asyncio.ensure_future(first_event(trigger))
        await store.asked.wait()
        task.cancel()
        await asyncio.sleep(0.01)
        ended_before_the_save = task.done()
        store.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return ended_before_the_save, store.record

    ended_early, kept = run(scenario())
    assert not ended_early and kept == {"key": "deferral-1", "cursor": 1}


# -- the record the operator seeds before it defers -----------------------------------------------------------
class RecordingTI(SimpleNamespace):
    """A task instance that keeps what the task pushes to its XCom."""

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed.append((key, value))


def deferring_operator(backend: StubBackend) -> tuple[Any, RecordingTI]:
    from airflow_smdist.operators.base import SmdistJobOperator

    op = SmdistJobOperator(task_id="train", deferrable=True, poll_interval=INTERVAL)
    op._backend = backend
    ti = RecordingTI(dag_id="d", run_id="r", task_id="train", map_index=-1, try_number=1, max_tries=0, pushed=[])
    op.own({"ti": ti, "run_id": "r"})
    return op, ti


def defer(op: Any) -> Any:
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.exceptions import TaskDeferred
    else:
        from airflow.exceptions import TaskDeferred
    with pytest.raises(TaskDeferred) as deferred:
        op.wait_or_defer("job")
    return deferred.value.trigger


def test_a_deferral_seeds_the_cursor_xcom_with_no_cursor_where_its_trigger_will_read_it(tmp_path: Any) -> None:
    """Airflow 3's XCom client logs an error-level "XCom not found" in the triggerer's log for each read of a missing
    XCom: the operator writes the record (its deferral's key, no cursor yet) before it defers."""
    backend = shared(StubBackend(root=tmp_path))
    backend.add_job(KIND, "job", ["InProgress"])
    op, ti = deferring_operator(backend)
    trigger = defer(op)
    assert trigger.cursor_key and ti.pushed == [(XCOM_KEY, {"key": trigger.cursor_key, "cursor": None})]
    # a backend whose trigger keeps its cursor in a file: no XCom is written
    local = StubBackend(root=tmp_path / "local")
    local.add_job(KIND, "job", ["InProgress"])
    op, ti = deferring_operator(local)
    defer(op)
    assert ti.pushed == []


def test_a_seeded_record_without_a_cursor_starts_the_trigger_where_its_kwargs_say(tmp_path: Any) -> None:
    backend = StubBackend(root=tmp_path)
    backend.add_job(KIND, "job", ["InProgress"], lines=["a", "b", "c"])
    backend.log_cursor_store(KIND, "job").write({"key": "deferral-1", "cursor": None})
    backend.source.script_list(summary(KIND, "job", "Completed", "Completed"), server_time=time.time() + 1)
    trigger = trigger_for(backend, log_cursor=2)
    logged: list[str] = []
    capture(trigger, logged)
    run(first_event(trigger))
    assert [m for m in logged if m.startswith("[algo-1]")] == ["[algo-1] c"]
