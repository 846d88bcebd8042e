"""The IAM policy the README documents (rendered by airflow_smdist/backends/iam.py) is exactly what the sagemaker
backend needs (issue 30): against a moto server that enforces IAM, jobs run by an identity holding only that
policy succeed, and without any one of its actions they do not.

The server (moto_server.IamMotoServer) runs in a process of its own with moto's ``INITIAL_NO_AUTH_ACTION_COUNT``:
its first three calls (unauthenticated) make an administrator, who makes the buckets, the log streams and, for
each run, an IAM user with an access key and the rendered policy (a managed policy attached to the user); the
code under test then runs with that user's keys (the Airflow ``aws`` connection, and the environment for code
that uses boto3's defaults). moto_server extends moto where its authorization differs from AWS's (resources
of SageMaker and Logs calls, CloudWatch's action names) and records every action it authorized or refused.

* ``test_the_sagemaker_dag_runs_under_the_rendered_policy``: the sagemaker-backend DAG
  (scripts/e2e/dags/e2e_sagemaker_on_moto.py) under ``airflow dags test``: it succeeds, nothing is refused.
* ``test_each_kinds_path_needs_exactly_the_actions_it_is_listed_with``: per job kind, the operator's paths as a
  DAG's tasks take them, in phases: a task that waits and streams its job's log, that task's retry, which finds
  the job by name and reattaches after reading its owner tag (ListTags), a deferred task through its trigger
  (List*Jobs, FilterLogEvents), a killed task's stop; with training's insight (GetMetricData), the sharded
  inference's model and S3 listing, the tuning job's trials. Under the policy each phase gives what it should
  (EXPECTED), nothing is refused, and the actions the server authorized are the ones listed for the kind here
  (USED), so this list cannot drift from the code. (Run once for the module: ``full_policy``.)
* ``test_without_any_one_action_the_path_that_calls_it_fails``: for every action of the policy that moto can
  enforce, the phases of a kind's path that took it under the full policy, run under the policy less that
  action: the server refuses exactly that action, and the phases do not give what they gave (the task raises,
  its trigger never ends, or it misses what the action gives: its log lines, its insight, its stopped job).
* ``test_what_moto_cannot_enforce_is_named``: iam:PassRole (when a Create* names the execution role) and
  sagemaker:AddTags (for the tags a Create* carries) are never authorized per call by moto, so no run here can
  show them needed: they are listed because AWS authorizes them so, and the README says moto does not check them.

The module takes about 2 minutes here (half of it the 28 runs without one action; a run whose trigger never
ends waits TRIGGER_TIMEOUT).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import boto3
import pytest

from airflow_smdist.backends import iam
from jobs import capture_log
from moto_server import IamMotoServer

REPO = Path(__file__).resolve().parents[2]
ACCOUNT, REGION = "123456789012", "us-east-1"
#: the e2e DAG's role and bucket; the scenarios use the same role and a bucket of their own
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecutionRole"
BUCKET, E2E_BUCKET = "smdist-iam", "smdist-e2e"
PREFIXES = (f"s3://{BUCKET}/smdist", f"s3://{E2E_BUCKET}/output")
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
METRIC = "validation:rmse"
#: the administrator's policy and the calls that make him (moto's unauthenticated calls)
ADMIN = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
NO_AUTH_CALLS = 3  # CreateUser, CreateAccessKey, PutUserPolicy
#: what a deferred task's trigger may take (it polls every 0.2 s); a wait past it is the outcome "never ended"
TRIGGER_TIMEOUT = 4.0

#: Actions moto never authorizes per call: no run here can show them needed (AWS authorizes them as said).
UNENFORCED = {
    "iam:PassRole": "AWS checks it when a Create* names the execution role; moto's SageMaker does not",
    "sagemaker:AddTags": "AWS checks it for the Tags a Create* carries (tag-on-create); moto does not",
}

_SM = "sagemaker:"
_COMMON = {"logs:DescribeLogStreams", "logs:FilterLogEvents", "s3:PutObject"}
#: the actions each kind's path calls (what the server authorized in the test of the full policy)
USED: dict[str, set[str]] = {
    "training": _COMMON | {_SM + a for a in ("CreateTrainingJob", "DescribeTrainingJob", "StopTrainingJob",
                                             "ListTrainingJobs", "ListTags")}
    | {"logs:GetLogEvents", "cloudwatch:GetMetricData"},
    "processing": _COMMON | {_SM + a for a in ("CreateProcessingJob", "DescribeProcessingJob",
                                               "StopProcessingJob", "ListProcessingJobs", "ListTags")}
    | {"logs:GetLogEvents"},
    "transform": _COMMON | {_SM + a for a in ("CreateModel", "DescribeModel", "CreateTransformJob",
                                              "DescribeTransformJob", "StopTransformJob", "ListTransformJobs",
                                              "ListTags")}
    | {"s3:GetObject", "s3:ListBucket", "logs:GetLogEvents"},
    "tuning": _COMMON | {_SM + a for a in ("CreateHyperParameterTuningJob", "DescribeHyperParameterTuningJob",
                                           "StopHyperParameterTuningJob", "ListHyperParameterTuningJobs",
                                           "ListTrainingJobsForHyperParameterTuningJob", "DescribeTrainingJob",
                                           "ListTags")},
}


def the_kind_that_calls(action: str) -> str:
    return next(kind for kind, used in USED.items() if action in used)


ENFORCED = sorted(set().union(*USED.values()))


# ---- the server, its administrator and the users ----------------------------------------------------------------
class Aws:
    """The IAM-enforcing server, its administrator's clients, and users made with a policy."""

    def __init__(self, server: IamMotoServer, admin_keys: dict[str, str]) -> None:
        self.server = server
        self.url = server.endpoint_url
        self.admin_keys = admin_keys

    def client(self, service: str, keys: dict[str, str] | None = None):
        keys = keys or self.admin_keys
        return boto3.client(service, endpoint_url=self.url, region_name=REGION, aws_access_key_id=keys["id"],
                            aws_secret_access_key=keys["secret"])

    def user(self, leave_out: tuple[str, ...] = ()) -> dict[str, str]:
        """A new IAM user holding exactly the rendered policy (less ``leave_out``); its access key."""
        admin = self.client("iam")
        name = f"smdist-{uuid.uuid4().hex[:10]}"
        document = iam.policy_document(role_arn=ROLE, s3_prefixes=PREFIXES, region=REGION, account=ACCOUNT,
                                       leave_out=leave_out)
        arn = admin.create_policy(PolicyName=name, PolicyDocument=json.dumps(document))["Policy"]["Arn"]
        admin.create_user(UserName=name)
        admin.attach_user_policy(UserName=name, PolicyArn=arn)
        key = admin.create_access_key(UserName=name)["AccessKey"]
        return {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"], "user": name}

    def seed_log(self, kind: str, job: str, marker: str) -> None:
        """One line ``marker`` in host algo-1's stream of ``job``, stamped now (as CloudWatch would hold it)."""
        from airflow_smdist.kinds import kind_info

        logs = self.client("logs")
        group, stream = kind_info(kind).log_group, f"{job}/algo-1-1700000000"
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            logs.create_log_group(logGroupName=group)
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            logs.create_log_stream(logGroupName=group, logStreamName=stream)
        logs.put_log_events(logGroupName=group, logStreamName=stream,
                            logEvents=[{"timestamp": int(time.time() * 1000), "message": marker}])


@pytest.fixture(scope="module")
def aws():
    server = IamMotoServer(no_auth_calls=NO_AUTH_CALLS)
    server.start()
    try:
        first = boto3.client("iam", endpoint_url=server.endpoint_url, region_name=REGION,
                             aws_access_key_id="testing", aws_secret_access_key="testing")
        first.create_user(UserName="admin")
        key = first.create_access_key(UserName="admin")["AccessKey"]
        first.put_user_policy(UserName="admin", PolicyName="admin", PolicyDocument=json.dumps(ADMIN))
        env = Aws(server, {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]})
        with pytest.raises(Exception, match="InvalidClientTokenId|not valid|security token"):
            first.list_users()  # the unauthenticated calls are spent: the server enforces IAM from here on
        for bucket in (BUCKET, E2E_BUCKET):
            env.client("s3").create_bucket(Bucket=bucket)
        yield env
    finally:
        server.stop()


