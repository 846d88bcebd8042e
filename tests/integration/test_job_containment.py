"""A local job is a guest (issue 34): a job's own code, written by any DAG author, reaches its own job and
nothing else of the machine: not the worker's secrets or files, not AIRFLOW_HOME, not the job root or another
job, not the worker's virtualenv or checkout, and it cannot change the runtime other jobs share.

Each test runs a real hostile job (tests/fixtures/guest/spy.py) in namespaced hosts and reads its report out
of the job's model.tar.gz, as a user would read the job's output."""

from __future__ import annotations

import json
import os
import sys
import shutil
import sysconfig
import tarfile
import uuid
from pathlib import Path

import pytest
from jobs import wait

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training

REPO = Path(__file__).resolve().parents[2]
GUEST = str(REPO / "tests" / "fixtures" / "guest")
GUEST_SETUP = REPO / "tests" / "fixtures" / "guest_setup"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
OWN_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(launcher.namespace_prefix() is None,
                       reason=f"hosts cannot be namespaced here: {launcher.namespaces_available()}"),
]


def submit(backend: LocalBackend, tmp_path: Path, name: str, hps: dict, *, entry: str = "spy.py",
           source: str = GUEST, **kw) -> None:
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point=entry,
                          source_dir=source, image_uri=kw.pop("image_uri", OWN_IMAGE), instance_type="ml.m5.large",
                          instance_count=kw.pop("instance_count", 1),
                          hyperparameters={k: json.dumps(v) for k, v in hps.items()}, **kw)
    upload_source(plan.source_dir, entry, plan.source_uri)
    backend.submit("training", plan.request)


