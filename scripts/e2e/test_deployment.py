"""A real deployment, end to end (run by scripts/e2e-deployment.sh, which starts and stops it).

Four runs go at once, triggered through the REST API with a token:
  A  smdist_torch_distributed, deferrable=true: the triggerer is killed (-9) while the job runs; a new one
     resumes the task; the task log holds every host's lines, none twice.
  B  smdist_torch_distributed, deferrable=false: the task's worker process is killed (-9) while the job runs;
     the retry reattaches to the same job (one job).
  C  smdist_many_jobs with default params: the LocalExecutor runs its tasks in parallel; none needs a retry.
  D  e2e_sagemaker_on_moto: a job on the sagemaker backend (moto server), for its console links.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter

import httpx
import pytest
from deployment import Api, component, declared_dag_ids, local_jobs, task_process

TORCH = "smdist_torch_distributed"
MANY = "smdist_many_jobs"
MOTO = "e2e_sagemaker_on_moto"
#: enough epochs that each drill happens while the job still runs
LONG = {"epochs": 100}
RUN_TIMEOUT = 720


class Observed:
    def __init__(self) -> None:
        self.runs: dict[str, tuple[str, str]] = {}
        self.states: dict[tuple[str, str, int], set[str]] = {}  # (label, task, map_index) -> states seen
        self.tis: dict[str, list[dict]] = {}
        self.final: dict[str, dict] = {}
        self.drills: dict[str, dict] = {}


def job_started(api: Api, dag_id: str, run_id: str, task_id: str, try_number: int) -> str | None:
    """The job the try started or reattached to, once it trains (the drills need it running)."""
    job = None
    for line in api.log(dag_id, run_id, task_id, try_number):
        m = re.search(r"(?:Started training job|Reattaching to training job) (\S+)", line)
        if m:
            job = m.group(1)
    state = local_jobs().get(job or "", {})
    return job if state.get("status") == "InProgress" and state.get("secondary_status") == "Training" else None


def drill_triggerer(api: Api, obs: Observed, tis: dict) -> None:
    """A: once the task is deferred and host lines stream into its log, kill -9 the triggerer, start another."""
    dag_id, run_id = obs.runs["A"]
    ti = tis.get("train")
    if "triggerer" in obs.drills or not ti or ti["state"] != "deferred":
        return
    lines = api.log(dag_id, run_id, "train", ti["try_number"])
    if not any("[algo-1]" in line for line in lines) or not any("[algo-2]" in line for line in lines):
        return
    job = job_started(api, dag_id, run_id, "train", ti["try_number"])
    if not job:
        return
    status = local_jobs()[job]["status"]
    component("kill", "triggerer")
    obs.drills["triggerer"] = {"at": time.time(), "job": job, "job_status": status, "lines_before": len(lines)}
    time.sleep(2)
    component("restart", "triggerer")


def drill_worker(api: Api, obs: Observed, tis: dict) -> None:
    """B: once the task's job runs, kill -9 the process running the task (Airflow's task process)."""
    dag_id, run_id = obs.runs["B"]
    ti = tis.get("train")
    if "worker" in obs.drills or not ti or ti["state"] != "running" or ti["try_number"] != 1:
        return
    job = job_started(api, dag_id, run_id, "train", 1)
    if not job:
        return
    pid = task_process(ti["id"])
    if pid is None:
        return
    os.kill(pid, signal.SIGKILL)
    obs.drills["worker"] = {"at": time.time(), "job": job, "pid": pid}


@pytest.fixture(scope="module")
def api() -> Api:
    return Api()


@pytest.fixture(scope="module")
def observed(api: Api) -> Observed:
    dag_ids = declared_dag_ids()  # every example DAG and the e2e DAG, registered, with no import error
    assert {TORCH, MANY, MOTO} <= dag_ids, dag_ids
    api.wait_for_dags(dag_ids)
    home = os.environ["AIRFLOW_HOME"]
    obs = Observed()
    started = time.time()
    obs.runs["A"] = (TORCH, api.trigger(TORCH, {**LONG, "deferrable": True}))
    obs.runs["B"] = (TORCH, api.trigger(TORCH, {**LONG, "deferrable": False,
                                                "data_uri": f"file://{home}/e2e-worker-kill/data",
                                                "output_uri": f"file://{home}/e2e-worker-kill/output"}))
    obs.runs["C"] = (MANY, api.trigger(MANY))
    obs.runs["D"] = (MOTO, api.trigger(MOTO))
    pending = set(obs.runs)
    while pending and time.time() - started < RUN_TIMEOUT:
        for label in sorted(pending):
            dag_id, run_id = obs.runs[label]
            tis = api.task_instances(dag_id, run_id)
            for ti in tis:
                obs.states.setdefault((label, ti["task_id"], ti["map_index"]), set()).add(ti["state"])
            by_task = {ti["task_id"]: ti for ti in tis if ti["map_index"] == -1}
            if label == "A":
                drill_triggerer(api, obs, by_task)
            if label == "B":
                drill_worker(api, obs, by_task)
            run = api.run(dag_id, run_id)
            if run["state"] in ("success", "failed"):
                obs.final[label] = run
                obs.tis[label] = tis
                pending.discard(label)
        time.sleep(1)
    obs.elapsed = time.time() - started
    print(f"\nruns finished in {obs.elapsed:.0f}s: { {k: v['state'] for k, v in obs.final.items()} }")
    print(f"drills: {obs.drills}")
    assert not pending, f"runs {sorted(pending)} did not finish within {RUN_TIMEOUT}s"
    return obs


def test_every_run_succeeds(observed: Observed, api: Api):
    failed = {}
    for label, run in observed.final.items():
        if run["state"] != "success":
            failed[label] = [(t["task_id"], t["map_index"], t["state"], t["try_number"])
                             for t in observed.tis[label] if t["state"] != "success"]
            for t in observed.tis[label]:
                if t["state"] == "failed":  # every try's reason, in the test's output (a retry may fail otherwise)
                    print_tries(api, observed, label, t["task_id"], t["map_index"], range(1, t["try_number"] + 1))
    assert failed == {}, "task logs are kept in artifacts/e2e/task-logs/"


def failure_lines(log: list[str]) -> list[str]:
    """What tells why a try failed: its failure reason and error lines (the first 30), then its last 15 lines."""
    marks = ("Failed:", "FailureReason", "Error", "Traceback", "ExitCode")
    reasons = [line for line in log if any(m in line for m in marks)][:30]
    return reasons + ["..."] + log[-15:]


def print_tries(api: Api, obs: Observed, label: str, task_id: str, map_index: int, tries: range) -> None:
    """Why each of these tries of a task of run ``label`` failed, in the test's output."""
    dag_id, run_id = obs.runs[label]
    for n in tries:
        print(f"--- {label} {task_id}[{map_index}] try {n}:")
        try:
            print("\n".join(failure_lines(api.log(dag_id, run_id, task_id, n, map_index))))
        except httpx.HTTPStatusError as exc:  # a try the scheduler failed may have no log of its own
            print(f"(no log: HTTP {exc.response.status_code})")