# ---- running a kind's path as a user ----------------------------------------------------------------------------
class Run:
    """One run of a kind's path by one user: names, captured task logs, the outcome of each phase."""

    def __init__(self, aws: Aws, kind: str, tmp: Path, conn_id: str, user: str,
                 only: set[str] | None = None) -> None:
        self.aws, self.kind, self.tmp, self.conn_id, self.user = aws, kind, tmp, conn_id, user
        self.prefix = f"{kind[:4]}-{uuid.uuid4().hex[:8]}"
        self.only = only
        self.outcome: dict[str, Any] = {}
        #: phase -> the actions the server authorized to the user during it
        self.actions: dict[str, set[str]] = {}

    def uri(self, *parts: str) -> str:
        return "/".join([PREFIXES[0], self.prefix, *parts])

    def phase(self, name: str, run: Callable[[], Any]) -> None:
        """Record ``run()``'s summary as phase ``name`` (an exception is an outcome too) and the actions it took;
        a phase not in ``only`` is not run."""
        if self.only is not None and name not in self.only:
            return
        before = len(self.rpc("authorized", self.user))
        try:
            self.outcome[name] = run()
        except Exception as exc:  # noqa: BLE001 - compared with the full policy's outcome
            self.outcome[name] = f"raised {type(exc).__name__}"
        self.actions[name] = set(self.rpc("authorized", self.user)[before:])

    @staticmethod
    def context(task_id: str, run_id: str, try_number: int = 1) -> dict[str, Any]:
        """A task instance's context (the operators are made with ``retries=1``, so ``max_tries`` is 1)."""
        ti = SimpleNamespace(dag_id="iam", task_id=task_id, map_index=-1, try_number=try_number, max_tries=1,
                             xcom_push=lambda *a, **k: None)
        return {"ti": ti, "run_id": run_id}

    @staticmethod
    def capture(obj: Any) -> list[str]:
        """The lines ``obj`` (an operator or a trigger) logs: what the task's (or triggerer's) log shows."""
        return capture_log(obj, [])

    def rpc(self, name: str, *args: Any) -> Any:
        return self.aws.server.call(name, *args)

    def phases(self, make, summary: Callable[[dict], dict], *, finish_waiting: Callable[[str], None] | None = None,
               finish_deferred: Callable[[str], None] | None = None) -> None:
        """The phases of every kind's path, in order (the retry's job is the waiting task's)."""
        waited = f"{self.prefix}-w"
        self.phase("waits", lambda: self.waits_with_logs(make, waited, summary, finish_waiting))
        self.phase("retry", lambda: self.retries(make, waited, summary))
        self.phase("deferred", lambda: self.defers(make, f"{self.prefix}-d", summary,
                                                   finish_deferred or _complete(self)))
        self.phase("killed", lambda: self.killed(make, f"{self.prefix}-k"))

    # -- the phases every kind goes through ---------------------------------------------------------------------
    def waits_with_logs(self, make, name: str, summary: Callable[[dict], dict],
                        finish: Callable[[str], None] | None = None) -> dict:
        """A task that waits for its job and streams its log (DescribeLogStreams, GetLogEvents). ``finish``: the
        job starts InProgress and ``finish`` ends it once it exists (else moto completes it at once)."""
        marker = f"line of {name}"
        self.aws.seed_log(self.kind, name, marker)
        op = make(name)
        lines = self.capture(op)
        if finish is None:
            result = op.execute(self.context("wait", name))
        else:
            result = self.while_running(lambda: op.execute(self.context("wait", name)), name, finish)
        return {**summary(result), "log": any(marker in line for line in lines)}

    def while_running(self, execute: Callable[[], Any], name: str, finish: Callable[[str], None]) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        self.rpc("set_new_job_status", self.kind, "InProgress")
        try:
            with ThreadPoolExecutor(1) as pool:
                task = pool.submit(execute)
                deadline = time.monotonic() + 30
                while not task.done() and time.monotonic() < deadline and not self.exists(name):
                    time.sleep(0.05)
                if not task.done():
                    finish(name)
                return task.result(timeout=60)
        finally:
            self.rpc("set_new_job_status", self.kind, None)

    def exists(self, name: str) -> bool:
        try:
            self.status(name)
            return True
        except Exception:  # noqa: BLE001 - not made yet
            return False

    def retries(self, make, name: str, summary: Callable[[dict], dict]) -> dict:
        """The retry of that task: it finds the job by name and reattaches to it (ListTags: its owner tag)."""
        op = make(name)
        lines = self.capture(op)
        result = op.execute(self.context("wait", name, try_number=2))
        return {**summary(result), "reattached": any("already completed" in line for line in lines)}

    def defers(self, make, name: str, summary: Callable[[dict], dict], finish: Callable[[str], None]) -> dict:
        """A deferred task: its trigger waits (List*Jobs, FilterLogEvents), ``finish`` ends the job meanwhile."""
        self.rpc("set_new_job_status", self.kind, "InProgress")
        try:
            op = make(name, deferrable=True)
            try:
                op.execute(self.context("defer", name))
                return {"deferred": False}
            except BaseException as exc:  # TaskDeferred (a BaseException on Airflow 3; its module
                if type(exc).__name__ != "TaskDeferred":  # differs across Airflow lines)
                    raise
                deferred = exc
        finally:
            self.rpc("set_new_job_status", self.kind, None)
        marker = f"deferred line of {name}"
        self.aws.seed_log(self.kind, name, marker)
        if self.kind == "training":  # the trigger reads no log while a job is provisioning
            self.rpc("set_training_job_status", name, "InProgress", "Training")
        lines = self.capture(deferred.trigger)
        payload = asyncio.run(self._trigger(deferred.trigger, lambda: finish(name)))
        if payload is None:
            return {"trigger": "never ended", "log": any(marker in line for line in lines)}
        result = getattr(op, deferred.method_name)(context=self.context("defer", name), event=payload,
                                                   **(deferred.kwargs or {}))
        return {**summary(result), "log": any(marker in line for line in lines)}

    @staticmethod
    async def _trigger(trigger, finish: Callable[[], None]) -> dict | None:
        async def first():
            async for event in trigger.run():
                return event.payload
            return None

        task = asyncio.ensure_future(first())
        await asyncio.sleep(0.8)  # List rounds and log rounds while the job runs
        await asyncio.to_thread(finish)
        try:
            return await asyncio.wait_for(task, TRIGGER_TIMEOUT)
        except asyncio.TimeoutError:
            return None

    def killed(self, make, name: str) -> dict:
        """A task killed while its job runs stops the job (Stop*, then Describe until it has stopped)."""
        self.rpc("set_new_job_status", self.kind, "InProgress")
        try:
            op = make(name, wait_for_completion=False)
            op.execute(self.context("kill", name))
        finally:
            self.rpc("set_new_job_status", self.kind, None)
        self.capture(op)
        op.lifecycle.stop_timeout = 1.0  # a stop that is refused is not waited for as long as a real one
        op.on_kill()
        return {"job": self.status(name)}

    def status(self, name: str) -> str:
        from airflow_smdist.kinds import kind_info

        info = kind_info(self.kind)
        sm = self.aws.client("sagemaker")
        return str(getattr(sm, info.method("describe"))(**{info.name_key: name})[info.status_key])


