"""Per-job insight on real jobs whose behaviour is known: uneven reads, a diverging loss; CloudWatch on moto."""

from __future__ import annotations

import json
import logging
import os
import uuid
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
from airflow_smdist.storage import Storage

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "tests", "fixtures", "insight")
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def context(name: str):
    return {"ti": SimpleNamespace(dag_id="insight", task_id=name, map_index=-1, try_number=1), "run_id": name}


@pytest.fixture
def local_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    monkeypatch.setenv("SMDIST_LOCAL_SAMPLE_INTERVAL", "0.1")
    return tmp_path / "jobs"


def read_png(uri: str) -> bytes:
    data = Storage().read_bytes(uri)
    assert data[:8] == PNG_MAGIC
    import matplotlib.image

    import io
    assert matplotlib.image.imread(io.BytesIO(data), format="png").shape[0] > 100  # decodes as an image
    return data


def image_height(png: bytes) -> int:
    return int.from_bytes(png[20:24], "big")  # the IHDR chunk: width, then height


def task_log(caplog, capsys) -> str:
    """What the task log got: Airflow 3 writes task logs through structlog (stdout here), Airflow 2 through
    logging."""
    return caplog.text + capsys.readouterr().out


@pytest.mark.slow
def test_uneven_reads_are_measured_per_host_and_reported(tmp_path, local_root, caplog, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "big.bin").write_bytes(os.urandom(16 << 20))  # FullyReplicated: every host gets all 16 MiB
    op = SageMakerDistributedTrainingOperator(
        task_id="io", job_name=f"io-{uuid.uuid4().hex[:8]}", entry_point="io_job.py", source_dir=SCRIPTS,
        image_uri=IMAGE, instance_count=2, inputs={"train": f"file://{data}"}, output_path=f"file://{tmp_path}/out",
        poll_interval=0.3)
    with caplog.at_level(logging.INFO):
        result = op.execute(context("io"))

    hosts = result["insight"]["hosts"]
    one, two = hosts["algo-1"]["read_bytes"], hosts["algo-2"]["read_bytes"]
    assert 16 << 20 <= one < 20 << 20  # the channel once, plus what the host's interpreter itself read
    assert abs((two - one) - (16 << 20)) < 1 << 20  # host 2 read exactly one channel more
    assert 1.75 < two / one < 2.05
    finding = " ".join(result["insight"]["findings"])
    # both hosts were given the same channel data: the difference is host 2 reading it one time more
    assert "algo-1 read" in finding and "fewer bytes than algo-2" in finding
    assert "algo-2 read 1.0 times its 16.8 MB of channel data more, with shards of even size" in finding
    assert "shards are uneven" not in finding
    log = task_log(caplog, capsys)
    assert "Insight: Job " in log and "fewer bytes" in log  # the reading in the task log

    summary = json.loads(Storage().read_bytes(result["insight"]["summary_uri"]))
    assert summary["hosts"]["algo-2"]["read_bytes"] == two
    for host in ("algo-1", "algo-2"):  # what was staged in /opt/ml/input/data/train for each host
        assert summary["hosts"][host]["channel_bytes"] == 16 << 20
        assert summary["hosts"][host]["channels"] == {"train": 16 << 20}
    assert summary["hosts"]["algo-1"]["samples"] >= 3
    assert result["insight"]["summary_uri"] == f"file://{tmp_path}/out/{result['job_name']}/output/insight.json"
    for host in ("algo-1", "algo-2"):  # memory and bytes written in XCom too, as the summary has them
        digest, full = hosts[host], summary["hosts"][host]
        assert digest["peak_rss_bytes"] == full["peak_rss_bytes"] and 5 << 20 < digest["peak_rss_bytes"] < 1 << 30
        assert digest["write_bytes"] == full["write_bytes"] > 0  # its log lines, at least
        assert digest["channel_bytes"] == 16 << 20
    # no metric curves here: CPU, I/O (read and written) and memory panels, 3 inches each at 72 dpi
    assert image_height(read_png(result["insight"]["plot_uri"])) == 3 * 3 * 72


