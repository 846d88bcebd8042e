"""A trigger moved to another triggerer prints no line twice and loses none (issue 31, item 6).

Run by scripts/e2e-deployment.sh after test_deployment.py (its runs have ended: swapping the triggerer disturbs
none of them) and before test_browser.py (which finds the usual triggerer back). A deferred training job on the
sagemaker backend, against a moto server this test runs in its own process (moto makes every job Completed at
once and writes no log line; the test holds the job InProgress and writes its CloudWatch lines):

1. the task defers; its trigger, in the deployment's triggerer, prints the job's first lines and keeps its log
   cursor in the task instance's XCom ``smdist_log_cursor``;
2. that triggerer is killed (-9), the job writes more lines, and another triggerer starts with a home of its own
   (another AIRFLOW_HOME and SMDIST_LOCAL_ROOT, so no file the first one wrote is within its reach; the same
   metadata database and the same task-log folder, as triggerers of one deployment share a database and, on
   MWAA or with remote logging, the task logs); it takes over the orphaned trigger, which resumes from the XCom;
3. the job ends, the task resumes on a worker: its log holds every line once, and its XComs no cursor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from deployment import REPO, Api, component

sys.path.insert(0, str(REPO / "tests" / "integration"))
from moto_server import (  # the integration tests' moto server and its state drivers
    MotoServer,
    new_jobs_in_progress,
    sagemaker_backend,
    seed_log_stream,
    set_training_job_status,
)

DAG_ID = "e2e_trigger_moves"
GROUP = "/aws/sagemaker/TrainingJobs"
#: lines the job writes before the triggerer is killed, and after
BEFORE, AFTER = 8, 8
WAIT = 180


def until(what: str, check, timeout: float = WAIT, every: float = 1.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def job_lines(api: Api, run_id: str) -> list[str]:
    return [line for line in api.log(DAG_ID, run_id, "train", 1) if line.startswith("[algo-1] moved line ")]


def ti_state(api: Api, run_id: str) -> str | None:
    tis = api.task_instances(DAG_ID, run_id)
    return next((t["state"] for t in tis if t["task_id"] == "train"), None)


def cursor_xcom(api: Api, run_id: str):
    try:
        return api.xcom(DAG_ID, run_id, "train", key="smdist_log_cursor")
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code == 404:
            return None
        raise


def other_triggerer(home: Path, log_path: Path) -> subprocess.Popen:
    """``airflow triggerer`` with a home of its own: the deployment's database and task-log folder, nothing else."""
    env = dict(os.environ)
    env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"] = os.path.join(os.environ["AIRFLOW_HOME"], "logs")
    env["AIRFLOW_HOME"] = str(home / "airflow")
    env["SMDIST_LOCAL_ROOT"] = str(home / "smdist")
    (home / "airflow").mkdir(parents=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(["airflow", "triggerer"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_a_trigger_moved_to_a_triggerer_with_another_home_prints_every_line_once():
    api = Api()
    api.wait_for_dags({DAG_ID})
    server = MotoServer(port=int(os.environ["E2E_MOTO_LIVE_PORT"]))
    url = server.start()
    home = Path(tempfile.mkdtemp(prefix="smdist-other-triggerer-"))
    logs_dir = Path(os.environ.get("AIRFLOW_LOCAL_DIR", str(home))) / "logs"
    moved = None
    try:
        with new_jobs_in_progress("training"):
            run_id = api.trigger(DAG_ID)
            job = until("the task created its job", lambda: next(iter(sagemaker_backend().training_jobs), None))
        set_training_job_status(job, "InProgress", "Training")
        stream = f"{job}/algo-1-1700000000"
        t0 = int(time.time() * 1000)
        seed_log_stream(url, GROUP, stream, [(t0 + i, f"moved line {i}") for i in range(BEFORE)])
        until("the task deferred and its trigger printed the first lines",
              lambda: ti_state(api, run_id) == "deferred" and len(job_lines(api, run_id)) >= BEFORE)
        # the operator seeded the record before it deferred (its key, no cursor): wait for the trigger's cursor
        saved = until("the trigger kept its cursor in the task's XCom",
                      lambda: (x := cursor_xcom(api, run_id)) and x.get("cursor") is not None and x)
        assert set(saved) == {"key", "cursor"} and saved["key"], saved

        component("kill", "triggerer")
        t1 = int(time.time() * 1000)  # lines written while no triggerer runs
        seed_log_stream(url, GROUP, stream, [(t1 + i, f"moved line {i}") for i in range(BEFORE, BEFORE + AFTER)])
        moved = other_triggerer(home, logs_dir / "triggerer-moved.log")
        until("the other triggerer resumed the trigger and printed the later lines",
              lambda: len(job_lines(api, run_id)) >= BEFORE + AFTER)
        set_training_job_status(job, "Completed")
        final = until("the task resumed and ended", lambda: (s := ti_state(api, run_id)) in ("success", "failed") and s)
        assert final == "success", api.log(DAG_ID, run_id, "train", 1)[-30:]

        lines = job_lines(api, run_id)
        counts = Counter(lines)
        assert sorted(counts) == sorted(f"[algo-1] moved line {i}" for i in range(BEFORE + AFTER)), lines
        assert {line: n for line, n in counts.items() if n > 1} == {}, "lines printed twice after the move"
        assert cursor_xcom(api, run_id) is None, "execute_complete deletes the cursor's XCom"
        # the operator seeds the cursor's XCom before it defers: no triggerer read a missing one (Airflow 3's XCom
        # client logs each such read at error level, in the triggerer's own log)
        for name in ("triggerer.log", "triggerer-moved.log"):
            log = logs_dir / name
            text = log.read_text(errors="replace") if log.is_file() else ""
            assert not [line for line in text.splitlines() if "not found" in line and "smdist_log_cursor" in line], name
    finally:
        if moved is not None:
            stop(moved)
        component("restart", "triggerer")  # the deployment's own triggerer, for the tests that follow
        server.stop()
