"""The job page of local jobs (airflow_smdist.plugins): its FastAPI app on real local jobs, through FastAPI's
TestClient, with Airflow's own authentication (the simple auth manager: JWTs as the UI's session cookie
carries them) and authorization (viewer: read; user: edit task instances)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest

from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="the job page is served by Airflow 3's api-server")]

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
SECRET = "tok-SECRET-42"
ENV_SECRET = "pw-SECRET-43"
#: the value of a hyperparameter whose name (hf_auth) does not look secret: only its declaration says it is
DECLARED_SECRET = "hf-SECRET-44"
#: a job that prints numbered lines on every host (and its token, once), then holds if asked
SAY = """
import argparse, os, time
p = argparse.ArgumentParser()
p.add_argument("--lines", type=int, default=3)
p.add_argument("--pause", type=float, default=0.1)
p.add_argument("--hold", type=int, default=0)
p.add_argument("--api_token", default="")
p.add_argument("--hf_auth", default="")
a, _ = p.parse_known_args()
host = os.environ["SM_CURRENT_HOST"]
print(f"{host} token {a.api_token} password {os.environ.get('DB_PASSWORD')}", flush=True)
if a.hf_auth:
    print(f"{host} auth {a.hf_auth}", flush=True)
for i in range(a.lines):
    print(f"{host} line {i}", flush=True)
    time.sleep(a.pause)
i = a.lines
while a.hold:
    print(f"{host} line {i}", flush=True)
    i += 1
    time.sleep(0.3)
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A job root with its own source and data, and the simple auth manager with three users."""
    from airflow_smdist.backends.local import LocalBackend

    root = tmp_path_factory.mktemp("console")
    (root / "src").mkdir()
    (root / "src" / "say.py").write_text(SAY)
    (root / "data").mkdir()
    (root / "data" / "x.csv").write_text("1\n")
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW__CORE__AUTH_MANAGER",
              "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager")
    mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,viewer:viewer,user:user")
    mp.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "console-test-secret-" + uuid.uuid4().hex * 2)
    # a signed-in user's token is checked against the revoked tokens: the session's metadata database, migrated
    migrate = subprocess.run([os.path.join(os.path.dirname(sys.executable), "airflow"), "db", "migrate"],
                             capture_output=True, text=True, timeout=600)
    assert migrate.returncode == 0, migrate.stdout[-2000:] + migrate.stderr[-2000:]
    from airflow.api_fastapi.app import create_auth_manager, purge_cached_app

    purge_cached_app()
    manager = create_auth_manager()
    from airflow_smdist.plugins import console_app

    backend = LocalBackend(root / "jobs")
    mp.setattr(console_app, "get_backend", lambda: backend)
    yield {"root": root, "backend": backend, "manager": manager}
    purge_cached_app()
    mp.undo()


@pytest.fixture(scope="module")
def client(env):
    from fastapi.testclient import TestClient

    from airflow_smdist.plugins.console import URL_PREFIX
    from airflow_smdist.plugins.console_app import create_app
    from fastapi import FastAPI

    outer = FastAPI()  # mounted as the api-server mounts plugin apps
    outer.mount(URL_PREFIX, create_app())
    return TestClient(outer, base_url="http://testserver")


def token(env, role: str) -> str:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return env["manager"].generate_jwt(SimpleAuthManagerUser(username=role, role=role))


def as_(env, role: str) -> dict:
    """Request keyword arguments of a signed-in ``role``: the UI's session cookie."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    return {"cookies": {COOKIE_NAME_JWT_TOKEN: token(env, role)}}


def get(client, env, role, path, **kw):
    client.cookies.clear()
    if role:
        client.cookies.update(as_(env, role)["cookies"])
    return client.get(path, **kw)


def post(client, env, role, path, **kw):
    client.cookies.clear()
    if role:
        client.cookies.update(as_(env, role)["cookies"])
    return client.post(path, **kw)


def submit(env, *, count: int = 2, hps: dict | None = None, dag: str | None = "some_dag") -> str:
    from airflow_smdist.lifecycle import Owner
    from airflow_smdist.sourcedir import upload_source
    from airflow_smdist.specs.training import build_training

    root = env["root"]
    name = f"page-{uuid.uuid4().hex[:10]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{root}/out", entry_point="say.py",
                          source_dir=str(root / "src"), image_uri=IMAGE, instance_type="ml.m5.xlarge",
                          instance_count=count, hyperparameters={"api_token": SECRET, **(hps or {})},
                          inputs={"train": f"file://{root}/data"}, environment={"DB_PASSWORD": ENV_SECRET})
    upload_source(plan.source_dir, "say.py", plan.source_uri)
    tags = Owner(f"{dag}/train/manual__2024-01-01T00:00:00+00:00/-1", try_number=1).tags() if dag else []
    env["backend"].submit("training", {**plan.request, "Tags": tags})
    return name


