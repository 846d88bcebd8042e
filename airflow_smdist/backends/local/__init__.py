"""The ``local`` backend: runs SageMaker job requests on this machine, for real, without Docker.

One generic mechanism for every job kind: ``submit`` validates the request against botocore's model and
against what the kind's module can run here, makes the job's directory (see :mod:`.store`), and starts the
kind's supervisor detached (``python -m airflow_smdist.backends.local.job.<kind> <job dir>``). ``describe``
answers from the job's request and state files in SageMaker's Describe* shape; ``stop`` asks the
supervisor to stop; ``log_events`` reads every host's log stream.

A job kind is a module of :mod:`.job` that satisfies :class:`LocalJobKind` (``OPERATION``, the Create*
name; ``check_request(request)``, raising SpecError for what cannot run locally; ``describe(backend, request,
state)``; and the supervisor's ``main(argv)``). The job-kind registry (:mod:`airflow_smdist.kinds`,
``local_module``) names the module of each kind.

This package's root is the task side: what runs in the Airflow task, the triggerer, the CLI and the web
server (this module, :mod:`.status_source`, :mod:`.notify`, :mod:`.retention`), with the two modules the job
supervisor shares with it (:mod:`.store`, the job directory's files; :mod:`.diskspace`). The detached supervisor's
modules live in :mod:`.job`, what runs inside a simulated host in :mod:`.inhost` (see each package's docstring);
importing this package loads neither.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from airflow_smdist.backends.base import (
    CAPABILITIES,
    TERMINAL_STATES,
    BackendError,
    FileCursorStore,
    JobNotFound,
    LogEvent,
    tuning_log_events,
)
from airflow_smdist.backends.local import diskspace
from airflow_smdist.backends.local.notify import ChangeWaker
from airflow_smdist.backends.local.store import JobStore, pid_alive, read_json, read_jsonl, write_json_atomic
from airflow_smdist.kinds import kind_info, load

if TYPE_CHECKING:
    from airflow_smdist.backends.local.status_source import LocalStatusSource
    from airflow_smdist.storage import Storage

ACCOUNT = "000000000000"
log = logging.getLogger(__name__)


@runtime_checkable
class LocalJobKind(Protocol):
    """What the local backend needs of a job kind's module (``kinds.JobKindInfo.local_module``)."""

    #: the Create* operation the module runs (``CreateTrainingJob``)
    OPERATION: str

    def check_request(self, request: dict[str, Any]) -> None:
        """Raise SpecError for what the request asks that cannot run on this machine (before any file)."""

    def describe(self, backend: Any, request: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        """The Describe* response of the job from its request and its (live) state."""

    def main(self, argv: list[str] | None = None) -> int:
        """The job's detached supervisor: ``python -m <module> <job dir>``."""


#: a job without a supervisor pid file (its submitting process ended before the supervisor started) counts as
#: failed after this
HALF_MADE_GRACE_SECONDS = 30.0
#: jobs whose last-described state a backend keeps for wait_for_change (the oldest go first)
DESCRIBED_KEPT = 256
#: how often a blocking wait looks at a job's state file (one stat call) when nothing woke it before
STATE_POLL_SECONDS = 0.2


def _state_signature(job_dir: Path) -> tuple[int, int, int] | None:
    """A job's state file as a ``stat`` sees it: a supervisor rewrites it by renaming a new file over it."""
    try:
        st = os.stat(job_dir / "state.json")
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _create_time(pid: int) -> str:
    import psutil

    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except psutil.NoSuchProcess:
        return "gone"


def dt(epoch: float | None) -> datetime | None:
    """Epoch seconds as the aware datetime boto3 returns."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc) if epoch else None


def transitions_of(state: dict[str, Any]) -> list[dict[str, Any]]:
    """SecondaryStatusTransitions from the state's transitions."""
    return [{k: v for k, v in {"Status": t["status"], "StartTime": dt(t["start"]), "EndTime": dt(t.get("end")),
                               "StatusMessage": t.get("message")}.items() if v is not None}
            for t in state.get("transitions", [])]


def last_modified(state: dict[str, Any]) -> datetime | None:
    times = [t.get("end") or t["start"] for t in state.get("transitions", [])] or [state.get("created")]
    return dt(max(t for t in times if t))


@dataclass
class _Staging:
    """A job being made by ``submit``: its staging directory and what has been started for it so far."""

    dir: Path
    proc: subprocess.Popen[bytes] | None = None
    block: tuple[int, int] | None = None


class LocalBackend:
    name = "local"
    #: requests may name file:// URIs; jobs run as no IAM role (a placeholder stands in); the provider's job
    #: page; a wait of several jobs polls each (a state file read, woken at once by a change)
    capabilities = CAPABILITIES["local"]
    #: the supervisor writes lines of its own while it starts a job: a wait reads them at once
    silent_before_containers = False

    def __init__(self, root: str | os.PathLike[str] | None = None, *, region_name: str | None = None,
                 s3_endpoint_url: str | None = None, local_runtimes: dict[str, Any] | None = None,
                 local_retention: str | None = None, local_spot_interruptions: str | None = None,
                 local_instance_failures: str | None = None) -> None:
        self.store = JobStore(root)
        #: the smdist connection's rehearsal settings (see .job.spot): before SMDIST_LOCAL_SPOT_INTERRUPTIONS and
        #: SMDIST_LOCAL_INSTANCE_FAILURES; they never change a request
        self.local_spot_interruptions = local_spot_interruptions
        self.local_instance_failures = local_instance_failures
        #: the smdist connection's ``local_retention`` ("30d"): finished jobs older than it go at submit (.retention)
        self.local_retention = local_retention
        self.region = region_name or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.s3_endpoint_url = s3_endpoint_url
        #: runtimes declared for user images (the smdist connection's ``local_runtimes`` extra; see .job.runtimes)
        self.local_runtimes = dict(local_runtimes or {})
        #: each job's state file as the last describe read it (inode, mtime, size): wait_for_change's baseline
        self._described: dict[tuple[str, str], tuple[int, int, int] | None] = {}

    def kind_module(self, kind: str) -> LocalJobKind:
        info = kind_info(kind)
        try:
            module = load(info.local_module)
        except ModuleNotFoundError as e:
            if e.name != info.local_module:
                raise
            raise BackendError(f"the local backend does not run {kind} jobs yet; use backend='sagemaker'",
                               code="NotImplemented", operation=info.create_op) from None
        if not isinstance(module, LocalJobKind):
            raise TypeError(f"{info.local_module} is not a local job kind: it lacks part of "
                            "airflow_smdist.backends.local.LocalJobKind (OPERATION, check_request, describe, main)")
        return module

    # -- protocol --------------------------------------------------------------------------------
    def check(self, kind: str, request: dict[str, Any]) -> None:
        """Everything :meth:`submit` checks before it writes anything: botocore's model of the request, what
        the kind's module can run here, the runtime of its image (and of a transform's model, where that
        exists already). Raises SpecError naming the field."""
        from airflow_smdist.specs.validate import validate_request  # submit's alone: not in every supervisor

        module = self.kind_module(kind)
        validate_request(module.OPERATION, request, allow_local_uris=True)
        module.check_request(request)
        from airflow_smdist.backends.local.job.runtimes import check_image

        check_image(kind, request, self.local_runtimes)
        if kind == "transform":
            from airflow_smdist.backends.local.job.transform import check_model_image

            check_model_image(self, request)

    def submit(self, kind: str, request: dict[str, Any], *, parent: str | None = None) -> str:
        self.check(kind, request)
        rehearsal = self._rehearsal(kind, request)
        name = kind_info(kind).job_name(request)
        from airflow_smdist.backends.local.job import launcher

        isolation = launcher.isolation_mode()  # (a namespaced job's supervisor reclaims dead jobs' bridges)
        if self.store.taken(kind, name):
            raise self._name_taken(kind, name)
        staging = _Staging(self.store.stage(kind, name))
        try:
            self._make_job(kind, name, staging, request, isolation, parent, rehearsal)
            self.store.place(kind, name, staging.dir)
        except BaseException as exc:
            self._abandon(kind, name, staging)
            if isinstance(exc, FileExistsError):
                raise self._name_taken(kind, name) from None
            if diskspace.is_disk_full(exc):
                raise BackendError(diskspace.full_message(self.store.root), code="ClientError",
                                   operation=kind_info(kind).create_op) from exc
            raise
        if self.local_retention:
            from airflow_smdist.backends.local.retention import prune_after_submit

            prune_after_submit(self, self.local_retention)
        return name

    def _name_taken(self, kind: str, name: str) -> BackendError:
        return BackendError(f"Job name must be unique within an AWS account and region, and a job with this name "
                            f"already exists ({self.arn(kind, name)})", code="ValidationException",
                            operation=kind_info(kind).create_op)

    def _rehearsal(self, kind: str, request: dict[str, Any]) -> dict[str, Any] | None:
        """What the job's state keeps of the interruption rehearsal (:mod:`.job.spot`): a training job's interruptions
        and failures; a tuning job's settings, for its trials. A malformed setting is refused here."""
        from airflow_smdist.backends.local.job import spot

        if kind == "tuning":
            settings = {"spot": self.local_spot_interruptions, "failures": self.local_instance_failures}
            return {k: v for k, v in settings.items() if v} or None
        if kind != "training":
            return None
        try:
            return spot.rehearsal_state(request, self.local_spot_interruptions, self.local_instance_failures)
        except ValueError as exc:
            from airflow_smdist.specs.errors import SpecError

            raise SpecError("local_spot_interruptions", str(exc),
                            "fix the setting (environment or the smdist connection's extra).") from None

    def _make_job(self, kind: str, name: str, staging: _Staging, request: dict[str, Any], isolation: str,
                  parent: str | None, rehearsal: dict[str, Any] | None = None) -> None:
        """Everything of a job, in its staging directory: logs/, the request, its supervisor (started now, it
        waits until the job is in place) and its pid, then its loopback block and its state."""
        job_dir = staging.dir
        (job_dir / "logs").mkdir()
        diskspace.make_reserve(job_dir)  # room for the job's final state once its disk is full
        write_json_atomic(job_dir / "request.json", request)
        staging.proc = self._start_supervisor(kind, name, job_dir)
        (job_dir / "supervisor.pid").write_text(f"{staging.proc.pid} {_create_time(staging.proc.pid)}")
        staging.block = self.store.allocate_block(f"{kind}/{name}")
        now = time.time()
        state = {"status": "InProgress", "secondary_status": "Starting", "created": now,
                 "block": list(staging.block),
                 "transitions": [{"status": "Starting", "start": now, "message": "Preparing the instances"}],
                 "region": self.region, "s3_endpoint_url": self.s3_endpoint_url, "isolation": isolation,
                 "root": str(self.store.root), "runtimes": self.local_runtimes}
        if parent:
            state["parent"] = parent
        if rehearsal:
            state["rehearsal"] = rehearsal
        write_json_atomic(job_dir / "state.json", state)

    def _start_supervisor(self, kind: str, name: str, staged: Path) -> subprocess.Popen[bytes]:
        """The job's supervisor, detached; told where the job will be, where it is made and by whom, so that
        it starts only once the job is in place (or removes the staging directory if its submitter dies
        first: :func:`.store.await_placement`)."""
        env = self._supervisor_env()
        env.update(SMDIST_JOB_STAGING=str(staged), SMDIST_JOB_SUBMITTER=str(os.getpid()))
        with open(staged / "supervisor.log", "a") as log:
            return subprocess.Popen([sys.executable, "-m", kind_info(kind).local_module,
                                     str(self.store.job_dir(kind, name))],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=env)

    def _abandon(self, kind: str, name: str, staging: _Staging) -> None:
        """Undo a job that was not placed: end its waiting supervisor, free its block, remove its directory."""
        if staging.proc is not None:
            staging.proc.kill()
            staging.proc.wait()
        if staging.block is not None:
            self.store.release_block(f"{kind}/{name}", staging.block)
        shutil.rmtree(staging.dir, ignore_errors=True)

    def describe(self, kind: str, name: str) -> dict[str, Any]:
        module = self.kind_module(kind)
        request = self.store.request(kind, name)
        # the state file as read now (taken before the read: a change during it is one more change); the next
        # wait takes it out, and a long-lived backend (the triggerer's) keeps only the latest few
        self._described.pop((kind, name), None)
        self._described[(kind, name)] = _state_signature(self.store.job_dir(kind, name))
        while len(self._described) > DESCRIBED_KEPT:
            del self._described[next(iter(self._described))]
        return module.describe(self, request, self._live_state(kind, name))

    def list_tags(self, kind: str, name: str) -> list[dict[str, str]]:
        """ListTags of a job: the Tags of its request."""
        return list(self.store.request(kind, name).get("Tags") or [])

    def stop(self, kind: str, name: str) -> None:
        state = self._live_state(kind, name)
        if state["status"] in TERMINAL_STATES:
            return
        job_dir = self.store.job_dir(kind, name)
        (job_dir / "stop").touch()
        pid = self._supervisor_pid(job_dir)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)

    def wait_for_change(self, kind: str, names: str | list[str], timeout: float) -> None:
        """Return as soon as the state of the job ``names`` (or of any of several) changes (its supervisor
        rewrote ``state.json``, or exited), else after ``timeout`` seconds, whatever the poll interval says.
        Inotify on the jobs' directories and pidfds of their supervisors wake it at the change
        (:class:`.notify.ChangeWaker`); a ``stat`` per job at least every :data:`STATE_POLL_SECONDS` (a few
        microseconds) still decides, so a change inotify cannot see is seen that late at most.
        A change since this backend last described the job counts too: it is not missed for having come
        between that describe and this call."""
        names = [names] if isinstance(names, str) else list(names)
        dirs = [self.store.job_dir(kind, n) for n in names]
        pids = [p for p in (self._supervisor_pid(d) for d in dirs) if p is not None]

        def signature() -> list[tuple[int, int, int] | None]:
            return [_state_signature(d) for d in dirs]

        with ChangeWaker(dirs, pids) as waker:
            now, deadline = signature(), time.monotonic() + timeout
            start = [self._described.pop((kind, n), sig) for n, sig in zip(names, now, strict=True)]
            while now == start and all(pid_alive(p) for p in pids) and time.monotonic() < deadline:
                waker.wait(min(STATE_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
                now = signature()

    def log_events(self, kind: str, name: str, cursor: Any = None) -> tuple[list[LogEvent], Any]:
        job_dir = self.store.job_dir(kind, name)
        if not (job_dir / "state.json").exists():
            raise JobNotFound(kind, name)
        cursor = dict(cursor or {})
        if kind == "tuning":  # the tuning job's own platform lines, then every trial's hosts
            own, cursor["_own"] = self._read_logs(job_dir, cursor.get("_own"))
            trials, cursor["_trials"] = tuning_log_events(self, name, cursor.get("_trials"))
            return sorted(own + trials, key=lambda e: (e.timestamp, e.host)), cursor
        return self._read_logs(job_dir, cursor)

    @staticmethod
    def _read_logs(job_dir: Path, cursor: dict[str, Any] | None) -> tuple[list[LogEvent], dict[str, Any]]:
        """New lines of every ``logs/<host>.jsonl`` since the byte offsets in ``cursor``, merged by time."""
        cursor = dict(cursor or {})
        events: list[LogEvent] = []
        logs = job_dir / "logs"
        for path in sorted(logs.glob("*.jsonl")) if logs.is_dir() else []:
            host = path.stem
            records, cursor[host] = read_jsonl(path, int(cursor.get(host, 0)))
            events.extend(LogEvent(rec["t"], host, rec["m"]) for rec in records)
        events.sort(key=lambda e: (e.timestamp, e.host))
        return events, cursor

    def list_jobs(self, kind: str, *, name_contains: str | None = None,
                  status: str | None = None) -> list[dict[str, Any]]:
        """Summaries of the local jobs of ``kind`` (ListTrainingJobs-like: name, status, times)."""
        info = kind_info(kind)
        out: list[dict[str, Any]] = []
        for name in self.store.list(kind):
            if name_contains and name_contains not in name:
                continue
            st = self._live_state(kind, name)
            if status and st["status"] != status:
                continue
            summary: dict[str, Any] = {info.name_key: name, info.arn_key: self.arn(kind, name),
                       info.status_key: st["status"], "CreationTime": dt(st.get("created")),
                       "LastModifiedTime": last_modified(st)}
            if kind == "training" and st.get("secondary_status"):  # as ListTrainingJobs' summaries carry it
                summary["SecondaryStatus"] = st["secondary_status"]
            out.append(summary)
        return out

    def list_training_jobs_for_tuning_job(self, name: str, *, status_equals: str | None = None,
                                          sort_by: str | None = None,
                                          sort_order: str | None = None) -> list[dict[str, Any]]:
        """ListTrainingJobsForHyperParameterTuningJob: every trial's summary (see .job.tuning)."""
        from airflow_smdist.backends.local.job.tuning import list_training_jobs_for_tuning_job

        return list_training_jobs_for_tuning_job(self, name, status_equals=status_equals, sort_by=sort_by,
                                                 sort_order=sort_order)

    # -- models (CreateModel for transform jobs) ---------------------------------------------------
    def create_model(self, request: dict[str, Any]) -> str:
        from airflow_smdist.backends.local.job.transform import create_model

        return create_model(self, request)

    def describe_model(self, name: str) -> dict[str, Any]:
        from airflow_smdist.backends.local.job.transform import describe_model

        return describe_model(self, name)

    def delete_model(self, name: str) -> None:
        from airflow_smdist.backends.local.job.transform import delete_model

        delete_model(self, name)

    # -- helpers ---------------------------------------------------------------------------------
    def arn(self, kind: str, name: str) -> str:
        return kind_info(kind).arn(self.region, ACCOUNT, name)

    def job_dir(self, kind: str, name: str) -> Path:
        return self.store.job_dir(kind, name)

    # -- for the waits and the operators (the rest of the Backend protocol) ------------------------------
    def status_source(self) -> LocalStatusSource:
        """The jobs' statuses and log lines for the triggers' pollers (state and log files, in a thread)."""
        from airflow_smdist.backends.local.status_source import LocalStatusSource

        return LocalStatusSource(self)

    def status_source_key(self) -> tuple[Any, ...]:
        """Backends of the same job root share a status source in a triggerer."""
        return ("local", str(self.store.root))

    def first_log_cursor(self, created: float | None) -> Any:
        """A job's log files are read from their start."""
        return None

    def log_cursor_store(self, kind: str, name: str) -> FileCursorStore:
        """A file next to the job (it goes with the job's directory)."""
        return FileCursorStore(self.job_dir(kind, name) / "trigger-log-cursor.json")

    def storage(self) -> Storage:
        """S3 through this backend's endpoint (the connection's ``s3_endpoint_url``), and file:// locally."""
        from airflow_smdist.storage import Storage

        return Storage(endpoint_url=self.s3_endpoint_url)

    def default_code_location(self) -> str:
        """``file://<job root>/code``."""
        return f"file://{self.store.root.resolve()}/code"

    def _supervisor_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # the supervisor must import this very package, wherever it was imported from
        pkg_root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    @staticmethod
    def _supervisor_pid(job_dir: Path) -> int | None:
        """The job's supervisor's PID while that very process lives (psutil's start time tells it from a
        later process that reused the PID), else None."""
        try:
            pid, _, started = (job_dir / "supervisor.pid").read_text().strip().partition(" ")
        except FileNotFoundError:
            return None
        if not pid.isdigit() or not pid_alive(int(pid)):
            return None
        if started and _create_time(int(pid)) != started:
            return None
        return int(pid)

    def _supervisor_gone(self, job_dir: Path, state: dict[str, Any]) -> str | None:
        """Why the unfinished job ``job_dir`` has no supervisor any more (None while it has one). Jobs are
        placed with their supervisor started; one without a pid file was left half made by a submitting process that
        ended first."""
        if self._supervisor_pid(job_dir) is not None:
            return None
        if (job_dir / "supervisor.pid").exists():
            return f"the local job supervisor exited unexpectedly (see {job_dir / 'supervisor.log'})"
        if time.time() - float(state.get("created") or 0) < HALF_MADE_GRACE_SECONDS:
            return None
        return "the process that submitted this job ended before its supervisor started"

    def _settle_dead(self, kind: str, name: str, state: dict[str, Any]) -> None:
        """Write the end of a job whose supervisor died, and free what it held. Best effort: a describe never
        fails for it (a full disk, a read-only root); the state is answered as corrected, and written by a
        later describe."""
        job_dir = self.store.job_dir(kind, name)
        try:
            # its hosts ended with it (their lifeline closed); its bridge is reclaimed here
            if state.get("network"):
                from airflow_smdist.backends.local.job import hostnet

                hostnet.reclaim()
            write_json_atomic(job_dir / "state.json", state)
            self.store.release_block(f"{kind}/{name}")
        except OSError as exc:
            log.warning("%s job %s ended without its supervisor; its state could not be written (%s): "
                        "answering %s from memory", kind, name, exc, state["status"])

    def _live_state(self, kind: str, name: str) -> dict[str, Any]:
        """The state file, corrected when the supervisor died without finishing it."""
        job_dir = self.store.job_dir(kind, name)
        state = self.store.state(kind, name)
        if state["status"] in TERMINAL_STATES:
            return state
        reason = self._supervisor_gone(job_dir, state)
        if reason:
            state = read_json(job_dir / "state.json")  # it may have finished just now
            if state["status"] not in TERMINAL_STATES:
                if diskspace.looks_full(self.store.root):  # what most likely ended it
                    reason = f"{reason}; {diskspace.full_message(self.store.root)}"
                state.update(status="Failed", secondary_status="Failed", ended=time.time(),
                             failure_reason=f"InternalServerError: {reason}")
                self._settle_dead(kind, name, state)
        elif (job_dir / "stop").exists() and state["status"] == "InProgress":
            state = dict(state, status="Stopping")
        return state