def airflow_defer_race(dag_id: str, run_id: str, task_id: str) -> str | None:
    """The scheduler's line when Airflow's own race failed a try of this task, else None: the executor's
    success event of a try's defer-exit is handled after the trigger fired and the task was queued again, and
    the scheduler fails the queued try as "changed externally" (apache/airflow#67287 and #72716, open on 3.3;
    the provider's retry reattaches to the same job)."""
    path = os.path.join(os.environ.get("AIRFLOW_LOCAL_DIR", ""), "logs", "scheduler.log")
    mark = f"<TaskInstance: {dag_id}.{task_id} {run_id} "
    with open(path, errors="replace") as fh:
        return next((line.strip() for line in fh if mark in line and "finished with state success, but the task "
                     "instance's state attribute is" in line), None)


def test_many_jobs_runs_tasks_in_parallel_and_none_needs_a_retry(observed: Observed, api: Api):
    tis = [t for t in observed.tis["C"] if t["start_date"] and t["end_date"]]
    retried = [(t["task_id"], t["map_index"], t["try_number"]) for t in tis if t["try_number"] != 1]
    dag_id, run_id = observed.runs["C"]
    for task_id, map_index, tries in retried:  # why the first tries failed
        print_tries(api, observed, "C", task_id, map_index, range(1, tries))
    races = {r: airflow_defer_race(dag_id, run_id, r[0]) for r in retried}
    for r, line in races.items():
        if line:
            print(f"Airflow's defer race (not the provider's) failed a try of {r}: {line}")
    ours = [r for r, line in races.items() if not line]
    assert ours == [], "a task of smdist_many_jobs failed a try (e.g. two jobs racing for a port)"
    spans = sorted((t["start_date"], t["end_date"], t["task_id"], t["map_index"]) for t in tis)
    overlapping = [(a[2:], b[2:]) for i, a in enumerate(spans) for b in spans[i + 1:] if b[0] < a[1]]
    assert overlapping, f"no two tasks ran at the same time: {spans}"
    fan_out = [t for t in tis if t["task_id"] == "fan_out"]
    assert len(fan_out) == 3