def wait_status(env, name: str, statuses: set[str], timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while True:
        d = env["backend"].describe("training", name)
        if d["TrainingJobStatus"] in statuses:
            return d["TrainingJobStatus"]
        assert time.monotonic() < deadline, f"{name} still {d['TrainingJobStatus']}"
        env["backend"].wait_for_change("training", name, 1.0)


def wait_line(env, name: str, host: str, text: str, timeout: float = 120) -> None:
    path = env["backend"].job_dir("training", name) / "logs" / f"{host}.jsonl"
    deadline = time.monotonic() + timeout
    while not (path.exists() and text.encode() in path.read_bytes()):
        assert time.monotonic() < deadline, f"no {text!r} from {host} of {name}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def finished(env):
    name = submit(env, hps={"lines": 4, "pause": 0.4})
    assert wait_status(env, name, {"Completed", "Failed", "Stopped"}) == "Completed"
    return name


def test_list_shows_jobs_with_their_task_instance(client, env, finished):
    r = get(client, env, "viewer", "/smdist/jobs")
    assert r.status_code == 200, r.text
    assert finished in r.text and "some_dag / train / manual__2024-01-01T00:00:00+00:00" in r.text
    assert f'href=\'/smdist/jobs/training/{finished}\'' in r.text and "Completed" in r.text


def test_page_shows_every_hosts_lines_transitions_outputs_and_the_plot(client, env, finished):
    r = get(client, env, "viewer", f"/smdist/jobs/training/{finished}")
    assert r.status_code == 200, r.text
    page = r.text
    for host in ("algo-1", "algo-2"):
        for i in range(4):
            assert f"{host} line {i}" in page, (host, i)
        assert f"data-host='{host}'" in page
    assert "Completed" in page and "Status transitions" in page and "Training" in page
    assert f"file://{env['root']}/out/{finished}/output/model.tar.gz" in page  # the model artifacts
    assert "id=stop" not in page  # finished: nothing to stop
    assert "id=plot" in page
    png = get(client, env, "viewer", f"/smdist/jobs/training/{finished}/plot.png")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png" and png.content[:4] == b"\x89PNG"


def test_secrets_are_masked_in_the_request_and_in_log_lines(client, env, finished):
    page = get(client, env, "admin", f"/smdist/jobs/training/{finished}").text
    assert SECRET not in page and ENV_SECRET not in page
    assert "algo-1 token *** password ***" in page
    assert re.search(r"&quot;api_token&quot;: &quot;\*\*\*&quot;", page)
    logs = get(client, env, "admin", f"/smdist/jobs/training/{finished}/logs").json()
    assert logs["done"] is True and logs["status"] == "Completed"
    assert logs["events"] and not [e for e in logs["events"] if SECRET in e["m"] or ENV_SECRET in e["m"]]


def test_a_hyperparameter_declared_secret_is_masked_whatever_its_name(client, env, monkeypatch):
    """``hf_auth`` does not look secret by its name. Declared in ``secret_hyperparameters``, its value (which the
    script prints) is masked on the job page, in its log lines, and by `smdist jobs describe` and `jobs logs`."""
    from types import SimpleNamespace

    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    root = env["root"]
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(root / "jobs"))
    name = f"declared-{uuid.uuid4().hex[:8]}"
    op = SageMakerDistributedTrainingOperator(
        task_id="declared", job_name=name, entry_point="say.py", source_dir=str(root / "src"), image_uri=IMAGE,
        role=ROLE, instance_count=1, inputs={"train": f"file://{root}/data"}, output_path=f"file://{root}/out",
        hyperparameters={"lines": 1, "pause": 0, "hf_auth": DECLARED_SECRET}, secret_hyperparameters=["hf_auth"],
        insight=False, poll_interval=0.3)
    ti = SimpleNamespace(dag_id="declared", task_id="declared", map_index=-1, try_number=1,
                         xcom_push=lambda *a, **k: None)
    assert op.execute({"ti": ti, "run_id": "manual"})["status"] == "Completed"
    raw = json.dumps(env["backend"].store.request("training", name))
    assert DECLARED_SECRET in raw  # the job got it (SageMaker keeps hyperparameters in clear too)
    page = get(client, env, "viewer", f"/smdist/jobs/training/{name}").text
    assert "algo-1 auth ***" in page and DECLARED_SECRET not in page
    assert re.search(r"&quot;hf_auth&quot;: &quot;\*\*\*&quot;", page)
    logs = get(client, env, "viewer", f"/smdist/jobs/training/{name}/logs").json()
    assert [e["m"] for e in logs["events"] if "auth" in e["m"]] == ["algo-1 auth ***"]
    smdist = [sys.executable, "-m", "airflow_smdist.cli", "jobs"]
    where = ["--root", str(root / "jobs")]
    cli_env = {k: v for k, v in os.environ.items() if k != "AIRFLOW__CORE__UNIT_TEST_MODE"}  # as a user runs it
    described = subprocess.run([*smdist, "describe", name, *where], capture_output=True, text=True, timeout=120,
                               env=cli_env)
    assert described.returncode == 0 and described.stdout.startswith("{"), described.stdout[:2000]
    assert json.loads(described.stdout)["HyperParameters"]["hf_auth"] == "***"
    assert DECLARED_SECRET not in described.stdout
    logged = subprocess.run([*smdist, "logs", name, *where], capture_output=True, text=True, timeout=120,
                            env=cli_env)
    assert logged.returncode == 0 and "[algo-1] algo-1 auth ***" in logged.stdout, logged.stderr[-2000:]
    assert DECLARED_SECRET not in logged.stdout