@pytest.mark.slow
def test_uneven_shards_are_found_from_each_hosts_channel_data(tmp_path, local_root):
    data = tmp_path / "data"
    data.mkdir()
    for key, mib in (("a.bin", 12), ("b.bin", 2), ("c.bin", 2)):  # ShardedByS3Key: a, c to algo-1; b to algo-2
        (data / key).write_bytes(os.urandom(mib << 20))
    op = SageMakerDistributedTrainingOperator(
        task_id="shards", job_name=f"shards-{uuid.uuid4().hex[:8]}", entry_point="io_job.py", source_dir=SCRIPTS,
        image_uri=IMAGE, instance_count=2, environment={"OTHER_PASSES": "1"}, poll_interval=0.3,
        inputs={"train": {"s3_uri": f"file://{data}", "distribution": "ShardedByS3Key"}},
        output_path=f"file://{tmp_path}/out")
    result = op.execute(context("shards"))

    hosts = result["insight"]["hosts"]
    assert hosts["algo-1"]["channel_bytes"] == 14 << 20 and hosts["algo-2"]["channel_bytes"] == 2 << 20
    assert 14 << 20 <= hosts["algo-1"]["read_bytes"] < 18 << 20  # each host read its shard once
    assert 2 << 20 <= hosts["algo-2"]["read_bytes"] < 6 << 20
    finding = result["insight"]["findings"][0]
    assert finding.startswith("algo-2 was given 86% fewer channel bytes than algo-1 (2.1 MB vs 14.7 MB")
    assert "the shards are uneven" in finding
    assert not any("channel data more" in f for f in result["insight"]["findings"])  # one cause, said once


@pytest.mark.slow
def test_a_diverging_loss_is_found_with_lr_advice(tmp_path, local_root):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.csv").write_text("1\n")
    op = SageMakerDistributedTrainingOperator(
        task_id="div", job_name=f"div-{uuid.uuid4().hex[:8]}", entry_point="diverge.py", source_dir=SCRIPTS,
        image_uri=IMAGE, instance_count=1, inputs={"train": f"file://{tmp_path}/d"},
        output_path=f"file://{tmp_path}/out", poll_interval=0.3,
        metric_definitions=[{"Name": "train:loss", "Regex": r"train_loss=([0-9.eE+-]+)"}],
        hyperparameters={"batch_size": 64},
        lr_scaling={"base_learning_rate": 0.1, "base_batch_size": 64, "per_device_batch_size": 64})
    result = op.execute(context("div"))

    loss = result["insight"]["metrics"]["train:loss"]
    assert loss == {"first": 1.0, "last": 30.0, "min": 0.35, "diverged": True}
    summary = json.loads(Storage().read_bytes(result["insight"]["summary_uri"]))
    series = summary["metrics"]["train:loss"]["series"]["algo-1"]
    assert [v for _t, v in series] == [1.0, 0.6, 0.4, 0.35, 0.9, 4.0, 30.0]
    assert [t for t, _v in series] == sorted(t for t, _v in series)
    assert summary["metrics"]["train:loss"]["divergence"]["at_seconds"] == series[3][0]
    assert "train:loss diverged" in result["insight"]["findings"][0]
    assert "lower base_learning_rate" in result["insight"]["findings"][0]


@pytest.mark.slow
def test_a_failed_job_still_gets_its_insight_and_fails_the_task(tmp_path, local_root, caplog, capsys):
    from airflow_smdist.lifecycle import JobFailed

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.csv").write_text("1\n")
    name = f"crash-{uuid.uuid4().hex[:8]}"
    op = SageMakerDistributedTrainingOperator(
        task_id="crash", job_name=name, entry_point="diverge_crash.py", source_dir=SCRIPTS, image_uri=IMAGE,
        inputs={"train": f"file://{tmp_path}/d"}, output_path=f"file://{tmp_path}/out", poll_interval=0.3,
        metric_definitions=[{"Name": "train:loss", "Regex": r"train_loss=([0-9.eE+-]+)"}])
    with caplog.at_level(logging.INFO), pytest.raises(JobFailed) as failed:
        op.execute(context("crash"))

    assert failed.value.status == "Failed" and failed.value.name == name  # the job's own failure, re-raised
    assert "loss is exploding" in str(failed.value)
    assert failed.value.insight["metrics"]["train:loss"]["diverged"]  # the digest rides on the error
    assert any(f"Insight of failed job {name}:" in note for note in failed.value.__notes__)  # shown in its traceback
    base = f"{tmp_path}/out/{name}/output"
    summary = json.loads(open(f"{base}/insight.json").read())
    assert summary["metrics"]["train:loss"]["diverged"] and summary["metrics"]["train:loss"]["last"] == 90.0
    read_png(f"file://{base}/insight.png")
    log = task_log(caplog, capsys)
    assert "Insight: Job " + name in log and "train:loss diverged" in log  # the reading
    # the key numbers and the URIs on the error path (no XCom is pushed for a failed task)
    assert f"Insight of failed job {name}:" in log and f"file://{base}/insight.png" in log
    assert "train:loss 1 -> 90 (min 0.4, diverged)" in log