def report(backend: LocalBackend, name: str) -> dict:
    d = wait(backend, "training", name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    with tarfile.open(d["ModelArtifacts"]["S3ModelArtifacts"][len("file://"):]) as tar:
        return json.loads(tar.extractfile("report.json").read())


@pytest.fixture
def secrets(tmp_path, monkeypatch):
    """A marker the worker holds as it holds its AWS keys: in its environment (the supervisor inherits the
    submitter's) and in a file of AIRFLOW_HOME."""
    marker = f"smdist-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("SMDIST_TEST_WORKER_SECRET", marker)
    cfg = Path(os.environ["AIRFLOW_HOME"]) / f"secret-{uuid.uuid4().hex[:8]}.cfg"
    cfg.write_text(f"[core]\nfernet_key = {marker}\n")
    yield marker, cfg
    cfg.unlink()


def test_a_job_reaches_no_worker_file_no_other_job_and_no_job_root(tmp_path, secrets):
    marker, cfg = secrets
    backend = LocalBackend(tmp_path / "jobs")
    victim = f"victim-{uuid.uuid4().hex[:8]}"
    submit(backend, tmp_path, victim, {"secret": marker})
    report(backend, victim)
    victim_dir = backend.job_dir("training", victim)
    name = f"spy-{uuid.uuid4().hex[:8]}"
    own = backend.job_dir("training", name)
    worker_site = sysconfig.get_paths()["purelib"]
    submit(backend, tmp_path, name, {
        "read": [str(cfg), str(victim_dir / "request.json"), str(REPO / "pyproject.toml"), "/etc/shadow"],
        "write": [os.path.join(worker_site, "spy-planted.pth"), str(REPO / "airflow_smdist" / "spy_planted.py"),
                  str(own / "state.json"), str(victim_dir / "hosts" / "algo-1" / "model" / "planted.txt")],
        "list": [str(own.parent), str(own / "hosts"), "/", str(REPO)],
    })
    seen = report(backend, name)
    assert marker not in json.dumps(seen), "the job read a secret of the worker or of another job"
    for path in (cfg, victim_dir / "request.json", REPO / "pyproject.toml"):
        assert seen["read"][str(path)].startswith("FileNotFoundError"), (path, seen["read"][str(path)])
    assert seen["read"]["/etc/shadow"] == "read: "  # the worker's password hashes: empty in a host's /etc
    # the worker's virtualenv and the provider's code: read-only; the job's own state: read-only; another job: absent
    assert "errno 30" in seen["write"][os.path.join(worker_site, "spy-planted.pth")]
    assert "errno 30" in seen["write"][str(REPO / "airflow_smdist" / "spy_planted.py")]
    assert "errno 30" in seen["write"][str(own / "state.json")]
    assert seen["write"][str(victim_dir / "hosts" / "algo-1" / "model" / "planted.txt")].startswith("FileNotFound")
    assert not os.path.exists(os.path.join(worker_site, "spy-planted.pth"))
    assert not (victim_dir / "hosts" / "algo-1" / "model" / "planted.txt").exists()
    assert seen["list"][str(own.parent)] == f"listed: {own.name}", "the job root shows other jobs"
    assert seen["list"][str(own / "hosts")] == "listed: "  # not even its own job's other hosts
    top = seen["list"]["/"].removeprefix("listed: ").split(",")
    assert not {"home", "srv", "mnt", "media", "boot", "run"} & set(top), top
    # of the checkout, only what runs the job: the provider's in-job code and (worker runtime) the virtualenv
    venv = os.path.relpath(sys.prefix, REPO).split(os.sep)[0]  # .venv, or test-py.sh's .venv-py3.12
    assert set(seen["list"][str(REPO)].removeprefix("listed: ").split(",")) <= {"airflow_smdist", venv}
    # what a container may do: write its own /opt/ml, /tmp and root; what it may not: mount, see the disks
    assert set(seen["own"].values()) == {"written"}, seen["own"]
    assert seen["mount"] == "errno 1"
    assert set(seen["dev"]) <= {"null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout",
                                "stderr", "ptmx", "shm", "pts"}, seen["dev"]
    assert not any(k.startswith(("AIRFLOW", "SMDIST_TEST")) for k in seen["environ"])


def test_a_job_cannot_change_the_runtime_other_jobs_share(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    backend = LocalBackend(tmp_path / "jobs")
    name = f"spy-{uuid.uuid4().hex[:8]}"
    submit(backend, tmp_path, name, {}, environment={"SMDIST_LOCAL_REQUIREMENTS": "six"})
    seen = report(backend, name)
    runtime = json.loads((backend.job_dir("training", name) / "state.json").read_text())["runtime"]["root"]
    assert seen["prefix"] == runtime
    assert "errno 30" in seen["runtime"], seen["runtime"]
    site = Path(runtime) / "lib"
    assert not list(site.glob("python*/site-packages/spy-planted.pth")), "the job planted a .pth in the runtime"


def test_a_code_directorys_setup_py_runs_inside_the_host_with_the_hosts_environment(tmp_path, secrets):
    """The toolkit's pre-run install (setup.py, requirements.txt) runs the job's code: inside the host, with the
    host's clean environment, never in the supervisor (root, the worker's environment and files)."""
    marker, cfg = secrets
    src = tmp_path / "src"
    shutil.copytree(GUEST_SETUP, src)
    (src / "targets.json").write_text(json.dumps([str(cfg), str(REPO / "pyproject.toml")]))
    backend = LocalBackend(tmp_path / "jobs")
    name = f"setup-spy-{uuid.uuid4().hex[:8]}"
    submit(backend, tmp_path, name, {}, entry="train.py", source=str(src))
    d = wait(backend, "training", name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")  # the package it installed imports
    seen = json.loads((backend.job_dir("training", name) / "hosts" / "algo-1" / "code" / "setup-report.json")
                      .read_text())
    assert marker not in json.dumps(seen), "setup.py read a secret of the worker"
    assert seen["hostname"] == "algo-1" and seen["cwd"] == "/opt/ml/code"
    assert all(v.startswith("FileNotFoundError") for v in seen["read"].values()), seen["read"]
    assert not any(k.startswith(("AIRFLOW", "SMDIST_TEST", "AWS_ACCESS", "AWS_SECRET")) for k in seen["environ"])


def test_a_secret_hyperparameter_shows_in_no_command_line_but_its_scripts_own(tmp_path):
    """A hyperparameter reaches the script as SageMaker passes it (``--name value`` on its command line); no other
    process of the job shows it to the machine's other users (``ps``): not the hosts' init, which takes its spec
    (the script's command line included) through a file descriptor. A sampler reads every process's
    /proc/<pid>/cmdline while the job runs."""
    import threading
    import time

    secret = f"hf-SECRET-{uuid.uuid4().hex[:8]}"
    src = tmp_path / "src"
    src.mkdir()
    (src / "hold.py").write_text("import sys, time\nassert '--hf_auth' in sys.argv\ntime.sleep(3)\n")
    backend = LocalBackend(tmp_path / "jobs")
    found: set[str] = set()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for pid in os.listdir("/proc"):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if pid.isdigit() else b""
                except OSError:
                    continue
                if secret.encode() in cmdline:
                    found.add(cmdline.replace(b"\0", b" ").decode(errors="replace"))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    name = f"argv-{uuid.uuid4().hex[:8]}"
    try:
        submit(backend, tmp_path, name, {"hf_auth": secret}, entry="hold.py", source=str(src), instance_count=2)
        assert wait(backend, "training", name)["TrainingJobStatus"] == "Completed"
    finally:
        stop.set()
        sampler.join(5)
    assert found, "the sampler never saw the script's own command line"
    others = [c for c in found if " -- hold.py " not in c or "hostinit" in c or "unshare" in c]
    assert others == [], others
