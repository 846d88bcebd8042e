"""A job's JSON-lines files (host logs, metrics) are read by one reader: complete lines only, a torn line
skipped, a line still being written left for the next read."""

import json

from airflow_smdist.backends.local import LocalBackend


def _job(tmp_path):
    backend = LocalBackend(tmp_path / "jobs")
    job_dir = backend.store.job_dir("training", "j1")
    job_dir.mkdir(parents=True)
    (job_dir / "logs").mkdir()
    (job_dir / "state.json").write_text(json.dumps({"status": "InProgress", "transitions": []}))
    return backend, job_dir


def test_log_events_skip_a_torn_line_and_wait_for_one_being_written(tmp_path):
    backend, job_dir = _job(tmp_path)
    log = job_dir / "logs" / "algo-1.jsonl"
    log.write_text(json.dumps({"t": 1.0, "m": "first"}) + "\n"
                   + '{"t": 2.0, "m": "torn by a kill -9\n'
                   + json.dumps({"t": 3.0, "m": "third"}) + "\n"
                   + '{"t": 4.0, "m": "still bei')
    events, cursor = backend.log_events("training", "j1")
    assert [e.message for e in events] == ["first", "third"]
    with open(log, "a") as f:
        f.write('ng written"}\n')
    events, _ = backend.log_events("training", "j1", cursor)
    assert [(e.host, e.message) for e in events] == [("algo-1", "still being written")]


def test_insight_reads_the_metrics_a_supervisor_wrote(tmp_path):
    from airflow_smdist.insight import _collect_local

    backend, job_dir = _job(tmp_path)
    (job_dir / "metrics.jsonl").write_text(
        json.dumps({"t": 1.0, "host": "algo-1", "name": "loss", "value": 0.5}) + "\n" + '{"t": 2.0, "na')
    points, utilization = _collect_local(backend, "j1")
    assert [p["value"] for p in points] == [0.5]
    assert utilization == []