@pytest.mark.slow
def test_insight_can_be_turned_off(tmp_path, local_root):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.csv").write_text("1\n")
    op = SageMakerDistributedTrainingOperator(
        task_id="off", job_name=f"off-{uuid.uuid4().hex[:8]}", entry_point="diverge.py", source_dir=SCRIPTS,
        image_uri=IMAGE, inputs={"train": f"file://{tmp_path}/d"}, output_path=f"file://{tmp_path}/out",
        poll_interval=0.3, insight=False)
    result = op.execute(context("off"))
    assert "insight" not in result
    assert not os.path.exists(f"{tmp_path}/out/{result['job_name']}/output/insight.json")


#: a task in its own interpreter (as Airflow runs one): a job without insight, then one with it; prints when
#: the background import of matplotlib ended and when the second task returned
FRESH_TASKS = """
import json, sys, threading, time
from types import SimpleNamespace
from airflow_smdist import insight
from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

def run(name, script, insight_on):
    op = SageMakerDistributedTrainingOperator(
        task_id=name, job_name=name, entry_point=script, source_dir=sys.argv[1], image_uri=sys.argv[2],
        output_path=sys.argv[3], poll_interval=0.3, insight=insight_on)
    return op.execute({"ti": SimpleNamespace(dag_id="fresh", task_id=name, map_index=-1, try_number=1),
                       "run_id": name})

run(sys.argv[4] + "-off", "wait.py", False)
without = sorted(m for m in sys.modules if m.split(".")[0] == "matplotlib")
imported = {}

def watch():
    while insight._preload is None or insight._preload.is_alive():
        time.sleep(0.01)
    imported["at"] = time.time()

threading.Thread(target=watch, daemon=True).start()
result = run(sys.argv[4] + "-on", "wait.py", True)
print(json.dumps({"without": without, "imported": imported.get("at"), "returned": time.time(),
                  "thread": insight._preload.name, "plot_uri": result["insight"]["plot_uri"]}))
"""


