"""JobLifecycle (and AsyncJobLifecycle) against an in-memory backend (tests/unit/stub_backend.py): what the
lifecycle's docstrings promise, asserted through the calls it makes. No sleep, no process, no network."""

from __future__ import annotations

import logging

import pytest
from stub_backend import StubBackend, access_denied, state, summary, throttling

from airflow_smdist import lifecycle as lifecycle_module
from airflow_smdist.backends.base import Backend, BackendError, JobNotFound
from airflow_smdist.lifecycle import (
    LIST_SETTLE_SECONDS,
    MAX_BACKOFF_SECONDS,
    OWNER_TAG,
    TRY_TAG,
    AsyncJobLifecycle,
    ForeignJob,
    JobFailed,
    JobLifecycle,
    Owner,
    Started,
    backoff_delay,
    call_with_backoff,
)

OWNER = Owner("dag/train/run-1/-1", try_number=1, first_try=1)
KIND = "training"


@pytest.fixture
def backoffs(monkeypatch):
    """The backoff pauses the lifecycle asks for (their attempt numbers), none of them slept."""
    attempts: list[int] = []

    def no_delay(attempt: int) -> float:
        attempts.append(attempt)
        return 0.0

    monkeypatch.setattr(lifecycle_module, "backoff_delay", no_delay)
    return attempts


def lifecycle(backend, owner=OWNER, **kw) -> JobLifecycle:
    return JobLifecycle(backend, KIND, log=logging.getLogger("test.lifecycle"), poll_interval=7.0, owner=owner,
                        **kw)


def request(name: str) -> dict:
    return {"TrainingJobName": name, "Tags": [{"Key": "team", "Value": "ml"}]}


def owned(owner: Owner = OWNER, try_number: int | None = None) -> list[dict[str, str]]:
    return [{"Key": OWNER_TAG, "Value": owner.identity}, {"Key": TRY_TAG, "Value": str(try_number or owner.try_number)}]


def test_the_stub_is_a_backend():
    assert isinstance(StubBackend(), Backend)  # runtime_checkable: every member of the protocol is there


# -- name, submit or reattach ------------------------------------------------------------------------------------
def test_a_new_job_is_created_once_and_a_retry_reattaches_to_it_without_a_second_create():
    backend = StubBackend()
    backend.plan(KIND, "job", ["InProgress"])
    built: list[str] = []

    def build(name):
        built.append(name)
        return request(name)

    first = lifecycle(backend, owner=OWNER)
    assert first.start("job", build) == Started("job", "create")
    assert built == ["job"] and backend.count("submit") == 1
    assert first.running == ["job"]  # what a kill stops
    # the owner's tags went on the job, the request's own kept
    assert backend.job(KIND, "job").tags == [{"Key": "team", "Value": "ml"}, *owned(OWNER)]

    retry = lifecycle(backend, owner=Owner(OWNER.identity, try_number=2, first_try=1))
    assert retry.start("job", build) == Started("job", "reattach-running")
    assert built == ["job"] and backend.count("submit") == 1  # no second Create, no second upload
    assert retry.running == ["job"]


def test_a_retry_after_the_job_completed_returns_it_and_does_not_run_it_again():
    backend = StubBackend()
    backend.add_job(KIND, "job", ["Completed"], tags=owned())
    retry = lifecycle(backend, owner=Owner(OWNER.identity, try_number=2, first_try=1))
    assert retry.start("job", lambda n: pytest.fail("no request is built for a completed job")) \
        == Started("job", "reattach-completed")
    assert backend.count("submit") == 0 and retry.running == []


def test_after_failed_and_stopped_tries_the_next_free_attempt_name_is_created():
    backend = StubBackend()
    backend.add_job(KIND, "job", ["Failed"], tags=owned())
    backend.add_job(KIND, "job-r2", ["Stopped"], tags=owned())
    lc = lifecycle(backend)
    assert lc.start("job", request) == Started("job-r3", "create")
    assert [c.name for c in backend.calls if c.op == "submit"] == ["job-r3"]


