"""Talking to the deployment scripts/airflow-local.sh started: the REST API with a token, as the UI does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

UI = os.environ.get("AIRFLOW_LOCAL_UI", "")
SCRIPT = os.environ.get("AIRFLOW_LOCAL_SCRIPT", "")
TERMINAL = {"success", "failed"}
REPO = Path(__file__).resolve().parents[2]
#: the DAG folder scripts/e2e-deployment.sh builds: the example DAGs and the e2e DAG(s)
DAG_FOLDERS = (REPO / "dags", REPO / "scripts" / "e2e" / "dags")


def declared_dag_ids(folders: tuple[Path, ...] = DAG_FOLDERS) -> set[str]:
    """Every DAG id the DAG files of ``folders`` declare (``dag_id="..."``): what the deployment must register."""
    ids: set[str] = set()
    for folder in folders:
        for path in sorted(folder.glob("*.py")):
            found = re.findall(r'\bdag_id="([^"]+)"', path.read_text())
            if not found:
                raise AssertionError(f"{path} declares no dag_id=\"...\": write it out so the e2e test can expect it")
            ids.update(found)
    return ids


class Api:
    """The public REST API (/api/v2) with a JWT from POST /auth/token, renewed when it expires."""

    def __init__(self, base: str = UI, user: str | None = None, password: str | None = None) -> None:
        self.base = base
        self.user = user or os.environ["AIRFLOW_LOCAL_USER"]
        self.password = password or os.environ["AIRFLOW_LOCAL_PASSWORD"]
        self.client = httpx.Client(base_url=base, timeout=60)
        self.token = self.new_token()

    def new_token(self) -> str:
        r = self.client.post("/auth/token", json={"username": self.user, "password": self.password})
        r.raise_for_status()
        return r.json()["access_token"]

    def call(self, method: str, path: str, **kw: Any) -> Any:
        for attempt in range(5):
            try:
                r = self.client.request(method, "/api/v2" + path, headers={"Authorization": f"Bearer {self.token}",
                                                                           "Accept": "application/json"}, **kw)
            except httpx.TransportError:  # the api-server is busy on a loaded machine: try again
                time.sleep(2 * (attempt + 1))
                continue
            if r.status_code == 401:
                self.token = self.new_token()
                continue
            r.raise_for_status()
            return r.json() if r.content else None
        raise RuntimeError(f"{method} {path}: no answer")

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        run = self.call("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})
        return run["dag_run_id"]

    def run(self, dag_id: str, run_id: str) -> dict:
        return self.get(f"/dags/{dag_id}/dagRuns/{run_id}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=200)["task_instances"]

    def log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> list[str]:
        """The task log as the UI shows it: one string per line, whichever component wrote it."""
        out = self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
                       full_content="true", map_index=map_index)
        lines = []
        for entry in out["content"]:
            lines.append(entry.get("event", "") if isinstance(entry, dict) else str(entry))
        return lines

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        value = self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
                         deserialize="true", stringify="false")["value"]
        return json.loads(value) if isinstance(value, str) else value

    def links(self, dag_id: str, run_id: str, task_id: str) -> dict:
        return self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/links")["extra_links"]

    def wait_for_dags(self, dag_ids: set[str], timeout: float = 300) -> None:
        """Wait until every DAG of ``dag_ids`` is registered, then require no import error at all."""
        deadline = time.time() + timeout
        known: set[str] = set()
        while time.time() < deadline:
            known = {d["dag_id"] for d in self.get("/dags", limit=100)["dags"]}
            if dag_ids <= known:
                break
            time.sleep(2)
        errors = self.get("/importErrors", limit=100)
        assert dag_ids <= known, f"DAGs not parsed within {timeout}s: {sorted(dag_ids - known)}; import errors {errors}"
        assert errors["total_entries"] == 0, [(e["filename"], e["stack_trace"][-600:]) for e in errors["import_errors"]]


def component(action: str, name: str) -> None:
    """kill (SIGKILL) or restart one component of the deployment, through scripts/airflow-local.sh."""
    subprocess.run(["bash", SCRIPT, action, name], check=True, timeout=120)


def task_process(ti_id: str) -> int | None:
    """The pid of the process running task instance ``ti_id`` (Airflow titles it 'airflow worker -- <id>')."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if cmdline == f"airflow worker -- {ti_id}":
            return int(proc.name)
    return None


def local_jobs(kind: str = "training") -> dict[str, dict]:
    """{job name: state.json} of every job the local backend ran in this deployment."""
    root = Path(os.environ["SMDIST_LOCAL_ROOT"]) / kind
    jobs = {}
    for d in root.iterdir() if root.is_dir() else []:
        state = d / "state.json"
        if state.is_file():
            jobs[d.name] = json.loads(state.read_text())
    return jobs