def _complete(run: Run) -> Callable[[str], None]:
    return lambda name: run.rpc("set_job_status", run.kind, name, "Completed")



def training_path(run: Run) -> None:
    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    src = run.tmp / "src"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text("print('val_rmse=0.1')\n")

    def make(name: str, **kw: Any):
        return SageMakerDistributedTrainingOperator(
            task_id="train", job_name=name, backend="sagemaker", aws_conn_id=run.conn_id, region_name=REGION,
            entry_point="train.py", source_dir=str(src), image_uri=IMAGE, role=ROLE, instance_count=2,
            output_path=run.uri("out"), metric_definitions=[{"Name": METRIC, "Regex": r"val_rmse=([0-9.]+)"}],
            poll_interval=0.05, retries=1, **kw)

    run.phases(make, lambda r: {"status": r["status"], "insight": "insight" in r})


def processing_path(run: Run) -> None:
    from airflow_smdist.operators.processing import SmdistProcessingOperator

    script = run.tmp / "prep.py"
    script.write_text("print('prep')\n")

    def make(name: str, **kw: Any):
        return SmdistProcessingOperator(
            task_id="prep", job_name=name, backend="sagemaker", aws_conn_id=run.conn_id, region_name=REGION,
            image_uri=IMAGE, code=str(script), code_location=run.uri("code"), role=ROLE, poll_interval=0.05,
            outputs={"out": run.uri("processed")}, retries=1, **kw)

    run.phases(make, lambda r: {"status": r["status"]})


