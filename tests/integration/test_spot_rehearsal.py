"""Rehearsed managed spot interruptions and instance failures on real local jobs (issue 33).

A 2-host script checkpoints from its first host and is interrupted on purpose
(``SMDIST_LOCAL_SPOT_INTERRUPTIONS``): its hosts are lost, checkpoints synced and restored, the secondary
status goes ``Interrupted`` and back, and it ends with the same loss as an uninterrupted run.
"""

from __future__ import annotations

import copy
import json
import os
import tarfile
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training

from jobs import wait

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPOT = os.path.join(REPO, "tests", "fixtures", "spot")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
METRICS = [{"Name": "step", "Regex": r"step=(\d+)"}, {"Name": "loss", "Regex": r"loss=([0-9.]+)"}]
#: the loss is computed step by step from the checkpoint's full value: resumed, it is the same to the bit
LOSS_TOLERANCE = 1e-12
#: the DDP script restores model and optimizer state from the checkpoint of a finished epoch, and reshuffles by
#: epoch: the resumed run repeats the same float operations (gloo's all-reduce of two ranks included)
DDP_LOSS_TOLERANCE = 1e-6
needs_namespaces = pytest.mark.skipif(launcher.namespace_prefix() is None,
                                      reason=f"hosts cannot be namespaced here: {launcher.namespaces_available()}")


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(tmp_path / "jobs")


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_CAPACITY_WAIT", "0.5")
    monkeypatch.setenv("SMDIST_LOCAL_CHECKPOINT_SYNC", "1")
    monkeypatch.delenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", raising=False)
    monkeypatch.delenv("SMDIST_LOCAL_INSTANCE_FAILURES", raising=False)


def plan(tmp_path, *, hps=None, spot=True, checkpoint=True, instance_count=2, entry="ckpt_train.py", **kw):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "x.csv").write_text("1\n")
    name = f"spot-{uuid.uuid4().hex[:8]}"
    if spot:
        kw.setdefault("max_wait", 600)
    kw.setdefault("max_run", 300)
    built = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point=entry,
                           source_dir=SPOT, image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                           instance_type="ml.m5.xlarge", instance_count=instance_count, hyperparameters=hps or {},
                           inputs={"train": f"file://{data}"}, metric_definitions=METRICS,
                           use_spot_instances=spot,
                           checkpoint_s3_uri=f"file://{tmp_path}/ckpt/{name}" if checkpoint else None, **kw)
    upload_source(built.source_dir, entry, built.source_uri)
    return built


def run(backend, tmp_path, **kw) -> tuple[str, dict]:
    built = plan(tmp_path, **kw)
    backend.submit("training", built.request)
    name = built.request["TrainingJobName"]
    return name, wait(backend, "training", name, timeout=120)


def final(d) -> dict:
    with tarfile.open(d["ModelArtifacts"]["S3ModelArtifacts"][len("file://"):]) as tar:
        return json.loads(tar.extractfile("final.json").read())


def statuses(d) -> list[str]:
    return [t["Status"] for t in d["SecondaryStatusTransitions"]]


def messages(backend, name) -> list[str]:
    return [e.message for e in backend.log_events("training", name)[0]]


@pytest.mark.slow
@needs_namespaces
def test_two_interruptions_resume_from_rank0_checkpoints_and_end_with_the_uninterrupted_loss(backend, tmp_path,
                                                                                              monkeypatch):
    _, clean = run(backend, tmp_path)
    assert clean["TrainingJobStatus"] == "Completed", clean.get("FailureReason")
    assert "Interrupted" not in statuses(clean)

    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "1.5,1.5")
    name, d = run(backend, tmp_path)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert statuses(d) == ["Starting", "Downloading", "Training", "Interrupted", "Starting", "Downloading",
                           "Training", "Interrupted", "Starting", "Downloading", "Training", "Uploading", "Completed"]
    assert final(d)["step"] == final(clean)["step"] == 16
    assert abs(final(d)["loss"] - final(clean)["loss"]) <= LOSS_TOLERANCE
    log = messages(backend, name)
    resumes = [m for m in log if m.startswith("algo-") and "resumed from checkpoint at step" in m]
    assert len(resumes) == 4, log  # both hosts, after each of the two interruptions
    assert all(int(m.rsplit(" ", 1)[1]) > 0 for m in resumes)
    platform = [json.loads(x)["m"] for x in (backend.job_dir("training", name) / "logs" / "platform.jsonl")
                .read_text().splitlines()]
    assert len(platform) == len(set(platform)), "a later try's lines say which try they belong to"
    assert "Training: Training on 2 host(s): algo-1=10.0.0.1, algo-2=10.0.0.2 (try 3)" in platform \
        or any(m.startswith("Training: ") and m.endswith("(try 3)") for m in platform)
    # the hosts were lost: the request is the one submitted, the billable time leaves out the capacity waits
    assert d["EnableManagedSpotTraining"] is True
    assert d["BillableTimeInSeconds"] <= d["TrainingTimeInSeconds"]
    waits = sum((t["EndTime"] - t["StartTime"]).total_seconds() for t in d["SecondaryStatusTransitions"][3:]
                if t["Status"] in ("Interrupted", "Starting"))
    assert waits >= 1.0
    assert d["TrainingTimeInSeconds"] - d["BillableTimeInSeconds"] >= int(waits) - 1

    from airflow_smdist import insight

    summary, digest = insight.job_insight(backend, d)
    lost = summary["interruptions"]
    assert len(lost) == 2 and all(i["resumed_from"] > 1 for i in lost), lost
    assert all(0 <= i["lost"] <= 3 for i in lost), lost
    assert not any("same checkpoint key" in f for f in summary["findings"]), summary["findings"]