def test_a_cleared_task_runs_its_completed_job_again_unless_rerun_on_clear_is_false():
    backend = StubBackend()
    backend.add_job(KIND, "job", ["Completed"], tags=owned(try_number=1))
    cleared = Owner(OWNER.identity, try_number=3, first_try=3)  # the clear started try 3
    assert lifecycle(backend, owner=cleared).start("job", request) == Started("job-r2", "create")
    assert lifecycle(backend, owner=cleared, rerun_on_clear=False).choose("job") == Started("job", "reattach-completed")


@pytest.mark.parametrize("tags", [[{"Key": OWNER_TAG, "Value": "dag/other/run-1/-1"}], []],
                         ids=["another-task-instance", "no-owner-tag"])
def test_a_job_of_another_task_instance_is_refused_never_adopted_nor_stopped(tags):
    backend = StubBackend()
    backend.add_job(KIND, "job", ["InProgress"], tags=tags)
    lc = lifecycle(backend)
    with pytest.raises(ForeignJob, match="not attaching to it, nor stopping it"):
        lc.start("job", request)
    assert lc.running == []
    lc.stop()
    assert backend.count("submit") == 0 and backend.count("stop") == 0


def test_a_try_that_loses_the_create_race_to_another_try_of_the_same_task_instance_joins_its_job():
    backend = StubBackend()

    def build(name):  # the zombie try's Create lands between this try's Describe and its Create
        backend.add_job(KIND, name, ["InProgress"], tags=owned(try_number=1))
        return request(name)

    lc = lifecycle(backend, owner=Owner(OWNER.identity, try_number=2, first_try=1))
    assert lc.start("job", build) == Started("job", "reattach-running")
    assert backend.count("submit") == 1 and lc.running == ["job"]


def test_without_an_owner_a_name_conflict_is_the_creates_own_error():
    backend = StubBackend()
    lc = JobLifecycle(backend, KIND, owner=None)

    def build(name):
        backend.add_job(KIND, name, ["InProgress"])
        return request(name)

    with pytest.raises(BackendError, match="must be unique") as err:
        lc.start("job", build)
    assert err.value.code == "ValidationException"


# -- waiting, result or error ------------------------------------------------------------------------------------
def test_a_wait_polls_until_the_job_completes_printing_each_line_once(caplog):
    backend = StubBackend()
    backend.plan(KIND, "job", [state("InProgress", "Starting"),
                               state("InProgress", "Training", _lines=["epoch 1", "epoch 2"]),
                               state("Completed", "Completed", _lines=["done"],
                                     FinalMetricDataList=[{"MetricName": "loss", "Value": 0.25}])])
    lc = lifecycle(backend)
    lc.start("job", request)
    with caplog.at_level(logging.INFO, logger="test.lifecycle"):
        description = lc.wait("job")
    assert lc.check(description)["TrainingJobStatus"] == "Completed"
    assert backend.count("describe", "job") == 1 + 3  # choose's, then one per round
    assert backend.pauses == [7.0, 7.0]  # the one polling pause between rounds, poll_interval long
    printed = [r.getMessage() for r in caplog.records]
    assert [m for m in printed if m.startswith("[algo-1]")] == ["[algo-1] epoch 1", "[algo-1] epoch 2",
                                                                 "[algo-1] done"]
    assert "training job job: InProgress / Training" in printed  # status changes, each once
    assert "training job job metrics: loss=0.25" in printed
    assert lc.running == []


def test_a_job_that_ends_failed_raises_job_failed_naming_its_failure_reason_and_last_lines():
    backend = StubBackend()
    backend.plan(KIND, "job", ["InProgress",
                               state("Failed", "Failed", _lines=["Traceback (most recent call last):",
                                                                 "ValueError: bad learning rate"],
                                     FailureReason="AlgorithmError: ExecuteUserScriptError")])
    lc = lifecycle(backend)
    lc.start("job", request)
    with pytest.raises(JobFailed) as err:
        lc.check(lc.wait("job"))
    assert (err.value.name, err.value.status) == ("job", "Failed")
    assert err.value.reason == "AlgorithmError: ExecuteUserScriptError"
    assert str(err.value).startswith("training job job ended Failed: AlgorithmError: ExecuteUserScriptError")
    assert "ValueError: bad learning rate" in str(err.value)  # the last log lines travel with the error