def tuning_path(run: Run) -> None:
    from airflow_smdist.operators.tuning import SmdistTuningOperator

    src = run.tmp / "src"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text("print('val_rmse=0.1')\n")
    trials = [{"tuned": {"learning_rate": "0.05"}, "status": "Completed", "objective": 0.3},
              {"tuned": {"learning_rate": "0.12"}, "status": "Completed", "objective": 0.1}]

    def make(name: str, **kw: Any):
        run.rpc("plan_tuning_job", name, trials)  # the job runs its trials as it is described
        return SmdistTuningOperator(
            task_id="tune", job_name=name, backend="sagemaker", aws_conn_id=run.conn_id, region_name=REGION,
            entry_point="train.py", source_dir=str(src), image_uri=IMAGE, role=ROLE, instance_type="ml.m5.large",
            output_path=run.uri("out"), metric_definitions=[{"Name": METRIC, "Regex": r"val_rmse=([0-9.]+)"}],
            objective_metric_name=METRIC, objective_type="Minimize", strategy="Random", max_jobs=2,
            hyperparameter_ranges={"learning_rate": {"type": "continuous", "min": 0.01, "max": 0.3}},
            poll_interval=0, retries=1, **kw)

    def finish(name: str) -> None:  # the plan moves on with each Describe (a trigger only lists)
        sm = run.aws.client("sagemaker")
        for _ in range(2 * len(trials) + 1):
            sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)

    def summary(r: dict) -> dict:
        return {"status": r["status"], "best": r.get("best_objective_value"), "plot": "plot_uri" in r}

    run.phases(make, summary, finish_deferred=finish)


