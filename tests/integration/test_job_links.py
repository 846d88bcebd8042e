"""The supervisor never follows a link a job made out of its host (issue 34, hole 1).

The supervisor runs as root with the worker's environment (its AWS keys, Fernet key, AIRFLOW_CONN_*). Real local
jobs (tests/fixtures/links/links.py) plant links in their own /opt/ml: to /proc/self/environ, to a worker file
holding a marker secret (absolute, climbing with ../, through a /proc magic link), /opt/ml/model replaced by a
link to a worker directory, output/failure linked to /proc/self/environ or dangling outside. The marker must reach
no uploaded object, no FailureReason and no describe, and the supervisor must create nothing outside the host."""

from __future__ import annotations

import json
import os
import tarfile
import uuid
from pathlib import Path

import pytest
from jobs import wait

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.processing import build_processing, upload_plan
from airflow_smdist.specs.training import build_training

REPO = Path(__file__).resolve().parents[2]
LINKS = REPO / "tests" / "fixtures" / "links"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(launcher.namespace_prefix() is None,
                       reason=f"hosts cannot be namespaced here: {launcher.namespaces_available()}"),
]


class Jobs:
    """The module's jobs, each run once, at once: the worker's marker, its files, and each job's describe."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.marker = f"smdist-secret-{uuid.uuid4().hex}"
        self.worker = root / "worker"  # the worker's own directory: its secret file, a directory for the model
        (self.worker / "model-dir").mkdir(parents=True)
        self.secret = self.worker / "secret.txt"
        self.secret.write_text(f"aws_secret_access_key = {self.marker}\n")
        (self.worker / "model-dir" / "worker-file.txt").write_text(self.marker)
        self.outside = root / "outside"  # where nothing may appear
        self.outside.mkdir()
        self.backend = LocalBackend(root / "jobs")
        self.described: dict[str, dict] = {}

    def args(self, mode: str) -> list[str]:
        return ["--mode", mode, "--secret-file", str(self.secret), "--worker-dir", str(self.worker / "model-dir"),
                "--outside", str(self.outside)]

    def train(self, mode: str) -> str:
        name = f"links-{mode}-{uuid.uuid4().hex[:6]}"
        a = self.args(mode)
        plan = build_training(job_name=name, role=ROLE, output_path=f"file://{self.root}/out", entry_point="links.py",
                              source_dir=str(LINKS), image_uri=IMAGE, instance_type="ml.m5.large",
                              hyperparameters={k[2:]: v for k, v in zip(a[::2], a[1::2])},
                              checkpoint_s3_uri=f"file://{self.root}/ckpt/{name}")
        upload_source(plan.source_dir, "links.py", plan.source_uri)
        self.backend.submit("training", plan.request)
        return name

    def process(self) -> str:
        name = f"links-process-{uuid.uuid4().hex[:6]}"
        plan = build_processing(job_name=name, role=ROLE, image_uri=IMAGE, code=str(LINKS / "links.py"),
                                code_location=f"file://{self.root}/code", arguments=self.args("process"),
                                outputs={"result": f"file://{self.root}/pout/result",
                                         "whole": f"file://{self.root}/pout/whole"})
        upload_plan(plan)
        self.backend.submit("processing", plan.request)
        return name

    def wait(self, kind: str, name: str) -> dict:
        if name not in self.described:
            self.described[name] = wait(self.backend, kind, name, timeout=240)
        return self.described[name]

    def log(self, kind: str, name: str) -> str:
        logs = self.backend.job_dir(kind, name) / "logs"
        return "".join(p.read_text() for p in sorted(logs.glob("*.jsonl")))


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        j = Jobs(tmp_path_factory.mktemp("links"))
        # the marker in the worker's environment, as its AWS keys are: the supervisor inherits the submitter's
        mp.setenv("SMDIST_TEST_WORKER_SECRET", j.marker)
        j.names = {"train": j.train("train"), "model-files": j.train("model-files"),
                   "fail-environ": j.train("fail-environ"), "fail-dangling": j.train("fail-dangling"),
                   "process": j.process()}
        mp.setenv("SMDIST_HOSTFS_NO_OPENAT2", "1")  # a kernel without openat2: the O_NOFOLLOW walk instead
        j.names["model-files-walk"] = j.train("model-files")
        mp.delenv("SMDIST_HOSTFS_NO_OPENAT2")
        yield j


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def tar_members(uri: str) -> dict[str, bytes]:
    with tarfile.open(uri[len("file://"):]) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def no_marker(jobs: Jobs, what: dict[str, bytes] | str) -> None:
    """Neither the marker nor any piece of the worker's environment (a FailureReason or an ExitMessage keeps only
    its first KB, which holds other variables than the marker)."""
    text = what if isinstance(what, str) else json.dumps({k: v.decode("utf-8", "replace") for k, v in what.items()})
    assert jobs.marker not in text, "the worker's secret left through a link the job made"
    pieces = [f"{k}={v}" for k, v in os.environ.items() if len(v) >= 8 and k != "SMDIST_LOCAL_RUNTIME"]
    leaked = [p for p in pieces if p in text]
    assert not leaked, f"the worker's environment left through a link the job made: {leaked[:3]}"


def training(jobs: Jobs, mode: str) -> dict:
    return jobs.wait("training", jobs.names[mode])


# ---- checkpoints -------------------------------------------------------------------------------------------------
def test_checkpoint_links_out_of_the_host_are_not_uploaded(jobs):
    d = training(jobs, "train")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    up = files_of(jobs.root / "ckpt" / jobs.names["train"])
    no_marker(jobs, up)
    # links out are skipped; a link inside is uploaded as what it resolves to, as SageMaker does
    assert up == {"real.txt": b"real", "inside": b"real"}, sorted(up)


def test_the_skipped_links_are_said_in_the_jobs_log(jobs):
    training(jobs, "train")
    log = jobs.log("training", jobs.names["train"])
    assert "skipped checkpoints/environ: a link out of the host" in log, log[-2000:]
    no_marker(jobs, log)


# ---- model.tar.gz and output.tar.gz ------------------------------------------------------------------------------
def test_a_model_directory_replaced_by_a_link_to_a_worker_directory_packs_none_of_it(jobs):
    d = training(jobs, "train")
    members = tar_members(d["ModelArtifacts"]["S3ModelArtifacts"])
    no_marker(jobs, members)
    assert "worker-file.txt" not in members


def test_model_file_links_out_of_the_host_are_not_packed(jobs):
    d = training(jobs, "model-files")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    members = tar_members(d["ModelArtifacts"]["S3ModelArtifacts"])
    no_marker(jobs, members)
    assert set(members) == {"real.txt", "inside"}, sorted(members)


def test_without_openat2_the_walk_skips_the_same_links(jobs):
    d = training(jobs, "model-files-walk")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    members = tar_members(d["ModelArtifacts"]["S3ModelArtifacts"])
    no_marker(jobs, members)
    assert set(members) == {"real.txt", "inside"}, sorted(members)


def test_output_data_links_out_of_the_host_are_not_packed(jobs):
    d = training(jobs, "train")
    out = d["ModelArtifacts"]["S3ModelArtifacts"].replace("model.tar.gz", "output.tar.gz")
    members = tar_members(out)
    no_marker(jobs, members)
    assert set(members) == {"real.txt", "inside"}, sorted(members)


def test_output_success_linked_outside_is_not_created_there(jobs):
    training(jobs, "train")
    assert not (jobs.outside / "success-created").exists()
    assert os.path.islink(jobs.backend.job_dir("training", jobs.names["train"]) / "hosts" / "algo-1" / "output"
                          / "success")


# ---- failure reason ----------------------------------------------------------------------------------------------
def test_a_failure_file_linked_to_the_workers_environment_is_not_the_failure_reason(jobs):
    d = training(jobs, "fail-environ")
    assert d["TrainingJobStatus"] == "Failed"
    no_marker(jobs, d["FailureReason"])
    assert "SMDIST_TEST_WORKER_SECRET" not in d["FailureReason"]
    assert "failing on purpose" in d["FailureReason"], d["FailureReason"]


def test_the_describe_the_task_sees_holds_no_secret(jobs):
    for mode in ("train", "model-files", "model-files-walk", "fail-environ", "fail-dangling"):
        no_marker(jobs, json.dumps(training(jobs, mode), default=str))
        no_marker(jobs, json.dumps(jobs.backend.describe("training", jobs.names[mode]), default=str))


def test_a_dangling_failure_link_is_not_written_through(jobs):
    d = training(jobs, "fail-dangling")
    assert d["TrainingJobStatus"] == "Failed"
    assert "failing on purpose" in d["FailureReason"], d["FailureReason"]
    assert not (jobs.outside / "failure-created").exists(), "the supervisor created a file outside the host"
    assert list(jobs.outside.iterdir()) == []


# ---- processing --------------------------------------------------------------------------------------------------
def test_processing_output_links_out_of_the_host_are_not_uploaded(jobs):
    d = jobs.wait("processing", jobs.names["process"])
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    up = files_of(jobs.root / "pout" / "result")
    no_marker(jobs, up)
    assert up == {"real.txt": b"real", "inside": b"real"}, sorted(up)


def test_a_processing_output_directory_linked_to_a_worker_directory_uploads_none_of_it(jobs):
    jobs.wait("processing", jobs.names["process"])
    up = files_of(jobs.root / "pout" / "whole") if (jobs.root / "pout" / "whole").exists() else {}
    no_marker(jobs, up)
    assert up == {}


def test_an_exit_message_linked_to_the_workers_environment_is_not_read(jobs):
    d = jobs.wait("processing", jobs.names["process"])
    no_marker(jobs, json.dumps(d, default=str))
    assert "SMDIST_TEST_WORKER_SECRET" not in (d.get("ExitMessage") or "")


# ---- transform ---------------------------------------------------------------------------------------------------
LINKING_MODEL = '''
import os


def model_fn(model_dir):
    """The model's own code replaces the engine's output directory by a link to a worker directory."""
    out = "/opt/ml/.transform/output"
    os.rename(out, out + "-real")
    os.symlink(os.environ["LINK_TARGET"], out)
    return None


def transform_fn(model, body, content_type, accept):
    return body, accept
'''


def test_transform_outputs_linked_to_a_worker_directory_are_not_uploaded(tmp_path, monkeypatch):
    from airflow_smdist.backends.local.job import transform as local_transform
    from airflow_smdist.specs.transform import build_model, build_transform

    marker = f"smdist-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    worker = tmp_path / "worker"
    worker.mkdir()
    (worker / "part-00.csv.out").write_text(marker)  # where the supervisor would read the output through the link
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(_text_file(tmp_path / "inference.py", LINKING_MODEL), arcname="code/inference.py")
    backend = LocalBackend(tmp_path / "jobs")
    model = f"linking-{uuid.uuid4().hex[:6]}"
    local_transform.create_model(backend, build_model(model_name=model, model_data=f"file://{archive}", role=ROLE,
                                                      image_uri=IMAGE + "-serving",
                                                      environment={"LINK_TARGET": str(worker)}).request)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-00.csv").write_text("1,2,3\n")
    job = f"links-transform-{uuid.uuid4().hex[:6]}"
    backend.submit("transform", build_transform(job_name=job, model_name=model, input_uri=f"file://{tmp_path}/in",
                                                output_uri=f"file://{tmp_path}/out", instance_count=1,
                                                content_type="text/csv", accept="text/csv"))
    d = wait(backend, "transform", job, timeout=240)
    uploaded = files_of(tmp_path / "out") if (tmp_path / "out").exists() else {}
    assert marker not in json.dumps({k: v.decode("utf-8", "replace") for k, v in uploaded.items()}), \
        "the transform uploaded a worker file through a link the model's code made"
    assert marker not in json.dumps(d, default=str)


def _text_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
