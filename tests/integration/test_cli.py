"""`airflow smdist jobs ...` (and the `smdist` console script) on real local jobs, run as users run them: as
subprocesses with their own AIRFLOW_HOME, asserting on what they print. Also the smdist connection's
``local_retention``, at submit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.store import read_json, write_json_atomic
from airflow_smdist.lifecycle import Owner
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "tests", "fixtures", "cli")
BIN = os.path.dirname(sys.executable)
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
DAY = 86400.0

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A migrated AIRFLOW_HOME whose job root is <home>/jobs, and the environment the commands run in."""
    home = tmp_path_factory.mktemp("airflow")
    (home / "data").mkdir()
    (home / "data" / "x.csv").write_text("1\n")
    env = {**os.environ, "AIRFLOW_HOME": str(home), "SMDIST_LOCAL_ROOT": str(home / "jobs"),
           "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(SCRIPTS, "dags"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "SMDIST_TEST_DIR": str(home), "PYTHONPATH": REPO}
    env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
    out = subprocess.run([f"{BIN}/airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return home, env


@pytest.fixture(scope="module")
def backend(home):
    return LocalBackend(home[0] / "jobs")


def cli(env: dict, *args: str, timeout: float = 120, script: str = "airflow") -> subprocess.CompletedProcess:
    """``airflow smdist <args>`` (or ``smdist <args>``), as a user runs it."""
    cmd = [f"{BIN}/airflow", "smdist", *args] if script == "airflow" else [f"{BIN}/smdist", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def submit(backend, home, entry: str, *, hps: dict | None = None, count: int = 1, tags: list | None = None,
           environment: dict | None = None) -> str:
    name = f"cli-{entry.split('.')[0]}-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{home}/out", entry_point=entry,
                          source_dir=SCRIPTS, image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                          instance_type="ml.m5.xlarge", instance_count=count, hyperparameters=hps or {},
                          inputs={"train": f"file://{home}/data"}, environment=environment or {})
    upload_source(plan.source_dir, entry, plan.source_uri)
    backend.submit("training", {**plan.request, "Tags": tags or []})
    return name


def status(backend, name: str) -> str:
    return backend.describe("training", name)["TrainingJobStatus"]


def wait_until(predicate, timeout: float = 120, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def age(backend, name: str, seconds: float) -> None:
    """Make the finished job ``name`` look as if it had ended ``seconds`` ago (its state's end time), once its
    supervisor has exited (a job whose supervisor still runs is kept, and its last write of the state would
    undo the age: on a loaded machine it exits a while after the job reads Completed)."""
    job_dir = backend.job_dir("training", name)
    wait_until(lambda: backend._supervisor_pid(job_dir) is None, what=f"{name}'s supervisor to exit")
    path = job_dir / "state.json"
    state = read_json(path)
    state["ended"] = time.time() - seconds
    write_json_atomic(path, state)


def rows(out: subprocess.CompletedProcess) -> list[dict]:
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return json.loads(out.stdout)


def test_list_describe_and_stop_real_jobs(home, backend):
    path, env = home
    owner = Owner("some_dag/train/manual__2024-01-01T00:00:00+00:00/-1", try_number=2)
    done = submit(backend, path, "talk.py", hps={"lines": 2, "api_token": "tok-SECRET-1"},
                  environment={"DB_PASSWORD": "pw-SECRET-2", "MODE": "fast"}, tags=owner.tags())
    wait_until(lambda: status(backend, done) == "Completed", what=f"{done} to complete")
    running = submit(backend, path, "hold.py")
    wait_until(lambda: status(backend, running) == "InProgress" and
               backend.describe("training", running).get("SecondaryStatus") == "Training", what="training")

    listed = {r["name"]: r for r in rows(cli(env, "jobs", "list", "-o", "json"))}
    assert listed[done] | {"started": None, "duration": None} == {
        "kind": "training", "name": done, "status": "Completed", "secondary_status": "Completed",
        "started": None, "duration": None, "dag_id": "some_dag", "task_id": "train",
        "run_id": "manual__2024-01-01T00:00:00+00:00", "try_number": 2}  # numbers as numbers in json
    assert listed[running]["status"] == "InProgress" and listed[running]["dag_id"] is None
    assert listed[done]["started"] and isinstance(listed[done]["duration"], int) and listed[done]["duration"] >= 0
    only = rows(cli(env, "jobs", "list", "--status", "InProgress", "--name-contains", "cli-", "-o", "json"))
    assert [r["name"] for r in only] == [running]
    table = cli(env, "jobs", "list", "--name-contains", done, script="smdist")  # the console script: the same
    assert table.returncode == 0 and done in table.stdout and running not in table.stdout, table.stderr[-2000:]
    assert "some_dag" in table.stdout and "Completed" in table.stdout
    assert re.search(r"\b\d+:\d\d:\d\d\b", table.stdout), table.stdout  # a table shows H:MM:SS

    described = cli(env, "jobs", "describe", done)
    assert described.returncode == 0, described.stderr[-2000:]
    assert "SECRET" not in described.stdout
    d = json.loads(described.stdout)
    assert d["TrainingJobName"] == done and d["TrainingJobStatus"] == "Completed"
    assert d["HyperParameters"]["api_token"] == "***" and d["HyperParameters"]["lines"] == "2"
    assert d["Environment"] == {"DB_PASSWORD": "***", "MODE": "fast"}

    stopped = cli(env, "jobs", "stop", running)
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert f"training job {running}: Stopped" in stopped.stdout
    assert status(backend, running) == "Stopped"
    missing = cli(env, "jobs", "describe", "no-such-job")
    assert missing.returncode == 1 and "no local job named 'no-such-job'" in missing.stderr


def test_logs_follow_a_running_job_until_it_ends(home, backend):
    path, env = home
    name = submit(backend, path, "talk.py", hps={"lines": 12, "pause": 0.4}, count=2)
    log = backend.job_dir("training", name) / "logs" / "algo-1.jsonl"
    wait_until(lambda: log.exists() and b"says line 0" in log.read_bytes(), what="the job's first line")
    assert status(backend, name) == "InProgress"

    follow = cli(env, "jobs", "logs", name, "--follow")
    assert follow.returncode == 0, follow.stderr[-2000:]
    assert status(backend, name) == "Completed"  # it returned once the job had ended
    lines = follow.stdout.splitlines()
    for host in ("algo-1", "algo-2"):
        said = [line for line in lines if line.startswith(f"[{host}] {host} says line ")]
        assert said == [f"[{host}] {host} says line {i}" for i in range(12)], follow.stdout
    one_host = cli(env, "jobs", "logs", name, "--host", "algo-2", script="smdist").stdout.splitlines()
    assert one_host and all(line.startswith("[algo-2] ") for line in one_host)
    assert "[algo-2] algo-2 says line 11" in one_host
    # --timestamps: each line after its time (UTC, ms), in order; --tail N: the last N of those lines;
    # --since: only the lines newer than that (the job ended before the pause below: none within 1 s)
    stamped = cli(env, "jobs", "logs", name, "--host", "algo-2", "-t").stdout.splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == one_host
    times = [line.split(" ", 1)[0] for line in stamped]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", t) for t in times), times
    assert times == sorted(times)
    tail = cli(env, "jobs", "logs", name, "--host", "algo-2", "--tail", "3").stdout.splitlines()
    assert tail == one_host[-3:]
    time.sleep(1.5)
    assert cli(env, "jobs", "logs", name, "--since", "1s").stdout == ""
    assert cli(env, "jobs", "logs", name, "--host", "algo-2", "--since", "1h").stdout.splitlines() == one_host
    bad = cli(env, "jobs", "logs", name, "--since", "soon")
    assert bad.returncode == 1 and "--since: 'soon' is not a duration" in bad.stderr, bad.stderr[-2000:]


def test_prune_removes_old_finished_jobs_only(home, backend):
    path, env = home
    old = submit(backend, path, "talk.py", hps={"lines": 1})
    recent = submit(backend, path, "talk.py", hps={"lines": 1})
    running = submit(backend, path, "hold.py")
    for name in (old, recent):
        wait_until(lambda n=name: status(backend, n) == "Completed", what=f"{name} to complete")
    age(backend, old, 3 * DAY)

    dry = {r["name"]: r for r in rows(cli(env, "jobs", "prune", "--older-than", "2d", "--dry-run", "-o", "json"))}
    assert dry[old]["action"] == "would remove" and dry[recent]["action"] == "kept"
    assert backend.job_dir("training", old).exists()

    pruned = {r["name"]: r for r in rows(cli(env, "jobs", "prune", "--older-than", "2d", "-o", "json"))}
    assert pruned[old]["action"] == "removed" and not backend.job_dir("training", old).exists()
    assert pruned[recent] == {"kind": "training", "name": recent, "action": "kept",
                              "reason": pruned[recent]["reason"]} and "finished" in pruned[recent]["reason"]
    assert backend.job_dir("training", recent).exists()

    everything = {r["name"]: r for r in rows(cli(env, "jobs", "prune", "--older-than", "0s", "-o", "json"))}
    assert everything[running] == {"kind": "training", "name": running, "action": "kept", "reason": "InProgress"}
    assert status(backend, running) == "InProgress" and not backend.job_dir("training", recent).exists()
    backend.stop("training", running)


def test_prune_spares_a_job_whose_task_instance_still_runs(home, backend):
    """A real task instance (``airflow dags test``) submits a job tagged as the operators tag theirs; the job
    completes, its supervisor exits, the task goes on running: prune keeps the job until the task has ended."""
    path, env = home
    dag = subprocess.Popen([f"{BIN}/airflow", "dags", "test", "smdist_cli_owned_job"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: (path / "ready").exists() or dag.poll() is not None, timeout=300, what="the DAG's job")
        assert (path / "ready").exists(), dag.communicate()[0][-3000:]
        name = (path / "ready").read_text()
        assert status(backend, name) == "Completed"
        age(backend, name, 3 * DAY)
        kept = {r["name"]: r for r in rows(cli(env, "jobs", "prune", "--older-than", "1d", "-o", "json"))}
        assert kept[name]["action"] == "kept", kept[name]
        assert "smdist_cli_owned_job/own_a_job/" in kept[name]["reason"] and "running" in kept[name]["reason"]
        assert backend.job_dir("training", name).exists()
    finally:
        (path / "release").touch()
        out = dag.communicate(timeout=300)[0]
    assert dag.returncode == 0, out[-3000:]
    gone = {r["name"]: r for r in rows(cli(env, "jobs", "prune", "--older-than", "1d", "-o", "json"))}
    assert gone[name]["action"] == "removed" and not backend.job_dir("training", name).exists()


def test_local_retention_prunes_at_submit_at_most_every_interval(home, backend, monkeypatch):
    """The smdist connection's ``local_retention``: a submit through the connection's backend removes the
    finished jobs older than it; the next submit within the interval does not look again."""
    from airflow_smdist.backends.local import retention
    from airflow_smdist.hooks.smdist import SmdistHook

    path, _ = home
    # this module's root also holds an owned job, whose task-instance lookup (Airflow's ORM, imported at first
    # use) can take the whole 2 s budget of a pass on a loaded machine: the budget is not what is tested here
    monkeypatch.setattr(retention, "RETENTION_BUDGET_SECONDS", 120.0)
    monkeypatch.setenv("AIRFLOW_CONN_SMDIST_RETENTION", json.dumps(
        {"conn_type": "smdist", "extra": {"local_root": str(path / "jobs"), "local_retention": "1d"}}))
    connected = SmdistHook("smdist_retention").get_backend()
    assert connected.local_retention == "1d"
    (path / "jobs" / ".retention").unlink(missing_ok=True)
    old, fresh = (submit(backend, path, "talk.py", hps={"lines": 1}) for _ in range(2))
    for name in (old, fresh):
        wait_until(lambda n=name: status(backend, n) == "Completed", what=f"{name} to complete")
    age(backend, old, 2 * DAY)

    started = time.monotonic()
    submit(connected, path, "talk.py", hps={"lines": 1})
    assert time.monotonic() - started < 10
    assert not backend.job_dir("training", old).exists() and backend.job_dir("training", fresh).exists()

    age(backend, fresh, 2 * DAY)
    submit(connected, path, "talk.py", hps={"lines": 1})  # within the interval: no second pass
    assert backend.job_dir("training", fresh).exists()
    stamp = path / "jobs" / ".retention"
    os.utime(stamp, (time.time() - retention.RETENTION_INTERVAL_SECONDS - 1,) * 2)
    submit(connected, path, "talk.py", hps={"lines": 1})
    assert not backend.job_dir("training", fresh).exists(), \
        [v for v in retention.plan(backend, DAY) if v.name == fresh]