def transform_path(run: Run) -> None:
    from airflow_smdist.operators.transform import SageMakerShardedBatchInferenceOperator

    s3 = run.aws.client("s3")
    inputs = {"a.csv": 3, "b.csv": 2}
    for key, rows in inputs.items():
        s3.put_object(Bucket=BUCKET, Key=f"smdist/{run.prefix}/in/{key}", Body="1,2\n" * rows)
    s3.put_object(Bucket=BUCKET, Key=f"smdist/{run.prefix}/model.tar.gz", Body=b"")

    def make(name: str, **kw: Any):
        return SageMakerShardedBatchInferenceOperator(
            task_id="score", job_name=name, backend="sagemaker", aws_conn_id=run.conn_id, region_name=REGION,
            input_uri=run.uri("in/"), output_uri=run.uri("out", name, ""), model_data=run.uri("model.tar.gz"),
            model_name=f"{run.prefix}-model", image_uri=IMAGE, role=ROLE, content_type="text/csv", accept="text/csv",
            split_type="Line", poll_interval=0.05, retries=1, **kw)

    # moto's transform jobs write nothing: the service's outputs are written here when a job ends
    def write_outputs(name: str) -> None:
        for key, rows in inputs.items():
            s3.put_object(Bucket=BUCKET, Key=f"smdist/{run.prefix}/out/{name}/{key}.out", Body="0.5\n" * rows)

    def summary(r: dict) -> dict:
        return {"complete": r["complete"], "records": r["records"]}

    def finish(name: str) -> None:
        write_outputs(name)
        _complete(run)(name)

    run.phases(make, summary, finish_waiting=finish, finish_deferred=finish)