def test_a_stopped_job_fails_the_task_with_its_secondary_status_when_it_has_no_failure_reason():
    backend = StubBackend()
    backend.plan(KIND, "job", ["InProgress", state("Stopped", "MaxRuntimeExceeded")])
    lc = lifecycle(backend)
    lc.start("job", request)
    with pytest.raises(JobFailed, match="ended Stopped: MaxRuntimeExceeded") as err:
        lc.check(lc.wait("job"))
    assert err.value.status == "Stopped"


def test_a_processing_jobs_exit_message_is_part_of_its_failure_reason():
    backend = StubBackend()
    backend.add_job("processing", "prep", [state("Failed", FailureReason="AlgorithmError: exit 1",
                                                 ExitMessage="No module named 'requests'")])
    lc = JobLifecycle(backend, "processing")
    with pytest.raises(JobFailed) as err:
        lc.check(lc.describe("prep"))
    assert err.value.reason == "AlgorithmError: exit 1 (ExitMessage: No module named 'requests')"


def test_a_job_gone_while_deferred_fails_with_the_triggers_reason():
    reason = str(JobNotFound(KIND, "job"))  # what the trigger's event carries (AsyncJobLifecycle.error)
    error = lifecycle(StubBackend()).gone("job", reason)
    assert error.status is None
    assert str(error) == "training job job is gone: (ValidationException): training job 'job' does not exist"


def test_a_backend_errors_text_keeps_its_code_and_operation_without_stray_spaces():
    assert str(BackendError("Rate exceeded", code="ThrottlingException", operation="ListTrainingJobs")) \
        == "ListTrainingJobs failed (ThrottlingException): Rate exceeded"
    assert str(BackendError("gone", code="ValidationException")) == "(ValidationException): gone"
    assert str(BackendError("boom", operation="StopTrainingJob")) == "StopTrainingJob failed: boom"
    assert str(BackendError("plain")) == "plain"


def test_throttling_during_the_wait_backs_off_and_never_fails_the_task(backoffs):
    backend = StubBackend()
    backend.plan(KIND, "job", ["InProgress", "InProgress", "Completed"])
    lc = lifecycle(backend)
    lc.start("job", request)
    backend.fail("describe", throttling(), throttling(), throttling())  # a storm on the wait's first Describe
    backend.fail("log_events", throttling("FilterLogEvents"))
    assert lc.check(lc.wait("job"))["TrainingJobStatus"] == "Completed"
    assert backoffs == [1, 2, 3, 1]  # growing backoff per storm, reset by a call that goes through
    assert lc.calls["throttled"] == 4
    assert backend.count("describe", "job") == 1 + 3 + 3  # choose's, the throttled three, one per round


def test_another_backend_error_during_the_wait_is_raised_at_once(backoffs):
    backend = StubBackend()
    lc = lifecycle(backend)
    lc.start("job", request)
    backend.fail("describe", access_denied("DescribeTrainingJob"))
    with pytest.raises(BackendError, match="AccessDeniedException"):
        lc.wait("job")
    assert backoffs == [] and backend.count("describe") == 2


def test_a_log_read_that_fails_is_a_warning_the_status_decides(caplog):
    backend = StubBackend()
    backend.plan(KIND, "job", ["InProgress", "Completed"])
    lc = lifecycle(backend)
    lc.start("job", request)
    backend.fail("log_events", BackendError("no log group", code="ResourceNotFoundException"))
    with caplog.at_level(logging.WARNING, logger="test.lifecycle"):
        assert lc.check(lc.wait("job"))["TrainingJobStatus"] == "Completed"
    assert any("could not read the logs of training job job" in r.getMessage() for r in caplog.records)