@pytest.mark.slow
@needs_namespaces
def test_a_script_that_never_restores_restarts_from_zero_and_insight_reports_the_lost_work(backend, tmp_path,
                                                                                            monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "1.5")
    name, d = run(backend, tmp_path, hps={"restore": "no", "steps": 10})
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert statuses(d).count("Interrupted") == 1
    log = messages(backend, name)
    assert sum("starting from step 0 (checkpoint present: True)" in m for m in log) == 2, log  # restored, unread
    from airflow_smdist import insight

    summary, digest = insight.job_insight(backend, d)
    (lost,) = summary["interruptions"]
    assert lost["from_start"] and lost["resumed_from"] == 1 and lost["lost"] == lost["last_before"] >= 3, lost
    assert any("restarted from the beginning: the script restored no checkpoint" in f for f in summary["findings"])
    assert digest["interruptions"][0]["lost"] == lost["lost"]


@pytest.mark.slow
@needs_namespaces
def test_two_hosts_writing_one_checkpoint_key_are_flagged(backend, tmp_path):
    name, d = run(backend, tmp_path, hps={"writers": "all", "steps": 6, "sleep": 0.2})
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert any("checkpoint state.json written by algo-" in m and "overwrite each other" in m
               for m in messages(backend, name))
    from airflow_smdist import insight

    summary, _ = insight.job_insight(backend, d)
    assert any("checkpoint state.json written by algo-1, algo-2" in f or "written by algo-2, algo-1" in f
               for f in summary["findings"]), summary["findings"]


@pytest.mark.slow
@needs_namespaces
@pytest.mark.parametrize("during", ["training", "capacity wait"])
def test_max_wait_exceeded_ends_the_job_as_sagemaker_does(backend, tmp_path, monkeypatch, during):
    """MaxWaitTimeInSeconds counts the waits for capacity as well as the run: the job ends Stopped, secondary
    status MaxWaitTimeExceeded, while its MaxRuntimeInSeconds is not reached. Ended while its hosts train, it
    uploads their model as MaxRuntimeInSeconds does; ended while it waits for capacity, it has no hosts."""
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "1.5,1.5,1.5,1.5")
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_CAPACITY_WAIT", "2" if during == "training" else "30")
    name, d = run(backend, tmp_path, instance_count=1, max_run=5, max_wait=5, hps={"steps": 100})
    assert d["TrainingJobStatus"] == "Stopped", d.get("FailureReason")
    assert d["SecondaryStatus"] == "MaxWaitTimeExceeded"
    assert statuses(d).count("Interrupted") == 1
    assert "FailureReason" not in d
    assert d["TrainingTimeInSeconds"] >= 5 > d["BillableTimeInSeconds"]
    if during == "training":  # as MaxRuntimeInSeconds: SIGTERM (Stopping), the model uploaded, then the end
        assert statuses(d)[-3:] == ["Stopping", "Uploading", "MaxWaitTimeExceeded"], statuses(d)
        assert "ModelArtifacts" in d
    else:
        assert statuses(d)[-3:] == ["Interrupted", "Stopping", "MaxWaitTimeExceeded"], statuses(d)
        assert d["TrainingTimeInSeconds"] < 8  # ended at MaxWait, not after the whole capacity wait