def test_long_tasks_went_through_deferred_only_when_the_run_chose_it(observed: Observed):
    assert "deferred" in observed.states[("A", "train", -1)]
    assert "deferred" not in observed.states[("B", "train", -1)]  # the run's Param said deferrable=false
    deferred_in_c = [key for key, states in observed.states.items() if key[0] == "C" and "deferred" in states]
    assert deferred_in_c, "smdist_many_jobs' training tasks wait in the triggerer by default"


def host_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if re.match(r"\[algo-\d+\] ", line)]


def test_killed_triggerer_a_new_one_resumes_with_every_host_line_once(observed: Observed, api: Api):
    drill = observed.drills.get("triggerer")
    assert drill, "the task was never deferred with host lines in its log: no triggerer drill"
    assert drill["job_status"] == "InProgress", "the job ended before the triggerer was killed"
    dag_id, run_id = observed.runs["A"]
    train = next(t for t in observed.tis["A"] if t["task_id"] == "train")
    assert train["try_number"] == 1, "the deferred task was resumed, not retried"
    lines = host_lines(api.log(dag_id, run_id, "train", 1))
    assert any(line.startswith("[algo-1] ") for line in lines) and any(line.startswith("[algo-2] ") for line in lines)
    job = local_jobs()[drill["job"]]
    assert job["status"] == "Completed" and job["ended"] > drill["at"], "the job ran on after the kill"
    epochs = [line for line in lines if "train_loss=" in line]
    assert len(epochs) == LONG["epochs"], f"every epoch's line once: {len(epochs)} of {LONG['epochs']}"
    duplicated = {line: n for line, n in Counter(lines).items() if n > 1}
    assert duplicated == {}, f"lines streamed twice after the triggerer restart: {list(duplicated)[:5]}"


def test_killed_worker_the_retry_reattaches_to_the_same_single_job(observed: Observed, api: Api):
    drill = observed.drills.get("worker")
    assert drill, "the task's job was never seen running: no worker drill"
    dag_id, run_id = observed.runs["B"]
    train = next(t for t in observed.tis["B"] if t["task_id"] == "train")
    assert train["state"] == "success" and train["try_number"] == 2
    retry_log = api.log(dag_id, run_id, "train", 2)
    assert any(f"Reattaching to training job {drill['job']}" in line or
               f"training job {drill['job']} of an earlier try already completed" in line for line in retry_log)
    same_task = [name for name in local_jobs() if name.startswith(drill["job"])]
    assert same_task == [drill["job"]], f"one job for the task instance, not {same_task}"
    assert api.xcom(dag_id, run_id, "train")["job_name"] == drill["job"]


def test_results_carry_lr_scaling_after_deferral_and_after_a_retry(observed: Observed, api: Api):
    for label in ("A", "B"):  # A resumed in execute_complete after a deferral; B reattached in a retry
        dag_id, run_id = observed.runs[label]
        result = api.xcom(dag_id, run_id, "train")
        assert result["lr_scaling"] == {"global_batch_size": 64, "learning_rate": 0.02, "warmup_epochs": 1,
                                        "world_size": 2}, label


#: the local job's link (the provider's plugin serves the page); none for a sagemaker job
PAGE_LINK = "Job page (local)"


def test_links_are_console_links_for_sagemaker_jobs_and_the_job_page_for_local_jobs(observed: Observed, api: Api):
    dag_id, run_id = observed.runs["D"]
    links = api.links(dag_id, run_id, "train")
    assert links.pop(PAGE_LINK) is None, "a sagemaker job has no local job page"
    assert links and all(u and u.startswith("https://console.aws.amazon.com/") for u in links.values()), links
    dag_id, run_id = observed.runs["A"]
    job = api.xcom(dag_id, run_id, "train")["job_name"]
    links = api.links(dag_id, run_id, "train")
    assert links.pop(PAGE_LINK) == f"/smdist/jobs/training/{job}"  # same-origin: the UI renders it
    assert set(links.values()) == {None}  # no console link for a local job