def test_call_with_backoff_gives_up_when_the_next_pause_would_pass_its_deadline(monkeypatch):
    monkeypatch.setattr(lifecycle_module, "backoff_delay", lambda attempt: 5.0)
    slept: list[float] = []
    calls = {"n": 0}

    def throttled():
        calls["n"] += 1
        raise throttling()

    with pytest.raises(BackendError, match="ThrottlingException"):
        call_with_backoff(throttled, give_up_after=1.0, sleep=slept.append)
    assert calls["n"] == 1 and slept == []


def test_backoff_is_full_jitter_exponential_and_capped(monkeypatch):
    monkeypatch.setattr(lifecycle_module.random, "uniform", lambda low, high: (low, high))
    assert [backoff_delay(a) for a in (1, 2, 3)] == [(0, 1.0), (0, 2.0), (0, 4.0)]
    assert backoff_delay(20) == (0, MAX_BACKOFF_SECONDS)


def test_wait_all_watches_a_replacement_that_on_end_returns():
    backend = StubBackend()
    backend.plan(KIND, "shard-0", ["InProgress", "Failed"])
    backend.plan(KIND, "shard-1", ["InProgress", "InProgress", "Completed"])
    backend.plan(KIND, "shard-0-r2", ["Completed"])
    lc = lifecycle(backend)
    for name in ("shard-0", "shard-1"):
        lc.submit(request(name))
    ended: list[tuple[str, str]] = []

    def on_end(name, description):
        ended.append((name, description["TrainingJobStatus"]))
        if description["TrainingJobStatus"] == "Failed":
            return lc.submit(request(name + "-r2"))
        return None

    lc.wait_all(["shard-0", "shard-1"], on_end)
    assert sorted(ended) == [("shard-0", "Failed"), ("shard-0-r2", "Completed"), ("shard-1", "Completed")]
    assert lc.running == []


# -- stopping on kill -------------------------------------------------------------------------------------------
def test_stop_on_kill_stops_each_running_job_once_and_waits_until_it_has_stopped(caplog):
    backend = StubBackend()
    backend.plan(KIND, "job", ["InProgress"])
    lc = lifecycle(backend)
    lc.start("job", request)
    with caplog.at_level(logging.INFO, logger="test.lifecycle"):
        lc.stop()
    assert backend.count("stop", "job") == 1
    assert backend.job(KIND, "job").status == "Stopped"
    assert backend.pauses == [2.0]  # Stopping, then Stopped: one pause of at most 2 s between
    assert "training job job is Stopped." in [r.getMessage() for r in caplog.records]
    assert lc.running == []


def test_a_throttled_stop_is_retried_until_it_goes_through(backoffs):
    backend = StubBackend()
    backend.plan(KIND, "job", ["InProgress"])
    lc = lifecycle(backend)
    lc.start("job", request)
    backend.fail("stop", throttling("StopTrainingJob"))
    lc.stop()
    assert backend.count("stop") == 2 and backoffs == [1]
    assert backend.job(KIND, "job").status == "Stopped"


def test_stopping_a_job_that_no_longer_exists_waits_for_nothing():
    backend = StubBackend()
    lc = lifecycle(backend)
    lc.track("gone")
    lc.stop()
    assert [c.op for c in backend.calls] == ["stop"]


def test_a_job_that_does_not_stop_is_waited_for_at_most_stop_timeout(caplog):
    backend = StubBackend()
    backend.add_job(KIND, "stubborn", ["InProgress"], tags=owned(), stops=False)
    lc = lifecycle(backend, stop_timeout=0.02)
    lc.track("stubborn")
    with caplog.at_level(logging.WARNING, logger="test.lifecycle"):
        lc.stop()
    assert backend.count("stop") == 1
    assert any("did not stop within" in r.getMessage() for r in caplog.records)


