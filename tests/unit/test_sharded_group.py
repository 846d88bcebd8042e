"""fan_out="jobs" as a DAG shape: the TaskGroup the factory makes (plan -> mapped shards -> merge)."""

from __future__ import annotations

import pendulum
import pytest

from airflow_smdist.operators.transform import sharded_batch_inference
from airflow_smdist.specs.errors import SpecError

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2
    from airflow import DAG


def test_plan_then_one_mapped_task_per_shard_then_merge():
    with DAG("g", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        group = sharded_batch_inference("score", input_uri="s3://b/in/", output_uri="s3://b/out/", shards=4,
                                        shard_retries=3, model_name="m", instance_count=2, content_type="text/csv",
                                        split_type="Line", max_payload_mb=1, deferrable=True)
    assert sorted(dag.task_ids) == ["score.merge", "score.plan", "score.shard"]
    plan, shard, merge = (dag.get_task(f"score.{t}") for t in ("plan", "shard", "merge"))
    assert shard.upstream_task_ids == {"score.plan"} and merge.upstream_task_ids == {"score.shard"}
    assert type(shard).__name__ == "MappedOperator"  # Airflow runs, retries and defers each shard
    assert shard.partial_kwargs["fan_out"] == "jobs" and shard.partial_kwargs["retries"] == 3
    assert shard.partial_kwargs["deferrable"] is True and shard.partial_kwargs["model_name"] == "m"
    assert plan.shards == 4 and plan.content_type == "text/csv" and plan.max_payload_mb == 1
    assert merge.trigger_rule == "all_done"  # a failed shard's objects are still named by the merge
    assert plan.model == merge.model == {"model_name": "m"}  # both know which model must have made the outputs
    assert group.get_child_by_label("merge") is merge


def test_arguments_the_group_sets_itself_are_refused():
    with pytest.raises(SpecError, match="fan_out: is set by sharded_batch_inference"):
        sharded_batch_inference("score", input_uri="s3://b/in/", output_uri="s3://b/out/", fan_out="transform")
