"""The spot rehearsal's settings and the insight it feeds (pure functions; the real jobs are in
tests/integration/test_spot_rehearsal.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_smdist import insight
from airflow_smdist.backends.local.job import spot


def test_settings_parse_into_seconds():
    assert spot.parse("3,3") == [3.0, 3.0]
    assert spot.parse(" 1.5 , 2 ") == [1.5, 2.0]
    assert spot.parse("") == spot.parse(None) == spot.parse("off") == []
    drawn = spot.parse("random:7:3")
    assert drawn == spot.parse("random:7:3") and len(drawn) == 3 and all(1 <= s <= 10 for s in drawn)
    assert all(1 <= s <= 4 for s in spot.parse("random:1:5:4"))
    for bad in ("3;3", "random:x:2", "random:1", "-1", ",".join(["1"] * 31)):
        with pytest.raises(ValueError):
            spot.parse(bad)


def test_checkpoint_items_key_a_try_to_its_nth_checkpoint():
    assert spot.parse("checkpoint, Checkpoint:2,3") == ["checkpoint:1", "checkpoint:2", 3.0]
    events = spot.schedule({"spot": spot.parse("checkpoint,checkpoint:3"), "failures": [2.0]})
    assert events == [spot.Event("spot", checkpoints=1), spot.Event("spot", checkpoints=3),
                      spot.Event("failure", after=2.0)]
    assert [e.describe() for e in events] == ["after the try's first checkpoint", "after checkpoint 3 of the try",
                                              "2 s into the try's training"]
    for bad in ("checkpoint:0", "checkpoint:x", "checkpoints", "checkpoint:1:2"):
        with pytest.raises(ValueError, match="checkpoint"):
            spot.parse(bad)


def test_the_param_accepts_what_the_setting_parses():
    import re

    from airflow_smdist.params import spot_interruptions_param

    pattern = spot_interruptions_param().schema["pattern"]
    for good in ("", "3,3", "checkpoint,checkpoint", "checkpoint:2, 4.5", "random:7:3:5"):
        assert re.search(pattern, good), good
    for bad in ("checkpoint:0", "3;3", "checkpoints"):
        assert not re.search(pattern, bad), bad


def test_only_spot_requests_are_interrupted(monkeypatch):
    monkeypatch.setenv(spot.SPOT_ENV, "2")
    monkeypatch.delenv(spot.FAILURES_ENV, raising=False)
    assert spot.rehearsal_state({"EnableManagedSpotTraining": True}, None, None) == {"spot": [2.0],
                                                                                      "spot_setting": "2"}
    assert spot.rehearsal_state({}, None, None) == {"spot_ignored": "2"}
    assert spot.rehearsal_state({"EnableManagedSpotTraining": True}, "4,4", "1")["spot"] == [4.0, 4.0]
    assert [e.kind for e in spot.schedule(spot.rehearsal_state({"EnableManagedSpotTraining": True}, "4", "1"))] \
        == ["spot", "failure"]


def test_unbilled_seconds_are_the_waits_after_the_start():
    transitions = [{"status": "Starting", "start": 0, "end": 5}, {"status": "Training", "start": 5, "end": 10},
                   {"status": "Interrupted", "start": 10, "end": 13}, {"status": "Starting", "start": 13, "end": 14},
                   {"status": "Training", "start": 14, "end": 20}]
    assert spot.unbilled_seconds(transitions, started=5) == 4


def _t(seconds: float) -> datetime:
    return datetime.fromtimestamp(1_000_000 + seconds, tz=timezone.utc)


def _description(statuses: list[tuple[str, float]], **extra) -> dict:
    return {"TrainingJobName": "j", "EnableManagedSpotTraining": True, **extra,
            "SecondaryStatusTransitions": [{"Status": s, "StartTime": _t(t)} for s, t in statuses]}


def _points(host: str, values: list[tuple[float, float]]) -> list[dict]:
    return [{"name": "step", "value": v, "t": 1_000_000 + t, "host": host} for t, v in values]


def test_lost_work_per_interruption_from_the_progress_metric():
    d = _description([("Starting", 0), ("Downloading", 1), ("Training", 2), ("Interrupted", 10), ("Starting", 12),
                      ("Downloading", 13), ("Training", 14)], CheckpointConfig={"S3Uri": "s3://b/c"})
    points = (_points("algo-1", [(3, 1), (5, 2), (7, 3), (9, 4), (15, 4), (17, 5)])
              + _points("algo-2", [(3, 1), (5, 2), (7, 3), (9, 4), (15, 1), (17, 2)]))
    (lost,) = insight.lost_work(points, d)
    assert lost["last_before"] == 4 and lost["resumed_from"] == 1 and lost["lost"] == 4
    assert lost["from_start"] and lost["hosts_differ"]
    findings = insight.interruption_findings(d, [lost], {}, points)
    assert "not every host restored the same checkpoint" in findings[0]
    assert "restarted from the beginning" in findings[0]


def test_a_retry_after_an_internal_failure_counts_and_spot_without_checkpoints_is_warned():
    d = _description([("Starting", 0), ("Training", 2), ("Starting", 6), ("Downloading", 7), ("Training", 8)])
    points = _points("algo-1", [(3, 1), (4, 2), (5, 3), (9, 3), (10, 4)])
    (lost,) = insight.lost_work(points, d)
    assert lost["why"] == "instance failure" and lost["lost"] == 1 and not lost["from_start"]
    findings = insight.interruption_findings(d, [lost], {"ckpt.pt": ["algo-1", "algo-2"]}, points)
    assert findings[0].startswith("managed spot job without CheckpointConfig")
    assert any("ckpt.pt written by algo-1, algo-2" in f for f in findings)
    no_metric = insight.interruption_findings(d, [], {}, [])
    assert any("no step or epoch metric" in f for f in no_metric)
