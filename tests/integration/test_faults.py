"""Faults that must be survived: throttling storms, timeouts that must stop the job, secrets, lineage,
heterogeneous clusters."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
import uuid
from types import SimpleNamespace

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moto_throttle

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
from airflow_smdist.specs.training import training_request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTRACT = os.path.join(REPO, "tests", "fixtures", "contract")
FAULTS = os.path.join(REPO, "tests", "fixtures", "faults")


def req(name):
    return training_request(job_name=name, role="arn:aws:iam::123456789012:role/R", output_path="s3://b/out",
                            image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1", instance_type="ml.m5.xlarge")


def test_throttling_storm_on_create_and_describe_is_survived_with_bounded_calls(moto_server):
    from airflow_smdist.backends.sagemaker import SageMakerBackend

    backend = SageMakerBackend("aws_default", "us-east-1")
    moto_throttle.reset()
    name = f"storm-{uuid.uuid4().hex[:8]}"
    moto_throttle.throttle("CreateTrainingJob", 3)
    moto_throttle.throttle("DescribeTrainingJob", 4)
    assert backend.submit("training", req(name)) == name
    assert backend.describe("training", name)["TrainingJobStatus"] == "Completed"
    assert moto_throttle.calls["CreateTrainingJob"] == 4  # 3 throttled + 1, no duplicate job
    assert moto_throttle.calls["DescribeTrainingJob"] == 5
    assert len(backend.list_jobs("training", name_contains=name)) == 1


def test_trigger_polling_outlasts_a_storm_longer_than_botocores_retries(moto_server, monkeypatch):
    from moto_server import set_training_job_status

    from airflow_smdist.backends.sagemaker import SageMakerBackend
    from airflow_smdist import lifecycle
    from airflow_smdist.triggers import base

    monkeypatch.setattr(lifecycle, "MAX_BACKOFF_SECONDS", 0.05)  # the one backoff (triggers use it too)
    backend = SageMakerBackend("aws_default", "us-east-1")
    name = f"storm-{uuid.uuid4().hex[:8]}"
    backend.submit("training", req(name))
    set_training_job_status(name, "InProgress")
    moto_throttle.reset()

    async def scenario():
        source = base.SageMakerStatusSource("aws_default", "us-east-1")
        poller = base.CoalescedPoller(source, "training", 0.1)
        queue = poller.watch(name)
        first = await queue.get()
        moto_throttle.throttle("ListTrainingJobs", 25)  # more than any botocore retry budget
        set_training_job_status(name, "Completed")
        done = await asyncio.wait_for(queue.get(), 60)
        poller.unwatch(name, queue)
        return first, done, dict(source.calls)

    first, done, calls = asyncio.run(scenario())
    assert not isinstance(done, Exception), done
    assert first["TrainingJobStatus"] == "InProgress" and done["TrainingJobStatus"] == "Completed"
    assert moto_throttle.calls["ListTrainingJobs"] >= 26
    assert calls.get("throttled", 0) >= 1  # our backoff took over where botocore's retries ended
    assert moto_throttle.calls["DescribeTrainingJob"] <= 3  # first sight + the change (no per-poll Describe)


def _ctx(run_id):
    return {"ti": SimpleNamespace(dag_id="d", task_id="train", map_index=-1), "run_id": run_id}


def _operator(tmp_path, **kw):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "a.csv").write_text("1\n")
    args = dict(task_id="train", entry_point="dump_env.py", source_dir=CONTRACT,
                image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", inputs={"train": f"file://{data}"},
                output_path=f"file://{tmp_path}/out", environment={"SMDIST_REPO": REPO}, poll_interval=0.3)
    args.update(kw)
    return SageMakerDistributedTrainingOperator(**args)


@pytest.mark.slow
def test_a_deferral_that_times_out_stops_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    op = _operator(tmp_path, hyperparameters={"sleep": 300}, deferrable=True)
    ctx = _ctx(uuid.uuid4().hex)
    with pytest.raises(BaseException) as deferred:  # TaskDeferred (a BaseException on Airflow 3)
        op.execute(ctx)
    assert type(deferred.value).__name__ == "TaskDeferred"
    name = deferred.value.trigger.job_name
    backend = LocalBackend(tmp_path / "jobs")
    deadline = time.time() + 60
    while backend.describe("training", name)["SecondaryStatus"] != "Training":
        assert time.time() < deadline
        time.sleep(0.2)
    # the triggerer gave up (deferral timeout): Airflow resumes the task with __fail__
    with pytest.raises(Exception) as failed:
        _operator(tmp_path, hyperparameters={"sleep": 300}, deferrable=True).resume_execution(
            "__fail__", {"error": "Trigger timeout"}, ctx)
    assert "timeout" in str(failed.value).lower() or "Timeout" in type(failed.value).__name__
    assert backend.describe("training", name)["TrainingJobStatus"] == "Stopped"


@pytest.mark.slow
def test_secret_hyperparameters_stay_out_of_logs_and_xcom(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    op = _operator(tmp_path, hyperparameters={"api_token": secret, "epochs": 1}, secret_hyperparameters=["api_token"])
    result = op.execute(_ctx(uuid.uuid4().hex))
    assert result["hyperparameters"] == {"api_token": "***", "epochs": 1}
    assert secret not in json.dumps(result)
    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        try:
            from airflow.sdk._shared.secrets_masker import _secrets_masker
        except ImportError:
            from airflow.sdk.execution_time.secrets_masker import _secrets_masker
    else:
        from airflow.utils.log.secrets_masker import _secrets_masker
    masker = _secrets_masker()
    assert masker.redact(f"argv: --api_token {secret}") == "argv: --api_token ***"


@pytest.mark.slow
def test_a_rendered_secret_leaves_the_template_field_and_still_reaches_the_job(tmp_path, monkeypatch):
    """Once rendered, a secret hyperparameter's value is no longer in the ``hyperparameters`` field (what
    Airflow 3.0's runner sends unredacted as the Rendered Template), yet the job gets it."""
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    op = _operator(tmp_path, hyperparameters={"api_token": "{{ params.token }}", "epochs": 1},
                   secret_hyperparameters=["api_token"])
    op.render_template_fields({"params": {"token": secret}})
    assert op.hyperparameters == {"api_token": "***", "epochs": 1}
    op.render_template_fields({"params": {"token": secret}})  # rendered again (a resumed task): still hidden
    result = op.execute(_ctx(uuid.uuid4().hex))
    assert result["status"] == "Completed" and secret not in json.dumps(result)
    sent = LocalBackend(tmp_path / "jobs").describe("training", result["job_name"])["HyperParameters"]
    assert sent["api_token"] == json.dumps(secret)