def test_the_page_shows_the_one_insight_the_task_logged(client, env, monkeypatch):
    """Issue 44: one insight per job. A spot job interrupted once, run by the operator: the findings the task
    got (and logged), among them what the interruption cost, are the page's, word for word, and its plot is the
    task's insight.png; the page computes no second summary of an ended job (it said "No uneven shards, idle
    hosts or divergence seen" where the task said "interrupted")."""
    import html
    from types import SimpleNamespace

    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    root = env["root"]
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(root / "jobs"))
    monkeypatch.setenv("SMDIST_LOCAL_SPOT_INTERRUPTIONS", "1")
    name = f"insight-{uuid.uuid4().hex[:8]}"
    op = SageMakerDistributedTrainingOperator(
        task_id="insight", job_name=name, entry_point="say.py", source_dir=str(root / "src"), image_uri=IMAGE,
        role=ROLE, instance_count=1, inputs={"train": f"file://{root}/data"}, output_path=f"file://{root}/out",
        hyperparameters={"lines": 8, "pause": 0.3}, use_spot_instances=True, max_run=300, max_wait=600,
        poll_interval=0.3)
    ti = SimpleNamespace(dag_id="insight", task_id="insight", map_index=-1, try_number=1,
                         xcom_push=lambda *a, **k: None)
    result = op.execute({"ti": ti, "run_id": "manual"})
    findings = result["insight"]["findings"]
    assert result["status"] == "Completed" and any("interrupt" in f for f in findings), findings
    page = get(client, env, "viewer", f"/smdist/jobs/training/{name}").text
    shown = re.findall(r"<li>(.*?)</li>", page.split("<ul id=findings>", 1)[1].split("</ul>", 1)[0])
    assert shown == [html.escape(f) for f in findings]
    png = get(client, env, "viewer", f"/smdist/jobs/training/{name}/plot.png").content
    with open(result["insight"]["plot_uri"][len("file://"):], "rb") as f:
        assert png == f.read()


def test_following_a_running_job_returns_only_new_lines_and_stop_stops_it(client, env):
    name = submit(env, hps={"lines": 2, "hold": 1})
    wait_line(env, name, "algo-2", "algo-2 line 3")
    page = get(client, env, "user", f"/smdist/jobs/training/{name}").text
    assert "id=stop" in page  # a user may edit the DAG's task instances
    cursor = re.search(r'"cursor": "([^"]*)"', page).group(1)
    seen = {host: [int(n) for n in re.findall(rf"{host} line (\d+)", page)] for host in ("algo-1", "algo-2")}
    assert all(seen.values()), seen
    for _ in range(3):
        time.sleep(0.8)
        answer = get(client, env, "viewer", f"/smdist/jobs/training/{name}/logs", params={"cursor": cursor}).json()
        assert answer["status"] == "InProgress" and answer["done"] is False
        cursor = answer["cursor"]
        for event in answer["events"]:
            n = int(re.fullmatch(rf"{event['host']} line (\d+)", event["m"]).group(1))
            assert n == seen[event["host"]][-1] + 1, f"a line twice or one missed: {event} after {seen}"
            seen[event["host"]].append(n)
    assert all(len(v) > 5 for v in seen.values()), seen

    url = f"/smdist/jobs/training/{name}/stop"
    assert post(client, env, "viewer", url, headers={"X-Smdist-Console": "stop"}).status_code == 403
    assert post(client, env, "user", url).status_code == 403  # no header: a form on another site
    r = post(client, env, "user", url, headers={"X-Smdist-Console": "stop"})
    assert r.status_code == 200 and r.json()["status"] in ("Stopping", "Stopped"), r.text
    assert wait_status(env, name, {"Stopped", "Completed", "Failed"}) == "Stopped"
    last = get(client, env, "viewer", f"/smdist/jobs/training/{name}/logs", params={"cursor": cursor}).json()
    assert last["done"] is True and last["status"] == "Stopped"