PATHS = {"training": training_path, "processing": processing_path, "tuning": tuning_path,
         "transform": transform_path}


#: a phase that runs only after another (the retry reattaches to the waiting task's job)
NEEDS = {"retry": "waits"}


def run_path(aws: Aws, kind: str, tmp: Path, leave_out: tuple[str, ...] = (),
             only: set[str] | None = None) -> tuple[Run, list[str]]:
    """``kind``'s path (its phases ``only``, default all) run by a new user holding the policy less ``leave_out``:
    the run (its outcome and actions by phase) and the actions the server refused the user."""
    keys = aws.user(leave_out)
    conn_id = f"aws_iam_{uuid.uuid4().hex[:8]}"
    if only is not None:
        only = only | {NEEDS[p] for p in only if p in NEEDS}
    run = Run(aws, kind, tmp, conn_id, keys["user"], only)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
            "conn_type": "aws", "login": keys["id"], "password": keys["secret"],
            "extra": {"endpoint_url": aws.url, "region_name": REGION}}))
        # code that uses boto3's defaults (the tuning results' Storage) runs as the same user, as on MWAA
        for var, value in (("AWS_ACCESS_KEY_ID", keys["id"]), ("AWS_SECRET_ACCESS_KEY", keys["secret"]),
                           ("AWS_ENDPOINT_URL", aws.url), ("AWS_DEFAULT_REGION", REGION),
                           ("SMDIST_LOCAL_ROOT", str(tmp / "root"))):
            mp.setenv(var, value)
        for var in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(var, raising=False)
        PATHS[kind](run)
    return run, aws.server.call("denied", keys["user"])


