"""Deferrable waiting: coalesced polling (few calls for many jobs), same result as the non-deferred path."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from types import SimpleNamespace

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.triggers.base import CoalescedPoller, LocalStatusSource, SageMakerStatusSource
from airflow_smdist.triggers.training import SageMakerDistributedTrainingTrigger

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTRACT = os.path.join(REPO, "tests", "fixtures", "contract")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def request(name: str, sleep: float = 0.0) -> dict:
    from airflow_smdist.specs.training import training_request

    return training_request(job_name=name, role="arn:aws:iam::123456789012:role/R", output_path="s3://b/out",
                            image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                            instance_type="ml.m5.xlarge", instance_count=1, inputs={"train": "s3://b/train"})


def test_many_waiting_jobs_cost_one_list_per_interval_on_moto(moto_server):
    """40 jobs waited on at once: one List call per interval and one Describe per job per change."""
    from moto_server import set_training_job_status

    from airflow_smdist.backends.sagemaker import SageMakerBackend

    backend = SageMakerBackend(aws_conn_id="aws_default", region_name="us-east-1")
    names = [f"coalesce-{uuid.uuid4().hex[:8]}-{i}" for i in range(40)]
    for n in names:
        backend.submit("training", request(n))
        set_training_job_status(n, "InProgress")

    async def scenario():
        source = SageMakerStatusSource("aws_default", "us-east-1")
        poller = CoalescedPoller(source, "training", interval=0.2)
        queues = {n: poller.watch(n) for n in names}
        items = {n: await q.get() for n, q in queues.items()}
        errors = [i for i in items.values() if isinstance(i, Exception)]
        assert not errors, errors[0]
        first = {n: i["TrainingJobStatus"] for n, i in items.items()}
        assert set(first.values()) == {"InProgress"}
        calls_after_start = dict(source.calls)
        await asyncio.sleep(1.0)  # ~5 intervals with nothing changing
        quiet = {k: source.calls.get(k, 0) - calls_after_start.get(k, 0) for k in ("list", "describe")}
        for n in names[:10]:
            set_training_job_status(n, "Completed")
        done = {n: (await asyncio.wait_for(queues[n].get(), 10))["TrainingJobStatus"] for n in names[:10]}
        for n, q in queues.items():
            poller.unwatch(n, q)
        await asyncio.sleep(0.3)
        return first, quiet, done, dict(source.calls)

    first, quiet, done, calls = asyncio.run(scenario())
    assert set(done.values()) == {"Completed"}
    assert quiet["describe"] == 0 and 2 <= quiet["list"] <= 8  # one List per interval, no Describe
    assert calls["describe"] == 40 + 10  # first sight of each job, then only the ten that changed
    # one-Describe-per-job polling would have made 40 calls per interval in the quiet second alone
    assert quiet["list"] < 40 * quiet["list"] / 8


def test_trigger_yields_the_terminal_status_and_streams_logs(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text("1\n")
    op = SageMakerDistributedTrainingOperator(
        task_id="train", entry_point="dump_env.py", source_dir=CONTRACT, instance_count=2,
        image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", inputs={"train": f"file://{data}"},
        output_path=f"file://{tmp_path}/out", environment={"SMDIST_REPO": REPO}, poll_interval=0.3,
        deferrable=True, hyperparameters={"sleep": 1},
        metric_definitions=[{"Name": "accuracy", "Regex": r"accuracy: ([0-9.]+)"}])
    ctx = {"ti": SimpleNamespace(dag_id="d", task_id="train", map_index=-1), "run_id": uuid.uuid4().hex}
    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.exceptions import TaskDeferred
    else:
        from airflow.exceptions import TaskDeferred
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger
    assert isinstance(trigger, SageMakerDistributedTrainingTrigger)
    assert deferred.value.method_name == "execute_complete"
    # serialisable, and a rebuilt trigger behaves the same (the triggerer rebuilds it)
    path, kwargs = trigger.serialize()
    assert path == "airflow_smdist.triggers.training.SageMakerDistributedTrainingTrigger"
    rebuilt = SageMakerDistributedTrainingTrigger(**kwargs)
    import logging

    rebuilt._log = logging.getLogger("smdist.test.trigger")  # what the triggerer shows in the task log
    caplog.set_level("INFO", logger="smdist.test.trigger")

    async def first_event():
        async for event in rebuilt.run():
            return event

    event = asyncio.run(asyncio.wait_for(first_event(), 120))
    assert event.payload["status"] == "success" and event.payload["job_status"] == "Completed"
    assert "[algo-2] accuracy:" in caplog.text or "[algo-1] accuracy:" in caplog.text  # logs while deferred
    result = op.execute_complete(ctx, event.payload)
    assert result["status"] == "Completed" and result["final_metrics"]["accuracy"] in (0.5, 0.6)
    assert deferred.value.timeout.total_seconds() == 86400 + 3600  # the job's MaxRuntime plus a margin


def test_local_source_lists_only_changed_jobs(tmp_path):
    backend = LocalBackend(tmp_path / "jobs")
    source = LocalStatusSource(backend)
    assert asyncio.run(source.changed_since("training", None)) == {}
