"""The triggers' coalesced pollers (triggers/base.py) and SmdistJobTrigger against the in-memory backend's
status source (tests/unit/stub_backend.py). Each List round is scripted: a poller's next round waits for its
script (``until_waiting``), so every count below is exact. Intervals are a millisecond; nothing else waits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

import pytest
from stub_backend import StubBackend, StubStatusSource, access_denied, state, summary, throttling

from airflow_smdist import lifecycle as lifecycle_module
from airflow_smdist.backends.base import JobNotFound
from airflow_smdist.lifecycle import LIST_OVERLAP_SECONDS, LIST_SETTLE_SECONDS, AsyncJobLifecycle
from airflow_smdist.triggers.base import CoalescedLogPoller, CoalescedPoller, SmdistJobTrigger

KIND = "training"
INTERVAL = 0.001


@pytest.fixture
def backoffs(monkeypatch):
    """The backoff pauses asked for (attempt numbers); none is slept."""
    attempts: list[int] = []
    monkeypatch.setattr(lifecycle_module, "backoff_delay", lambda attempt: attempts.append(attempt) or 0.0)
    return attempts


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def ended(poller) -> None:
    """Stop a poller's task (it waits for a List answer that will not come) and let it close its source."""
    if poller.task is not None:
        poller.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller.task


def drain(queue: asyncio.Queue) -> list:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def statuses(queue: asyncio.Queue) -> list:
    return [item if isinstance(item, Exception) else (item["TrainingJobStatus"], item.get("SecondaryStatus"))
            for item in drain(queue)]


# -- the status poller ------------------------------------------------------------------------------------------
def test_one_list_a_round_for_every_watched_job_and_only_changed_jobs_are_handed_over():
    source = StubBackend().source
    names = [f"job-{i}" for i in range(20)]
    seen_at = time.time()
    source.script_list(summary(KIND, "job-3", "InProgress", "Training"),  # secondary status moved on
                       summary(KIND, "job-7", "Completed", "Completed"),
                       summary(KIND, "not-watched", "Failed"), server_time=seen_at + 10)
    source.script_list(server_time=seen_at + 20)  # a quiet round
    source.script_list(summary(KIND, "job-3", "InProgress", "Training"),  # unchanged: not handed again
                       summary(KIND, "job-5", "Failed", "Failed"), server_time=seen_at + 30)

    async def scenario():
        poller = CoalescedPoller(source, KIND, INTERVAL)
        queues = {n: poller.watch(n, "InProgress", seen_at) for n in names}
        await source.until_waiting()
        await ended(poller)
        return {n: statuses(q) for n, q in queues.items()}

    handed = run(scenario())
    assert len(source.list_calls) == 3  # one List a round, whatever the number of jobs
    assert source.describes == []  # every trigger said what status it started from
    assert handed.pop("job-3") == [("InProgress", "Training")]
    assert handed.pop("job-7") == [("Completed", "Completed")]
    assert handed.pop("job-5") == [("Failed", "Failed")]
    assert all(items == [] for items in handed.values())  # no call into the triggers of quiet jobs
    # the first List looks back from the triggers' status (less the skew margin), later ones from the previous
    # List on the service's clock
    assert source.list_calls == [seen_at - LIST_OVERLAP_SECONDS, seen_at + 10 - LIST_SETTLE_SECONDS,
                                 seen_at + 20 - LIST_SETTLE_SECONDS]
    assert source.acquired == source.closed == 1


def test_a_job_watched_without_a_status_is_described_once_and_a_terminal_one_ends_its_wait_at_once():
    backend = StubBackend()
    backend.add_job(KIND, "done", [state("Completed", "Completed")])
    source = backend.source
    source.script_list(server_time=1000.0)

    async def scenario():
        poller = CoalescedPoller(source, KIND, INTERVAL)
        queue = poller.watch("done")  # the trigger knew nothing of the job
        first = await queue.get()
        await source.until_waiting()
        await ended(poller)
        return first, drain(queue)

    first, rest = run(scenario())
    assert source.describes == ["done"]  # first sight: one Describe, then the job is followed by List
    assert rest == []
    alc = AsyncJobLifecycle(KIND, "done", log=logging.getLogger("test.trigger"))
    assert alc.observe(first)["status"] == "success"