@pytest.mark.slow
def test_lineage_and_heterogeneous_cluster_on_the_local_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    op = _operator(tmp_path, instance_type=None, instance_count=None, instance_groups=[
        {"instance_group_name": "cpu", "instance_type": "ml.c5.xlarge", "instance_count": 2},
        {"instance_group_name": "big", "instance_type": "ml.m5.4xlarge", "instance_count": 1}])
    result = op.execute(_ctx(uuid.uuid4().hex))
    assert result["status"] == "Completed" and result["instance_count"] is None
    assert result["instance_groups"] == [{"name": "cpu", "instance_type": "ml.c5.xlarge", "instance_count": 2},
                                         {"name": "big", "instance_type": "ml.m5.4xlarge", "instance_count": 1}]
    backend = LocalBackend(tmp_path / "jobs")
    events, _ = backend.log_events("training", result["job_name"])
    assert {e.host for e in events} >= {"algo-1", "algo-2", "algo-3", "platform"}  # every host's stream
    lineage = op.get_openlineage_facets_on_complete(None)
    if lineage is None:
        pytest.skip("the OpenLineage provider is not installed")
    assert [d.name for d in lineage.inputs] == [str(tmp_path / "data")]
    assert lineage.outputs[0].name.endswith(f"{result['job_name']}/output/model.tar.gz")