@pytest.mark.slow
def test_a_job_without_managed_spot_is_not_interrupted_and_its_log_says_why(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "0.5")
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", "none")
    name, d = run(backend, tmp_path, spot=False, instance_count=1, hps={"steps": 4, "sleep": 0.2})
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert "Interrupted" not in statuses(d)
    assert any("ignored: the request has no EnableManagedSpotTraining" in m for m in messages(backend, name))


@pytest.mark.slow
def test_a_job_that_completes_before_its_next_interruption_says_how_many_of_them_happened(backend, tmp_path,
                                                                                          monkeypatch):
    """A rehearsal interrupts a try only while it trains: a try that completes first is not interrupted (as a
    spot job that ends before capacity goes), and the job's log says so, with the fix, rather than leave the
    missing interruption to be guessed from the statuses."""
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "1,60")
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", "none")
    name, d = run(backend, tmp_path, instance_count=1, hps={"steps": 8, "sleep": 0.2})
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert statuses(d).count("Interrupted") == 1
    said = [m for m in messages(backend, name) if m.startswith("rehearsal: ")]
    assert any("1 of 2 interruption(s) happened" in m and "before its interruption at 60 s" in m
               and "try 2" in m for m in said), said


def test_the_connection_setting_wins_and_a_malformed_one_is_refused_before_anything_is_written(tmp_path,
                                                                                               monkeypatch):
    from airflow_smdist.specs.errors import SpecError

    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "9,9,9")
    backend = LocalBackend(tmp_path / "jobs", local_spot_interruptions="random:7:2:5")
    built = plan(tmp_path)
    assert backend._rehearsal("training", built.request)["spot"] == \
        LocalBackend(tmp_path / "jobs", local_spot_interruptions="random:7:2:5")._rehearsal(
            "training", built.request)["spot"]  # seeded: the same draws every time
    assert len(backend._rehearsal("training", built.request)["spot"]) == 2
    bad = LocalBackend(tmp_path / "jobs", local_spot_interruptions="3;3")
    with pytest.raises(SpecError, match="comma-separated seconds"):
        bad.submit("training", built.request)
    assert not list((tmp_path / "jobs").rglob("request.json"))


@pytest.mark.slow
@pytest.mark.parametrize("retries", [0, 1])
def test_an_internal_instance_failure_is_retried_as_retry_strategy_says(backend, tmp_path, monkeypatch, retries):
    monkeypatch.setenv("SMDIST_LOCAL_INSTANCE_FAILURES", "1")
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", "none")
    kw = {"max_retry_attempts": retries} if retries else {}
    name, d = run(backend, tmp_path, spot=False, instance_count=1, hps={"steps": 8, "sleep": 0.2}, **kw)
    if retries:
        assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
        assert statuses(d) == ["Starting", "Downloading", "Training", "Starting", "Downloading", "Training",
                               "Uploading", "Completed"]
        assert final(d)["step"] == 8
        assert any("resumed from checkpoint at step" in m for m in messages(backend, name))
    else:
        assert d["TrainingJobStatus"] == "Failed"
        assert d["FailureReason"].startswith("InternalServerError:")
        assert statuses(d)[-1] == "Failed"