def test_a_job_that_does_not_exist_ends_its_trigger_with_a_failed_event():
    source = StubBackend().source

    async def scenario():
        poller = CoalescedPoller(source, KIND, INTERVAL)
        queue = poller.watch("missing")
        item = await queue.get()
        poller.unwatch("missing", queue)  # what the trigger does once it has its event
        await asyncio.wait_for(poller.task, 1)  # nothing watched: the poller ends, and closes its source
        return item

    item = run(scenario())
    assert isinstance(item, JobNotFound)
    alc = AsyncJobLifecycle(KIND, "missing", log=logging.getLogger("test.trigger"))
    assert alc.error(item)["status"] == "failed"
    assert source.list_calls == [] and source.acquired == source.closed == 1


def test_a_throttled_list_backs_off_inside_the_round_and_no_trigger_sees_an_error(backoffs):
    source = StubBackend().source  # retries throttling inside, as the SageMaker source does
    seen_at = time.time()
    source.script_list_error(throttling("ListTrainingJobs"), throttling("ListTrainingJobs"))
    source.script_list(summary(KIND, "a", "Completed", "Completed"), server_time=seen_at + 5)

    async def scenario():
        poller = CoalescedPoller(source, KIND, INTERVAL)
        queues = {n: poller.watch(n, "InProgress", seen_at) for n in ("a", "b")}
        await source.until_waiting()
        await ended(poller)
        return {n: statuses(q) for n, q in queues.items()}

    handed = run(scenario())
    assert handed == {"a": [("Completed", "Completed")], "b": []}
    assert backoffs == [1, 2] and source.calls["throttled"] == 2
    assert source.list_calls[:3] == [seen_at - LIST_OVERLAP_SECONDS] * 3  # the same List, retried


def test_a_failed_list_round_reaches_the_triggers_as_a_retryable_error_and_the_next_round_misses_nothing():
    source = StubStatusSource(StubBackend(), backoff=False)  # a source without a backoff of its own
    seen_at = time.time()
    source.script_list(server_time=seen_at + 10)
    source.script_list_error(throttling("ListTrainingJobs"))
    source.script_list(summary(KIND, "a", "Failed", "Failed"), server_time=seen_at + 30)

    async def scenario():
        poller = CoalescedPoller(source, KIND, INTERVAL)
        queue = poller.watch("a", "InProgress", seen_at)
        await source.until_waiting()
        await ended(poller)
        return drain(queue)

    error, last = run(scenario())
    assert AsyncJobLifecycle(KIND, "a", log=logging.getLogger("test.trigger")).error(error) is None  # keeps waiting
    assert last["TrainingJobStatus"] == "Failed"
    # the round after the failed one asks for the changes since the same time: a change made meanwhile is seen
    assert source.list_calls[1] == source.list_calls[2] == seen_at + 10 - LIST_SETTLE_SECONDS


def test_unwatch_stops_a_triggers_handoffs_and_keeps_the_other_triggers_of_the_job():
    source = StubBackend().source
    seen_at = time.time()
    source.script_list(summary(KIND, "a", "InProgress", "Training"),
                       summary(KIND, "b", "InProgress", "Training"), server_time=seen_at + 1)

    async def scenario():
        poller = CoalescedPoller(source, KIND, INTERVAL)
        a = poller.watch("a", "InProgress", seen_at)
        b_first = poller.watch("b", "InProgress", seen_at)
        b_second = poller.watch("b", "InProgress", seen_at)  # a second trigger waiting for the same job
        poller.unwatch("a", a)
        poller.unwatch("b", b_first)
        await source.until_waiting()
        poller.unwatch("b", b_second)
        await ended(poller)
        return statuses(a), statuses(b_first), statuses(b_second), poller.watchers

    a, b_first, b_second, watchers = run(scenario())
    assert (a, b_first) == ([], [])
    assert b_second == [("InProgress", "Training")]
    assert watchers == {}