def _masker():
    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        try:
            from airflow.sdk._shared.secrets_masker import _secrets_masker
        except ImportError:
            from airflow.sdk.execution_time.secrets_masker import _secrets_masker
    else:
        from airflow.utils.log.secrets_masker import _secrets_masker
    return _secrets_masker()


class _RedactedAtEmit(logging.Handler):
    """The trigger's log as the triggerer writes it: each line redacted by the secrets masker when emitted."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(_masker().redact(record.getMessage()))


@pytest.mark.slow
def test_the_trigger_masks_secret_hyperparameters_before_its_first_log_line(tmp_path, monkeypatch):
    from airflow_smdist.sourcedir import upload_source
    from airflow_smdist.specs.training import build_training
    from airflow_smdist.triggers.training import SageMakerDistributedTrainingTrigger

    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    secret = f"code-{uuid.uuid4().hex}"  # this process never registered it: only the trigger can
    name = f"secret-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role="arn:aws:iam::123456789012:role/R", output_path=f"file://{tmp_path}/out",
                          entry_point="echo_args.py", source_dir=FAULTS, instance_type="ml.m5.xlarge",
                          image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                          hyperparameters={"licence_code": secret, "sleep": 1})
    upload_source(plan.source_dir, "echo_args.py", plan.source_uri)
    LocalBackend(tmp_path / "jobs").submit("training", plan.request)
    trigger = SageMakerDistributedTrainingTrigger(job_name=name, backend="local", poll_interval=0.2,
                                                  secret_hyperparameters=["licence_code"])
    classpath, kwargs = trigger.serialize()
    assert kwargs["secret_hyperparameters"] == ["licence_code"] and secret not in json.dumps(kwargs, default=str)
    handler = _RedactedAtEmit()
    trigger._log = logging.getLogger(f"test.trigger.{name}")  # a plain logger we can watch, on every line
    trigger._log.addHandler(handler)
    trigger._log.setLevel(logging.INFO)

    async def events():
        return [e async for e in trigger.run()]

    try:
        [event] = asyncio.run(events())
    finally:
        trigger._log.removeHandler(handler)
    assert event.payload["status"] == "success"
    assert any("argv: --licence_code *** --sleep 1" in line for line in handler.lines), handler.lines
    assert not [line for line in handler.lines if secret in line]


def test_a_secret_name_that_is_not_a_hyperparameter_is_refused(tmp_path):
    from airflow_smdist.specs.errors import SpecError

    with pytest.raises(SpecError) as info:  # at DAG parse time, when the hyperparameters are a dict
        _operator(tmp_path, hyperparameters={"api_token": "x"}, secret_hyperparameters=["api_tokn"])
    assert info.value.field == "secret_hyperparameters" and "api_tokn" in str(info.value)
    op = _operator(tmp_path, hyperparameters="{{ params.hps }}", secret_hyperparameters=["api_tokn"])
    op.hyperparameters = {"api_token": "x"}  # as rendering a template leaves it
    with pytest.raises(SpecError, match="api_tokn"):
        op.execute(_ctx(uuid.uuid4().hex))


@pytest.mark.slow
def test_job_files_with_secrets_are_private_to_the_user_running_airflow(tmp_path, monkeypatch):
    import shutil
    import stat
    import subprocess

    root = tmp_path / "smdist-root"  # made by the backend itself
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(root))
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    result = _operator(tmp_path, entry_point="echo_args.py", source_dir=FAULTS,
                       hyperparameters={"licence_code": secret}, secret_hyperparameters=["licence_code"]).execute(
        _ctx(uuid.uuid4().hex))
    job = root / "training" / result["job_name"]
    files = [job / "request.json", job / "state.json",
             job / "hosts" / "algo-1" / "input" / "config" / "hyperparameters.json"]
    for d in (root, root / "training", job):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert secret in (job / "request.json").read_text()  # it is there, for the owner only
    if os.geteuid() == 0 and shutil.which("setpriv"):  # another user of this machine cannot read it
        other = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", str(files[0])],
                               capture_output=True, text=True)
        assert other.returncode != 0 and "Permission denied" in other.stderr and secret not in other.stdout


# -- ownership, names, clear ----------------------------------------------------------------------------------
def _ti_ctx(run_id, dag_id="d", task_id="train", try_number=1, max_tries=0):
    return {"ti": SimpleNamespace(dag_id=dag_id, task_id=task_id, map_index=-1, try_number=try_number,
                                  max_tries=max_tries), "run_id": run_id}


def _echo(tmp_path, **kw):
    return _operator(tmp_path, entry_point="echo_args.py", source_dir=FAULTS, **kw)


@pytest.mark.slow
def test_a_job_of_another_task_instance_is_refused_not_adopted_nor_stopped(tmp_path, monkeypatch):
    from airflow_smdist.lifecycle import ForeignJob

    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    shared = f"shared-{uuid.uuid4().hex[:8]}"
    _echo(tmp_path, job_name=shared, hyperparameters={"sleep": 30}, wait_for_completion=False).execute(
        _ti_ctx("run-a", dag_id="dag_a"))
    backend = LocalBackend(tmp_path / "jobs")
    assert {t["Key"]: t["Value"] for t in backend.list_tags("training", shared)}["smdist:task-instance"] == \
        "dag_a/train/run-a/-1"
    other = _echo(tmp_path, job_name=shared, hyperparameters={"sleep": 30})
    with pytest.raises(ForeignJob, match=r"belongs to task instance dag_a/train/run-a/-1"):
        other.execute(_ti_ctx("run-b", dag_id="dag_b"))
    other.on_kill()  # the refused task's kill stops nothing of the other's
    assert backend.describe("training", shared)["TrainingJobStatus"] == "InProgress"
    backend.stop("training", shared)


def test_a_job_name_too_long_for_its_retry_names_is_refused_up_front(tmp_path, monkeypatch):
    from airflow_smdist.operators.tuning import SmdistTuningOperator
    from airflow_smdist.specs.errors import SpecError

    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    with pytest.raises(SpecError) as info:
        _echo(tmp_path, job_name="x" * 60).execute(_ti_ctx("run"))
    assert info.value.field == "job_name" and "at most 59 characters" in str(info.value)
    assert not (tmp_path / "jobs").exists() and not (tmp_path / "out").exists()
    tuner = SmdistTuningOperator(task_id="tune", job_name="t" * 30, entry_point="echo_args.py", source_dir=FAULTS,
                                 image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                                 output_path=f"file://{tmp_path}/out", objective_metric_name="m",
                                 metric_definitions=[{"Name": "m", "Regex": "m=([0-9.]+)"}],
                                 hyperparameter_ranges={"sleep": {"type": "integer", "min": 0, "max": 1}})
    with pytest.raises(SpecError, match="at most 28 characters"):
        tuner.execute(_ti_ctx("run", task_id="tune"))


@pytest.mark.slow
@pytest.mark.parametrize("rerun_on_clear", [True, False])
def test_clearing_a_finished_task_runs_its_job_again_unless_told_otherwise(tmp_path, monkeypatch, rerun_on_clear):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    run = uuid.uuid4().hex
    first = _echo(tmp_path, rerun_on_clear=rerun_on_clear, retries=1).execute(_ti_ctx(run, max_tries=1))
    # a retry (try 2 of the same series: max_tries unchanged) returns the completed job, whatever the setting
    retry = _echo(tmp_path, rerun_on_clear=rerun_on_clear, retries=1).execute(_ti_ctx(run, try_number=2, max_tries=1))
    assert retry["job_name"] == first["job_name"]
    # the user clears it: Airflow sets max_tries = try_number + retries, and the next try is 3
    cleared = _echo(tmp_path, rerun_on_clear=rerun_on_clear, retries=1).execute(_ti_ctx(run, try_number=3, max_tries=3))
    if rerun_on_clear:
        assert cleared["job_name"] == first["job_name"] + "-r2" and cleared["status"] == "Completed"
    else:
        assert cleared["job_name"] == first["job_name"]


# -- half-made jobs: a task killed inside submit() ------------------------------------------------------------
_TASK = """
import json, sys
from types import SimpleNamespace
from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
args = json.loads(sys.argv[1])
ctx = {"ti": SimpleNamespace(dag_id="d", task_id="train", map_index=-1, try_number=args.pop("try_number"),
                             max_tries=1), "run_id": args.pop("run_id")}