@pytest.fixture(scope="module")
def full_policy(aws, tmp_path_factory) -> dict[str, tuple[Any, list[str]]]:
    """Every kind's whole path run under the full policy, once per test session: under pytest-xdist the first
    worker to need it runs it and the others read what it found (pytest-xdist's recipe for a fixture made once,
    a file under the workers' shared temporary directory and a lock): it took 65-86 s on each worker.
    What the tests read of it: each run's outcome and actions by phase, and what the server refused."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return {kind: run_path(aws, kind, tmp_path_factory.mktemp(kind)) for kind in PATHS}
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent / "iam-full-policy.json"
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not shared.is_file():
            found = {kind: run_path(aws, kind, tmp_path_factory.mktemp(kind)) for kind in PATHS}
            shared.write_text(json.dumps({kind: {"outcome": run.outcome, "refused": refused,
                                                 "actions": {p: sorted(a) for p, a in run.actions.items()}}
                                          for kind, (run, refused) in found.items()}))
    return {kind: (SimpleNamespace(outcome=found["outcome"],
                                   actions={p: set(a) for p, a in found["actions"].items()}), found["refused"])
            for kind, found in json.loads(shared.read_text()).items()}


# ---- the tests -------------------------------------------------------------------------------------------------
#: what each kind's path gives under the full policy, phase by phase
EXPECTED: dict[str, dict[str, Any]] = {
    "training": {"waits": {"status": "Completed", "insight": True, "log": True},
                 "retry": {"status": "Completed", "insight": True, "reattached": True},
                 "deferred": {"status": "Completed", "insight": True, "log": True},
                 "killed": {"job": "Stopped"}},
    "processing": {"waits": {"status": "Completed", "log": True},
                   "retry": {"status": "Completed", "reattached": True},
                   "deferred": {"status": "Completed", "log": True},
                   "killed": {"job": "Stopped"}},
    "tuning": {"waits": {"status": "Completed", "best": 0.1, "plot": True, "log": False},
               "retry": {"status": "Completed", "best": 0.1, "plot": True, "reattached": True},
               "deferred": {"status": "Completed", "best": 0.1, "plot": True, "log": True},
               "killed": {"job": "Stopped"}},
    "transform": {"waits": {"complete": True, "records": 5, "log": True},
                  "retry": {"complete": True, "records": 5, "reattached": False},
                  "deferred": {"complete": True, "records": 5, "log": True},
                  "killed": {"job": "Stopped"}},
}


@pytest.mark.parametrize("kind", list(PATHS))
def test_each_kinds_path_needs_exactly_the_actions_it_is_listed_with(full_policy, kind):
    run, refused = full_policy[kind]
    assert refused == [], refused
    assert run.outcome == EXPECTED[kind]
    authorized = set().union(*run.actions.values())
    assert authorized == USED[kind], (f"the {kind} path's actions changed: now {sorted(authorized - USED[kind])}, "
                                      f"no longer {sorted(USED[kind] - authorized)}")


@pytest.mark.parametrize("action", ENFORCED)
def test_without_any_one_action_the_path_that_calls_it_fails(aws, full_policy, tmp_path, action):
    """Only the phases that took ``action`` under the full policy run (and what they need first)."""
    kind = the_kind_that_calls(action)
    baseline = full_policy[kind][0]
    phases = {phase for phase, actions in baseline.actions.items() if action in actions}
    run, refused = run_path(aws, kind, tmp_path, leave_out=(action,), only=phases)
    assert refused and set(refused) == {action}, refused
    expected = {phase: EXPECTED[kind][phase] for phase in run.outcome}
    assert run.outcome != expected, f"the {kind} path's {sorted(phases)} did as well without {action}"


def test_what_moto_cannot_enforce_is_named():
    """Every action of the policy is shown needed above, but the two moto never authorizes per call."""
    assert set(iam.actions()) == set(ENFORCED) | set(UNENFORCED)
    assert not set(ENFORCED) & set(UNENFORCED)


@pytest.mark.slow
def test_the_sagemaker_dag_runs_under_the_rendered_policy(aws, tmp_path):
    """scripts/e2e/dags/e2e_sagemaker_on_moto.py under `airflow dags test`, with the keys of a user that holds
    exactly the rendered policy: it succeeds (the task waits, streams the log, writes its insight) and the
    server refused nothing."""
    keys = aws.user()
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
           "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "scripts" / "e2e" / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONPATH": str(REPO),
           "SMDIST_LOCAL_ROOT": str(tmp_path / "root"),
           "AWS_ACCESS_KEY_ID": keys["id"], "AWS_SECRET_ACCESS_KEY": keys["secret"], "AWS_DEFAULT_REGION": REGION,
           "AWS_ENDPOINT_URL": aws.url,
           "AIRFLOW_CONN_AWS_MOTO": json.dumps({"conn_type": "aws", "login": keys["id"], "password": keys["secret"],
                                                "extra": {"endpoint_url": aws.url, "region_name": REGION}}),
           "AIRFLOW_CONN_SMDIST_MOTO": json.dumps({"conn_type": "smdist", "extra": {
               "backend": "sagemaker", "aws_conn_id": "aws_moto", "region_name": REGION}})}
    for var in ("AIRFLOW__CORE__UNIT_TEST_MODE", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
        env.pop(var, None)
    os.makedirs(env["AIRFLOW_HOME"])
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    migrate = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    run = subprocess.run([airflow, "dags", "test", "e2e_sagemaker_on_moto"], env=env, capture_output=True, text=True,
                         timeout=600)
    log = run.stdout + run.stderr
    assert run.returncode == 0 and "state=success" in log, log[-6000:]
    assert aws.server.call("denied", keys["user"]) == [], log[-6000:]
    done = set(aws.server.call("authorized", keys["user"]))
    assert {"sagemaker:CreateTrainingJob", "sagemaker:DescribeTrainingJob", "logs:DescribeLogStreams",
            "cloudwatch:GetMetricData", "s3:PutObject"} <= done, done