def test_the_poller_ends_when_its_last_job_is_unwatched_and_a_new_watch_starts_it_again():
    source = StubBackend().source
    source.script_list(server_time=1.0)
    source.script_list(server_time=2.0)

    async def scenario():
        poller = CoalescedPoller(source, KIND, INTERVAL)
        queue = poller.watch("a", "InProgress", time.time())
        await source.until_waiting()
        source.script_list(server_time=1.5)  # the waiting round's answer
        poller.unwatch("a", queue)
        await asyncio.wait_for(poller.task, 1)
        first = (source.acquired, source.closed, poller.task)
        queue = poller.watch("b", "InProgress", time.time())
        await source.until_waiting()
        await ended(poller)
        return first

    first = run(scenario())
    assert first == (1, 1, None)
    assert source.acquired == source.closed == 2


# -- the log poller ---------------------------------------------------------------------------------------------
def sink_of(received: dict, name: str):
    return lambda events, cursor: received.setdefault(name, []).append(([e.message for e in events], cursor))


def test_the_log_poller_hands_each_job_only_its_new_lines_and_keeps_a_cursor_per_job():
    backend = StubBackend()
    for name, lines in {"a": ["a0", "a1"], "b": ["b0", "b1", "b2"], "c": []}.items():
        backend.add_job(KIND, name, ["InProgress"], lines=lines)
    source = backend.source
    received: dict[str, list] = {}

    async def scenario():
        poller = CoalescedLogPoller(source, KIND, 600)  # no timer round: the test asks for each round
        poller.watch("a", None, sink_of(received, "a"))
        poller.watch("b", 2, sink_of(received, "b"))  # resumes after the two lines it printed before
        poller.watch("c", None, sink_of(received, "c"))
        await poller.flush("a")
        backend.add_lines(KIND, "a", "a2")
        await poller.flush("a")
        poller.unwatch("b")
        backend.add_lines(KIND, "b", "b3")
        await poller.flush("a")
        cursors = {n: w["cursor"] for n, w in poller.watchers.items()}
        for name in ("a", "c"):
            poller.unwatch(name)
        await asyncio.wait_for(poller.task, 1)
        return cursors

    cursors = run(scenario())
    assert received == {"a": [(["a0", "a1"], 2), (["a2"], 3)], "b": [(["b2"], 3)]}  # c is quiet: never called
    assert source.log_reads == [{"a": None, "b": 2, "c": None}, {"a": 2, "b": 3, "c": 0}, {"a": 3, "c": 0}]
    assert cursors == {"a": 3, "c": None}  # a quiet job's sink and cursor are left alone
    assert source.acquired == source.closed == 1


def test_one_triggers_failing_sink_does_not_stop_the_others_lines_and_a_failed_read_is_retried():
    backend = StubBackend()
    for name in ("a", "b"):
        backend.add_job(KIND, name, ["InProgress"], lines=[f"{name}0"])
    source = backend.source
    received: dict[str, list] = {}

    def broken(events, cursor):
        raise RuntimeError("a trigger's logging broke")

    async def scenario():
        poller = CoalescedLogPoller(source, KIND, 600)
        poller.watch("a", None, broken)
        poller.watch("b", None, sink_of(received, "b"))
        source.fail("logs", access_denied("FilterLogEvents"))
        await poller.flush("b")  # this round's read fails: best effort, the wait goes on
        await poller.flush("b")
        for name in ("a", "b"):
            poller.unwatch(name)
        await asyncio.wait_for(poller.task, 1)

    run(scenario())
    assert received == {"b": [(["b0"], 1)]}
    assert len(source.log_reads) == 2