def test_the_sagemaker_backend_sends_the_same_request_with_or_without_the_rehearsal(moto_server, monkeypatch,
                                                                                    tmp_path):
    """The setting never reaches a request: the environment's and the smdist connection's alike."""
    from airflow_smdist.hooks.smdist import SmdistHook

    sent: list[dict] = []
    base = plan(tmp_path, checkpoint=False).request
    base["CheckpointConfig"] = {"S3Uri": "s3://smdist-data/ckpt/"}
    base["AlgorithmSpecification"]["TrainingImage"] = \
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-cpu-py311"
    base["HyperParameters"]["sagemaker_submit_directory"] = '"s3://smdist-data/code/sourcedir.tar.gz"'
    base["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] = "s3://smdist-data/train/"
    base["OutputDataConfig"]["S3OutputPath"] = "s3://smdist-data/output"

    def submit(env: str | None, extra: dict) -> None:
        if env is None:
            monkeypatch.delenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", raising=False)
        else:
            monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", env)
        monkeypatch.setenv("AIRFLOW_CONN_SMDIST_SPOT", json.dumps(
            {"conn_type": "smdist", "extra": {"backend": "sagemaker", **extra}}))
        backend = SmdistHook("smdist_spot").get_backend()
        assert backend.name == "sagemaker"
        backend.client.meta.events.register("provide-client-params.sagemaker.CreateTrainingJob",
                                            lambda params, **_: sent.append(copy.deepcopy(params)))
        request = copy.deepcopy(base)
        request["TrainingJobName"] = f"spot-same-{uuid.uuid4().hex[:8]}"
        backend.submit("training", request)

    submit(None, {})
    submit("3,3", {})
    submit(None, {"local_spot_interruptions": "random:1:2", "local_instance_failures": "2"})
    assert len(sent) == 3
    for body in sent:
        body.pop("TrainingJobName")
    assert sent[0]["EnableManagedSpotTraining"] is True
    assert sent[0] == sent[1] == sent[2]
    assert "interruption" not in json.dumps(sent[0]).lower() and "failure" not in json.dumps(sent[0]).lower()


@pytest.mark.slow
@needs_namespaces
@pytest.mark.torch
def test_the_example_ddp_script_interrupted_twice_ends_with_the_uninterrupted_loss(backend, tmp_path, monkeypatch):
    """The example torch DDP script (torchrun on 2 hosts, checkpoints from rank 0 each epoch) resumes from its
    checkpoint after each interruption and ends with the loss of an uninterrupted run. The interruptions come
    right after each try's first checkpoint (the example's default), on a loaded machine as on a quiet one:
    nothing here depends on how long start-up takes (it ran in a phase of its own when they were timed)."""
    pytest.importorskip("torch")
    data = tmp_path / "ddp-data"
    data.mkdir()
    for i in range(4):
        (data / f"part-{i}.csv").write_text("".join(f"{j / 10},{(i + j) % 7 / 10},{j / 5 + i / 10}\n"
                                                     for j in range(40)))
    common = dict(entry="train.py", source=os.path.join(REPO, "dags", "scripts", "torch_ddp"),
                  hps={"epochs": 8, "batch_size": 8, "epoch_seconds": 1.0})

    def ddp(**kw):
        built = build_training(
            job_name=f"spot-ddp-{uuid.uuid4().hex[:8]}", role=ROLE, output_path=f"file://{tmp_path}/out",
            entry_point="train.py", source_dir=common["source"], hyperparameters=common["hps"],
            image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", instance_type="ml.m5.xlarge",
            instance_count=2, distribution={"torch_distributed": {"enabled": True}},
            inputs={"train": {"s3_uri": f"file://{data}", "distribution": "ShardedByS3Key"}},
            metric_definitions=[{"Name": "epoch", "Regex": r"epoch=(\d+)"},
                                {"Name": "train:loss", "Regex": r"train_loss=([0-9.eE+-]+)"}],
            use_spot_instances=True, max_run=600, max_wait=900,
            checkpoint_s3_uri=f"file://{tmp_path}/ckpt/{uuid.uuid4().hex[:8]}", **kw)
        upload_source(built.source_dir, "train.py", built.source_uri)
        backend.submit("training", built.request)
        name = built.request["TrainingJobName"]
        d = wait(backend, "training", name, timeout=240)
        assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
        with tarfile.open(d["ModelArtifacts"]["S3ModelArtifacts"][len("file://"):]) as tar:
            return name, d, json.loads(tar.extractfile("training.json").read())

    _clean_name, _clean_d, clean = ddp()
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "checkpoint,checkpoint")
    name, d, resumed = ddp()
    log = messages(backend, name)
    story = "\n".join(m[:120] for m in log if "epoch" in m or "Interrupted:" in m or m.startswith("Training:"))
    assert statuses(d).count("Interrupted") == 2, story
    resumes = [m for m in log if "resumed from checkpoint at epoch" in m]
    assert len(resumes) == 4, story  # every rank, after each interruption
    assert not [m for m in resumes if m.endswith("epoch 0")]
    assert abs(resumed["final_train_loss"] - clean["final_train_loss"]) <= DDP_LOSS_TOLERANCE


@pytest.mark.slow
@needs_namespaces
def test_counting_checkpoints_never_follows_a_link_out_of_the_host(backend, tmp_path, monkeypatch):
    """A job that replaces its checkpoint directory with a link to / while its interruption waits for a checkpoint:
    the root supervisor, which counts checkpoints every tick, skips the link (as the checkpoint sync does) and
    the job's log says so; no file of the worker counts as a checkpoint, so no interruption happens."""
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "checkpoint")
    name, d = run(backend, tmp_path, instance_count=1, entry="ckpt_link_out.py")
    log = messages(backend, name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert "Interrupted" not in statuses(d)
    assert any("skipped checkpoints: a link out of the host" in m for m in log), log
    assert any("rehearsal: 0 of 1 interruption(s) happened" in m and "having written 0 of the 1" in m
               for m in log), log