result = SageMakerDistributedTrainingOperator(task_id="train", retries=1, **args).execute(ctx)
print("RESULT " + json.dumps(result, default=str), flush=True)
"""


def _task_process(tmp_path, run_id, try_number, **kw):
    """A real task process (the operator's execute, as the task runner calls it) running the echo job."""
    import subprocess

    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "a.csv").write_text("1\n")
    args = dict(entry_point="echo_args.py", source_dir=FAULTS,
                image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                inputs={"train": f"file://{data}"}, output_path=f"file://{tmp_path}/out",
                environment={"SMDIST_REPO": REPO}, poll_interval=0.3, run_id=run_id, try_number=try_number, **kw)
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.Popen([sys.executable, "-c", _TASK, json.dumps(args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for(predicate, timeout=120.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_task_killed_inside_submit_leaves_no_job_and_its_retry_runs_it(tmp_path, monkeypatch):
    import fcntl
    import signal

    from airflow_smdist.backends.base import JobNotFound
    from airflow_smdist.backends.local.store import pid_alive, private_dir

    root = tmp_path / "jobs"
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(root))
    backend = LocalBackend(root)
    run = uuid.uuid4().hex
    private_dir(root)
    with open(root / "addresses.lock", "a+") as lock:
        # another submitter holds the address lock: the task blocks there, its job half made
        fcntl.flock(lock, fcntl.LOCK_EX)
        task = _task_process(tmp_path, run, 1, hyperparameters={"sleep": 1})
        _wait_for(lambda: any((d / "supervisor.pid").exists() for d in backend.store.staging_dirs("training")),
                  what="the task to start its job's supervisor")
        [staged] = backend.store.staging_dirs("training")
        supervisor = int((staged / "supervisor.pid").read_text().split()[0])
        assert task.poll() is None and pid_alive(supervisor)
        task.send_signal(signal.SIGKILL)
        task.wait()
        fcntl.flock(lock, fcntl.LOCK_UN)
    name = staged.name.split(".")[2]
    # the supervisor sees its submitter gone, removes the staging directory and ends; no job of that name exists
    _wait_for(lambda: not pid_alive(supervisor) and not staged.exists(), timeout=30, what="the supervisor to end")
    assert backend.list_jobs("training") == []
    with pytest.raises(JobNotFound):
        backend.describe("training", name)
    # the retry (try 2) makes the job under the same name and runs it
    retry = _echo(tmp_path, retries=1, hyperparameters={"sleep": 1}).execute(_ti_ctx(run, try_number=2, max_tries=1))
    assert retry["job_name"] == name and retry["status"] == "Completed"
    assert [j["TrainingJobName"] for j in backend.list_jobs("training")] == [name]


@pytest.mark.slow
def test_a_staging_directory_of_a_dead_submitter_is_never_listed_and_is_reclaimed(tmp_path, monkeypatch):
    import subprocess

    root = tmp_path / "jobs"
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(root))
    # a submitter killed -9 right after making its staging directory (before its supervisor started)
    code = ("import os, signal, sys; from airflow_smdist.backends.local.store import JobStore; "
            "JobStore(sys.argv[1]).stage('training', 'half-made'); os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code, str(root)], env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == -9
    backend = LocalBackend(root)
    [staged] = backend.store.staging_dirs("training")
    assert backend.list_jobs("training") == []
    result = _echo(tmp_path, job_name="half-made").execute(_ti_ctx(uuid.uuid4().hex))
    assert result["job_name"] == "half-made" and result["status"] == "Completed"
    assert not staged.exists() and backend.store.staging_dirs("training") == []


@pytest.mark.slow
def test_a_job_left_without_a_supervisor_fails_with_the_reason_and_the_retry_makes_a_new_one(tmp_path, monkeypatch):
    from airflow_smdist.backends.local import HALF_MADE_GRACE_SECONDS
    from airflow_smdist.backends.local.store import write_json_atomic

    root = tmp_path / "jobs"
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(root))
    # what a submitter of an older version left when killed before starting the supervisor: request and
    # state, no supervisor.pid
    job = root / "training" / "orphan-job"
    job.mkdir(parents=True)
    write_json_atomic(job / "request.json", req("orphan-job"))
    write_json_atomic(job / "state.json", {"status": "InProgress", "secondary_status": "Starting",
                                           "created": time.time() - HALF_MADE_GRACE_SECONDS - 1, "transitions": []})
    backend = LocalBackend(root)
    described = backend.describe("training", "orphan-job")
    assert described["TrainingJobStatus"] == "Failed"
    assert "the process that submitted this job ended before its supervisor started" in described["FailureReason"]
    result = _echo(tmp_path, job_name="orphan-job").execute(_ti_ctx(uuid.uuid4().hex))
    assert result["job_name"] == "orphan-job-r2" and result["status"] == "Completed"


def _processes_of(job_dir):
    """Processes that belong to a local job: its supervisor and host processes (by command line or cwd)."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "cwd", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        text = " ".join(p.info["cmdline"] or []) + " " + (p.info["cwd"] or "")
        if str(job_dir) in text:
            found.append(p)
    return found


def test_a_task_killed_with_sigkill_while_its_job_runs_is_rerun_onto_the_same_job(tmp_path, monkeypatch):
    import signal

    root = tmp_path / "jobs"
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(root))
    backend = LocalBackend(root)
    run = uuid.uuid4().hex
    task = _task_process(tmp_path, run, 1, hyperparameters={"sleep": 6})

    def training():
        jobs = backend.list_jobs("training")
        return jobs and jobs[0].get("SecondaryStatus") == "Training"

    _wait_for(training, what="the task's job to be training")
    [job] = backend.list_jobs("training")
    name = job["TrainingJobName"]
    assert _processes_of(backend.job_dir("training", name))  # its supervisor and host process are seen
    task.send_signal(signal.SIGKILL)  # the task process itself (the worker's task runner), not the job
    task.wait()
    assert backend.describe("training", name)["TrainingJobStatus"] == "InProgress"  # the job outlives its task
    # the rerun (try 2) reattaches to that job, waits for it and returns its result: no second job
    retry = _echo(tmp_path, retries=1, hyperparameters={"sleep": 6}).execute(_ti_ctx(run, try_number=2, max_tries=1))
    assert retry["job_name"] == name and retry["status"] == "Completed"
    assert [j["TrainingJobName"] for j in backend.list_jobs("training")] == [name]
    events, _ = backend.log_events("training", name)
    assert any("argv: --sleep 6" in e.message for e in events)
    # nothing of the job is left running
    _wait_for(lambda: not _processes_of(backend.job_dir("training", name)), timeout=30, what="the job's processes")