def test_no_log_round_while_every_job_is_provisioning_on_a_backend_that_writes_no_line_before_its_containers():
    backend = StubBackend()
    backend.add_job(KIND, "a", ["InProgress"], lines=["a0"])
    source = backend.source
    source.silent_before_containers = True  # as CloudWatch: nothing to read before the containers start
    seen_at = time.time()
    source.script_list(summary(KIND, "a", "InProgress", "Downloading"), server_time=seen_at + 1)
    received: dict[str, list] = {}

    async def scenario():
        status = CoalescedPoller(source, KIND, INTERVAL)
        logs = CoalescedLogPoller(source, KIND, 600)
        logs.follow(status)
        queue = status.watch("a", "InProgress", seen_at)
        logs.watch("a", None, sink_of(received, "a"))
        await source.until_waiting()
        await logs.flush("a")
        reads_while_downloading = len(source.log_reads)
        source.script_list(summary(KIND, "a", "InProgress", "Training"), server_time=seen_at + 2)
        await source.until_waiting()
        await logs.flush("a")  # (the status poller's round has woken it already)
        logs.unwatch("a")
        status.unwatch("a", queue)
        await ended(status)
        await ended(logs)
        return reads_while_downloading

    assert run(scenario()) == 0
    assert received == {"a": [(["a0"], 1)]}


# -- the trigger ------------------------------------------------------------------------------------------------
def trigger_for(backend: StubBackend, **kw) -> SmdistJobTrigger:
    trigger = SmdistJobTrigger(job_name="job", backend="stub", poll_interval=INTERVAL, kind=KIND, **kw)
    trigger._resolved = backend  # what SmdistHook.get_backend would resolve
    return trigger


async def first_event(trigger: SmdistJobTrigger):
    events = trigger.run()
    try:
        return await events.__anext__()
    finally:
        await events.aclose()


def test_the_trigger_waits_through_a_throttling_storm_prints_the_jobs_lines_and_yields_one_event(
        tmp_path, backoffs, capsys):
    backend = StubBackend(root=tmp_path)
    backend.add_job(KIND, "job", ["InProgress"], lines=["epoch 1"])
    source = backend.source
    seen_at = time.time()
    source.script_list(summary(KIND, "job", "InProgress", "Training"), server_time=seen_at + 1)
    source.script_list_error(*[throttling("ListTrainingJobs")] * 3)
    source.script_list(summary(KIND, "job", "Completed", "Completed"), server_time=seen_at + 2)
    trigger = trigger_for(backend, job_status="InProgress", as_of=seen_at, cursor_key="deferral-1")
    event = run(first_event(trigger))
    assert event.payload == {"status": "success", "job_name": "job", "job_status": "Completed",
                             "failure_reason": None}
    assert backoffs == [1, 2, 3] and source.describes == []
    assert capsys.readouterr().out.count("[algo-1] epoch 1") == 1  # the trigger's log (Airflow's structlog)
    # the cursor is kept where the backend says, for a trigger rebuilt after a triggerer restart
    assert json.loads(backend.log_cursor_store(KIND, "job").path.read_text()) == {"key": "deferral-1", "cursor": 1}


def test_a_trigger_given_no_status_describes_its_job_and_ends_at_once_when_it_already_ended(tmp_path):
    backend = StubBackend(root=tmp_path)
    backend.add_job(KIND, "job", [state("Failed", "Failed", FailureReason="OutOfMemory")])
    backend.source.script_list(server_time=time.time())
    event = run(first_event(trigger_for(backend, print_logs=False)))
    assert event.payload == {"status": "failed", "job_name": "job", "job_status": "Failed",
                             "failure_reason": "OutOfMemory"}
    assert backend.source.describes == ["job"]


def test_a_trigger_started_from_a_terminal_status_ends_at_once_without_waiting_for_a_list():
    """A trigger made with the status its job ended in (the job ended long before: no List will report a
    change of it again) yields its event at once, from that status."""
    backend = StubBackend()
    backend.add_job(KIND, "job", ["Completed"])
    backend.source.script_list(server_time=time.time())  # the job changed long before: List reports nothing
    trigger = trigger_for(backend, job_status="Completed", as_of=time.time(), print_logs=False)
    event = asyncio.run(asyncio.wait_for(first_event(trigger), 1))
    assert event.payload == {"status": "success", "job_name": "job", "job_status": "Completed",
                             "failure_reason": None}
    assert backend.source.describes == []