def test_unauthenticated_and_forbidden_requests_are_refused(client, env, finished):
    for path in ("/smdist/jobs", f"/smdist/jobs/training/{finished}", f"/smdist/jobs/training/{finished}/logs",
                 f"/smdist/jobs/training/{finished}/plot.png"):
        r = get(client, env, None, path, headers={"Accept": "application/json"})
        assert r.status_code == 401, (path, r.status_code)
    r = get(client, env, None, f"/smdist/jobs/training/{finished}", headers={"Accept": "text/html"},
            follow_redirects=False)
    assert r.status_code == 303 and "login" in r.headers["location"]
    client.cookies.clear()
    bad = client.get("/smdist/jobs", headers={"Authorization": "Bearer not-a-token"})
    assert bad.status_code in (401, 403)
    r = post(client, env, None, f"/smdist/jobs/training/{finished}/stop", headers={"X-Smdist-Console": "stop"})
    assert r.status_code == 401


def test_a_job_of_no_dag_is_not_stopped_from_the_page(client, env):
    name = submit(env, count=1, hps={"hold": 1}, dag=None)
    try:
        wait_line(env, name, "algo-1", "algo-1 line 1")
        page = get(client, env, "admin", f"/smdist/jobs/training/{name}").text
        assert "no task instance" in page and "id=stop" not in page
        r = post(client, env, "admin", f"/smdist/jobs/training/{name}/stop", headers={"X-Smdist-Console": "stop"})
        assert r.status_code == 403 and "airflow smdist jobs stop" in r.text
    finally:
        env["backend"].stop("training", name)


@pytest.mark.parametrize("path", [
    "/smdist/jobs/training/..%2F..%2Fetc%2Fpasswd", "/smdist/jobs/training/%2E%2E", "/smdist/jobs/%2E%2E/training",
    "/smdist/jobs/nokind/x", "/smdist/jobs/training/a.b", "/smdist/jobs/training/%2Fetc%2Fpasswd/logs",
    "/smdist/jobs/training/no-such-job", "/smdist/jobs/training/no-such-job/plot.png",
])
def test_paths_outside_the_job_root_are_refused(client, env, path):
    r = get(client, env, "admin", path, headers={"Accept": "application/json"})
    assert r.status_code == 404, (path, r.status_code, r.text[:200])


def test_a_job_directory_linked_elsewhere_and_a_forged_cursor_are_refused(client, env, finished, tmp_path):
    import shutil

    backend = env["backend"]
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(backend.job_dir("training", finished), elsewhere)
    (backend.job_dir("training", finished).parent / "linked-job").symlink_to(elsewhere)
    r = get(client, env, "admin", "/smdist/jobs/training/linked-job", headers={"Accept": "application/json"})
    assert r.status_code == 404
    for cursor in ("not-base64!", "WyIvZXRjL3Bhc3N3ZCJd", "eyJhbGdvLTEiOiAiLi4vLi4vZXRjIn0"):  # a list; a string
        r = get(client, env, "admin", f"/smdist/jobs/training/{finished}/logs", params={"cursor": cursor})
        assert r.status_code == 400, cursor


def test_the_plugin_is_cheap_to_load_and_registers_the_app_and_its_navigation_entry():
    code = ("import sys, airflow.sdk; before = set(sys.modules);"
            "from airflow_smdist.plugins.console import SmdistConsolePlugin;"
            "heavy = [m for m in set(sys.modules) - before if m.split('.')[0] in "
            "('fastapi', 'starlette', 'matplotlib', 'boto3', 'botocore', 'psutil')];"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("[]"), out.stdout + out.stderr[-2000:]

    from airflow.plugins_manager import is_valid_plugin

    from airflow_smdist.plugins.console import NAV_TITLE, SmdistConsolePlugin

    assert is_valid_plugin(SmdistConsolePlugin)
    plugin = SmdistConsolePlugin()
    [app] = plugin.fastapi_apps
    assert app["url_prefix"] == "/smdist" and app["app"] is plugin.fastapi_apps[0]["app"]
    assert [v["name"] for v in plugin.external_views] == [NAV_TITLE]
    assert plugin.external_views[0]["href"] == "/smdist/jobs"


def test_the_plugin_is_an_entry_point_of_the_distribution():
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["airflow.plugins"] == {
        "smdist_console": "airflow_smdist.plugins.console:SmdistConsolePlugin"}