@pytest.mark.slow
@pytest.mark.serial  # "imported while the job ran" needs the 4 s job to outlast the import: not so beside 4 workers
def test_a_task_imports_matplotlib_while_it_waits_and_only_when_it_draws(tmp_path, local_root):
    """A task is a fresh process that pays matplotlib's import (about 0.5 CPU-s) every time: the operator
    imports it in the background while the job runs, and not at all when it draws nothing (insight=False)."""
    import subprocess
    import sys

    src = tmp_path / "src"
    src.mkdir()
    (src / "wait.py").write_text("import time\ntime.sleep(4)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    name = f"fresh-{uuid.uuid4().hex[:8]}"
    out = subprocess.run([sys.executable, "-c", FRESH_TASKS, str(src), IMAGE, f"file://{tmp_path}/out", name],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["without"] == []  # insight=False: the task never imported matplotlib
    assert seen["thread"] == "smdist-insight-import"
    state = json.loads((local_root / "training" / f"{name}-on" / "state.json").read_text())
    ended = state["transitions"][-1]["start"]  # the job's end: Completed
    assert state["transitions"][-1]["status"] == "Completed"
    assert seen["imported"] is not None and seen["imported"] < ended <= seen["returned"]  # imported while waiting
    assert seen["plot_uri"] == f"file://{tmp_path}/out/{name}-on/output/insight.png"
    assert image_height(read_png(seen["plot_uri"])) == 3 * 3 * 72  # drawn, whole, when the task returned


def test_sagemaker_insight_reads_cloudwatch_on_the_moto_server(moto_server, s3_bucket, caplog, capsys):
    import boto3

    from airflow_smdist.backends.sagemaker import SageMakerBackend
    from moto_server import REGION, sagemaker_backend
    from test_sagemaker_backend import training_request

    name = f"cw-{uuid.uuid4().hex[:8]}"
    request = training_request(name, s3_bucket)
    args = dict(task_id="cw", backend="sagemaker", job_name=name, image_uri=request["AlgorithmSpecification"][
        "TrainingImage"], output_path=f"s3://{s3_bucket}/output", role=request["RoleArn"], poll_interval=0.1,
        instance_count=2, metric_definitions=[{"Name": "train:loss", "Regex": "loss=([0-9.]+)"}])
    # the task's first try makes the job (moto completes it at once), before CloudWatch has its data
    SageMakerDistributedTrainingOperator(**args, insight=False).execute(context("cw"))
    assert SageMakerBackend().describe("training", name)["TrainingJobStatus"] == "Completed"
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=10)
    job = sagemaker_backend().training_jobs[name]
    job.training_start_time, job.training_end_time = start, start + timedelta(minutes=8)
    cw = boto3.client("cloudwatch", endpoint_url=moto_server, region_name=REGION)
    # per host and minute: CPU, memory, disk, GPU (algo-2 has no GPU metric: a host without one)
    instance = {"algo-1": [(90, 40, 10, 80), (95, 50, 11, 85), (92, 60, 12, 90)],
                "algo-2": [(20, 30, 20, None), (25, 30, 22, None), (22, 33, 24, None)]}
    for minute, loss in enumerate([1.0, 0.5, 0.25], start=1):
        at = start + timedelta(minutes=minute)
        data = [{"MetricName": "train:loss", "Value": loss, "Timestamp": at,
                 "Dimensions": [{"Name": "TrainingJobName", "Value": name}]}]
        for host, rows in instance.items():
            for metric, value in zip(("CPUUtilization", "MemoryUtilization", "DiskUtilization", "GPUUtilization"),
                                     rows[minute - 1]):
                if value is not None:
                    data.append({"MetricName": metric, "Value": value, "Timestamp": at,
                                 "Dimensions": [{"Name": "Host", "Value": f"{name}/{host}"}]})
        cw.put_metric_data(Namespace="/aws/sagemaker/TrainingJobs", MetricData=data)

    with caplog.at_level(logging.INFO):  # a retry of the same task instance reattaches and reports
        result = SageMakerDistributedTrainingOperator(**args).execute(context("cw"))

    insight = result["insight"]
    assert insight["metrics"]["train:loss"] == {"first": 1.0, "last": 0.25, "min": 0.25, "diverged": False}
    assert insight["hosts"]["algo-1"]["cpu_mean_percent"] == pytest.approx(92.3, abs=0.1)
    assert insight["hosts"]["algo-2"]["cpu_mean_percent"] == pytest.approx(22.3, abs=0.1)
    assert {k: insight["hosts"]["algo-1"][k] for k in ("memory_mean_percent", "disk_mean_percent",
                                                       "gpu_mean_percent")} == {
        "memory_mean_percent": 50.0, "disk_mean_percent": 11.0, "gpu_mean_percent": 85.0}
    assert insight["hosts"]["algo-2"]["memory_mean_percent"] == 31.0
    assert insight["hosts"]["algo-2"]["disk_mean_percent"] == 22.0 and "gpu_mean_percent" not in insight["hosts"][
        "algo-2"]
    assert insight["summary_uri"] == f"s3://{s3_bucket}/output/{name}/output/insight.json"
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name=REGION)
    png = s3.get_object(Bucket=s3_bucket, Key=f"output/{name}/output/insight.png")["Body"].read()
    assert png[:8] == PNG_MAGIC
    summary = json.loads(s3.get_object(Bucket=s3_bucket, Key=f"output/{name}/output/insight.json")["Body"].read())
    assert [v for _t, v in summary["metrics"]["train:loss"]["series"]["all"]] == [1.0, 0.5, 0.25]
    assert summary["hosts"]["algo-1"]["samples"] == 3 and summary["hosts"]["algo-1"]["gpu_mean_percent"] == 85.0
    assert "Insight: Job " + name in task_log(caplog, capsys)