# -- coalesced rounds (a backend whose capabilities say coalesced_waits) ------------------------------------------
def test_waiting_for_several_jobs_makes_one_list_a_round_and_describes_only_the_ended(backoffs):
    backend = StubBackend(coalesced_waits=True)
    names = ["shard-0", "shard-1", "shard-2"]
    lc = lifecycle(backend)
    for name in names:
        backend.plan(KIND, name, [state("Completed", "Completed", FailureReason=None)])
        lc.submit(request(name))
    source = backend.source
    source.script_list(*(summary(KIND, n, "InProgress", "Training") for n in names), server_time=1000.0)
    source.script_list_error(throttling("ListTrainingJobs"))  # retried inside the round (the source's backoff)
    source.script_list(summary(KIND, "shard-1", "Completed", "Completed"), server_time=1010.0)
    source.script_list(summary(KIND, "shard-0", "Completed", "Completed"),
                       summary(KIND, "shard-2", "Completed", "Completed"), server_time=1020.0)
    backend.add_lines(KIND, "shard-0", "hello from shard 0")
    ended: list[str] = []
    lc.wait_all(names, lambda name, description: ended.append(name))
    assert sorted(ended) == names
    assert len(source.list_calls) == 4  # three rounds (one retried after throttling) for the three jobs
    assert source.list_calls[2:] == [1000.0 - LIST_SETTLE_SECONDS, 1010.0 - LIST_SETTLE_SECONDS]
    assert backend.count("describe") == 3  # once per job, when its summary said it ended
    assert backend.count("log_events") == 0 and len(source.log_reads) >= 3  # one log read a round for all
    assert lc.calls["list"] == 4 and lc.calls["throttled"] == 1  # the source's calls count as the wait's
    assert source.acquired == source.closed == 1


def test_a_list_refused_for_another_reason_falls_back_to_describing_each_job():
    backend = StubBackend(coalesced_waits=True)
    lc = lifecycle(backend)
    for name in ("a", "b"):
        backend.plan(KIND, name, ["InProgress", "Completed"])
        lc.submit(request(name))
    backend.source.script_list_error(access_denied())
    ended: list[str] = []
    lc.wait_all(["a", "b"], lambda name, description: ended.append(name))
    assert sorted(ended) == ["a", "b"]
    assert len(backend.source.list_calls) == 1  # never listed again
    assert backend.count("describe") == 4 and backend.count("log_events") > 0


# -- the asynchronous half ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("status, event", [("Completed", "success"), ("Failed", "failed"), ("Stopped", "stopped")])
def test_the_async_lifecycle_turns_a_terminal_status_into_the_event(status, event):
    alc = AsyncJobLifecycle(KIND, "job", log=logging.getLogger("test.trigger"))
    assert alc.observe({"TrainingJobStatus": "InProgress", "SecondaryStatus": "Training"}) is None
    assert alc.observe({"TrainingJobStatus": status, "FailureReason": "why"}) == {
        "status": event, "job_name": "job", "job_status": status, "failure_reason": "why"}


def test_the_async_lifecycle_logs_each_status_change_once(caplog):
    alc = AsyncJobLifecycle(KIND, "job", log=logging.getLogger("test.trigger"))
    with caplog.at_level(logging.INFO, logger="test.trigger"):
        for secondary in ("Starting", "Starting", "Training", "Training"):
            alc.observe({"TrainingJobStatus": "InProgress", "SecondaryStatus": secondary})
    assert [r.getMessage() for r in caplog.records] == ["training job job: InProgress / Starting",
                                                        "training job job: InProgress / Training"]


def test_the_async_lifecycle_ends_the_wait_for_a_vanished_job_and_retries_other_errors(caplog):
    alc = AsyncJobLifecycle(KIND, "job", log=logging.getLogger("test.trigger"))
    assert alc.error(JobNotFound(KIND, "job")) == {
        "status": "failed", "job_name": "job", "job_status": None,
        "failure_reason": "(ValidationException): training job 'job' does not exist"}
    with caplog.at_level(logging.WARNING, logger="test.trigger"):
        assert alc.error(throttling("ListTrainingJobs")) is None
    assert "retrying" in caplog.records[-1].getMessage()
