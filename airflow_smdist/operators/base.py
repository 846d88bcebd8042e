"""What every job operator of the provider shares: backend choice, stable job names, waiting with logs,
stopping on kill, and a small JSON result for XCom."""

from __future__ import annotations

import hashlib
import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_smdist._compat import BaseOperator, default_deferrable
from airflow_smdist.kinds import MAX_ATTEMPT_NAMES, kind_info

if TYPE_CHECKING:  # imported where a job is run, not where a DAG file is parsed
    from airflow_smdist.backends.base import Backend
    from airflow_smdist.lifecycle import JobLifecycle, Owner
    from airflow_smdist.hooks.smdist import SmdistHook
    from airflow_smdist.kinds import JobKind

NAME_LIMIT = 63
#: added to a job's own time limits (StoppingCondition) to bound a deferred wait: uploads, queueing
DEFERRAL_MARGIN_SECONDS = 3600


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-zA-Z0-9]", "-", text)).strip("-") or "job"


def stable_job_name(prefix: str, dag_id: str, task_id: str, run_id: str, map_index: int = -1,
                    limit: int = NAME_LIMIT) -> str:
    """The same name for every try of one task instance (dag, task, run, map index), unique across them.

    SageMaker job names are unique per account and region and jobs cannot be deleted, so a retry must
    find the job its earlier try started rather than start a second one."""
    digest = hashlib.sha1(f"{dag_id}\x00{task_id}\x00{run_id}\x00{map_index}".encode()).hexdigest()[:10]
    head = _slug(f"{prefix}-{task_id}")[: limit - len(digest) - 1 - 4]  # room for "-" and "-r30" suffixes
    return f"{head.rstrip('-')}-{digest}"


#: the role the local backend writes into requests when none is given (it runs nothing as it); never sent to AWS
LOCAL_ROLE = "arn:aws:iam::000000000000:role/SageMakerExecutionRole"


def require_role(operator: Any, backend: Backend | str) -> None:
    """An operator's ``role`` for the backend (or backend name) that runs it, checked before anything is
    uploaded or created: a backend whose jobs run as an IAM role (sagemaker) needs a real one (never the local
    placeholder); one that runs nothing as a role (local) takes the placeholder for a missing one."""
    from airflow_smdist.backends.base import capabilities

    role = getattr(operator, "role", None)
    if not capabilities(backend).iam_role:
        if not role:
            operator.role = LOCAL_ROLE
        return
    if not role or role == LOCAL_ROLE:
        from airflow_smdist.specs.errors import SpecError

        raise SpecError("role", "the sagemaker backend runs the job as an IAM role, and "
                        + ("none was given." if not role else f"{role} is the local backend's placeholder."),
                        "pass role='arn:aws:iam::<account>:role/<SageMaker execution role>' (or set the DAG's "
                        "role Param).")


class SmdistJobOperator(BaseOperator):
    """Base of the provider's job operators. Subclasses set ``kind`` and implement :meth:`build_request`.

    ``execute`` is a short script over :class:`~airflow_smdist.lifecycle.JobLifecycle`: start (or
    reattach), then wait, defer or return, then the result or the error."""

    #: a class attribute; an instance may set its own (a fan-out that runs processing jobs)
    kind: JobKind = "training"
    name_prefix: ClassVar[str] = "smdist"
    trigger_class: ClassVar[str] = "airflow_smdist.triggers.base.SmdistJobTrigger"
    ui_color = "#b6d7a8"
    #: the API's limit on this kind's job names, and what the lifecycle appends to a base name ("-r30")
    name_limit: ClassVar[int] = NAME_LIMIT
    name_reserve: int = len(f"-r{MAX_ATTEMPT_NAMES}")

    def __init__(self, *, job_name: str | None = None, backend: str | None = None,
                 smdist_conn_id: str | None = "smdist_default", aws_conn_id: str | None = None,
                 region_name: str | None = None, wait_for_completion: bool = True, poll_interval: float = 10,
                 print_logs: bool = True, stop_on_kill: bool = True, deferrable: bool | None = None,
                 rerun_on_clear: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: a task instance the user clears runs its job again (True), or returns the result of the job its
        #: cleared run completed (False). Retries always reattach to (or return) their task's own job.
        self.rerun_on_clear = rerun_on_clear
        self._owner: Owner | None = None
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self.job_name = job_name
        self.backend = backend
        self.smdist_conn_id = smdist_conn_id
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.wait_for_completion = wait_for_completion
        self.poll_interval = poll_interval
        self.print_logs = print_logs
        self.stop_on_kill = stop_on_kill
        self._backend: Backend | None = None
        self._lifecycle: JobLifecycle | None = None
        #: the running task instance (``context["ti"]``, set by :meth:`own`): a deferral seeds its cursor XCom
        self._task_instance: Any = None

    # -- to implement ------------------------------------------------------------------------------
    def build_request(self, job_name: str, backend_name: str, context: Any) -> dict[str, Any]:
        """Return the validated Create* request; do any upload the request relies on (it is new)."""
        raise NotImplementedError

    def check_before_upload(self, request: dict[str, Any]) -> None:
        """Refuse ``request`` as the backend that will run it would (e.g. Pipe mode on the local backend),
        before anything it relies on is uploaded: a refused job leaves no objects behind."""
        self.get_backend().check(self.kind, request)

    def result(self, description: dict[str, Any]) -> dict[str, Any]:
        """The small XCom result for a finished job (default: the kind's result function)."""
        return kind_info(self.kind).result(description, self.get_backend())

    def persist_links(self, context: Any, job_name: str) -> None:
        """Store the job's console links (shown for sagemaker jobs only: see operators/links.py)."""
        from airflow_smdist.operators.links import persist_console_links

        persist_console_links(self, context, job_name)

    def store_no_links(self, context: Any) -> None:
        """First thing in ``execute``: each console link's XCom, empty (no link shown), so that a task refused
        before its job has them too: Airflow 3 reads every extra link's XCom when a task ends, and logs an
        error-level "XCom not found" for each missing one. The job's links replace them (:meth:`persist_links`).
        (Not in ``pre_execute``, which runs again when a deferred task resumes.)"""
        from airflow_smdist.operators.links import SmdistConsoleLink

        if not self.do_xcom_push:
            return
        for link in self.operator_extra_links:
            if isinstance(link, SmdistConsoleLink):
                try:
                    context["ti"].xcom_push(key=link.key, value={})
                except Exception:  # a link is never a reason to fail the task
                    self.log.debug("could not store an empty %s link", link.name, exc_info=True)

    # -- machinery ---------------------------------------------------------------------------------
    def pre_execute(self, context: Any) -> None:
        """``deferrable`` is a template field, so a run can choose it (e.g. "{{ params.deferrable }}"):
        rendered, it is coerced here, before anything starts and on every resume."""
        super().pre_execute(context)
        self.deferrable = as_bool(self.deferrable, "deferrable")

    @property
    def hook(self) -> SmdistHook:
        from airflow_smdist.hooks.smdist import SmdistHook

        return SmdistHook(self.smdist_conn_id, aws_conn_id=self.aws_conn_id, region_name=self.region_name)

    def get_backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.hook.get_backend(self.backend)
        return self._backend

    @property
    def lifecycle(self) -> JobLifecycle:
        """The lifecycle of this task's jobs (made on first use, for the operator's current kind)."""
        if self._lifecycle is None or self._lifecycle.kind != self.kind:
            from airflow_smdist.lifecycle import JobLifecycle

            self._lifecycle = JobLifecycle(self.get_backend(), self.kind, log=self.log,
                                           poll_interval=self.poll_interval, print_logs=self.print_logs,
                                           owner=self._owner, rerun_on_clear=self.rerun_on_clear)
        return self._lifecycle

    def own(self, context: Any) -> None:
        """Before anything else: this task instance owns the jobs it makes (their tags) and may take over
        only its own; a job_name too long for the attempt names it may need is refused now."""
        from airflow_smdist.lifecycle import Owner

        self.check_job_name()
        self._owner = Owner.of(context, getattr(self, "retries", 0) or 0)
        self._task_instance = context["ti"]
        if self._lifecycle is not None:
            self._lifecycle.owner = self._owner

    def check_job_name(self) -> None:
        if not self.job_name:
            return
        name, room = str(self.job_name), self.name_limit - self.name_reserve
        if len(name) > room:
            from airflow_smdist.specs.errors import SpecError

            raise SpecError("job_name", f"{name!r} has {len(name)} characters; a {self.kind} job name holds "
                            f"{self.name_limit}, and retries and re-runs append up to {self.name_reserve} "
                            "(e.g. '-r30'), so the task could never be retried.",
                            f"use at most {room} characters.")

    @property
    def _running_job(self) -> str | None:
        """The job this task waits for (the last one started or reattached and not yet ended)."""
        running = self._lifecycle.running if self._lifecycle is not None else []
        return running[-1] if running else None

    @_running_job.setter
    def _running_job(self, name: str | None) -> None:
        if name:
            self.lifecycle.track(name)

    @property
    def _last_lines(self) -> list[str]:
        return list(self._lifecycle.last_lines) if self._lifecycle is not None else []

    def base_job_name(self, context: Any) -> str:
        if self.job_name:
            return str(self.job_name)
        ti = context["ti"]
        return stable_job_name(self.name_prefix, ti.dag_id, ti.task_id, context["run_id"],
                               getattr(ti, "map_index", -1))

    def choose_job(self, backend: Backend, base: str) -> tuple[str, str]:
        """(name, action): see :meth:`JobLifecycle.choose`."""
        started = self.lifecycle.choose(base)
        return started.name, started.action

    def start_job(self, context: Any, base: str) -> str:
        """Create the job of this task instance under ``base`` or reattach to it; its name."""
        self.own(context)
        lifecycle = self.lifecycle
        backend_name = lifecycle.backend.name

        def build(name: str) -> dict[str, Any]:
            require_role(self, backend_name)  # before anything is uploaded
            return self.build_request(name, backend_name, context)

        return lifecycle.start(base, build).name

    def execute(self, context: Any) -> dict[str, Any]:
        self.store_no_links(context)
        name = self.start_job(context, self.base_job_name(context))
        self.persist_links(context, name)
        if not self.wait_for_completion:
            return self.result(self.lifecycle.describe(name))
        return self.check_and_result(self.wait_or_defer(name))

    def wait_or_defer(self, name: str, method_name: str = "execute_complete",
                      kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ended job's description: waited for here, or (deferrable) after the trigger, in
        ``method_name`` (this call then does not return)."""
        lifecycle = self.lifecycle
        if self.deferrable:
            as_of = time.time()
            description = lifecycle.describe(name)
            if lifecycle.ended(description):  # done before we deferred
                lifecycle.untrack(name)
                return description
            trigger = self.make_trigger(lifecycle.backend, name, description, as_of)
            self.seed_log_cursor(lifecycle.backend, trigger.cursor_key)
            self.defer(trigger=trigger, method_name=method_name, kwargs=kwargs,
                       timeout=self.deferral_timeout(description))
        return lifecycle.wait(name)

    # -- deferral ----------------------------------------------------------------------------------
    def make_trigger(self, backend: Backend, name: str, description: dict[str, Any] | None = None,
                     as_of: float | None = None) -> Any:
        """The trigger to defer to. Given the job's ``description`` and when it was taken (``as_of``), the
        trigger starts from that status and makes no Describe of its own. ``cursor_key`` is new for every
        deferral: a trigger rebuilt from its kwargs (a triggerer restart, or moved to another triggerer) resumes
        the kept log cursor (airflow_smdist.triggers.cursor), a later deferral (a retry) prints the job's log
        afresh into its own task log."""
        import importlib
        import uuid

        module, _, cls = self.trigger_class.rpartition(".")
        trigger = getattr(importlib.import_module(module), cls)
        created: Any = (description or {}).get("CreationTime")
        return trigger(job_name=name, backend=backend.name, smdist_conn_id=self.smdist_conn_id,
                       aws_conn_id=self.aws_conn_id, region_name=self.region_name, poll_interval=self.poll_interval,
                       print_logs=self.print_logs, kind=self.kind,
                       job_status=kind_info(self.kind).status(description) if description else None,
                       as_of=as_of if description else None,
                       created=created.timestamp() if hasattr(created, "timestamp") else None,
                       cursor_key=uuid.uuid4().hex)

    def deferral_timeout(self, description: dict[str, Any]) -> timedelta | None:
        """The job's own limits plus a margin (not a fixed count of polls); None when the task's
        execution_timeout already bounds it."""
        if self.execution_timeout is not None:
            return None
        stopping = description.get("StoppingCondition") or {}
        limit = max(int(stopping.get("MaxRuntimeInSeconds") or 0), int(stopping.get("MaxWaitTimeInSeconds") or 0))
        if not limit:
            limit = int((description.get("HyperParameterTuningJobConfig", {}).get("ResourceLimits") or {})
                        .get("MaxRuntimeInSeconds") or 0)
        return timedelta(seconds=(limit or 86400) + DEFERRAL_MARGIN_SECONDS)

    def describe_after_trigger(self, event: dict[str, Any]) -> dict[str, Any]:
        """Back from the trigger: the job's description (and, when it did not complete, its last log lines
        for the error)."""
        from airflow_smdist.backends.base import JobNotFound

        lifecycle = self.lifecycle
        name = event["job_name"]
        try:
            description = lifecycle.describe(name)
        except JobNotFound:
            raise lifecycle.gone(name, event.get("failure_reason")) from None
        lifecycle.report(name, description)  # the metrics summary line the blocking wait logs
        if self.print_logs and lifecycle.status(description) != "Completed":
            lifecycle.fetch_last_lines(name)
        return description

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Back from the trigger: the same result (or error) as the non-deferred path."""
        return self.check_and_result(self.describe_after_trigger(event))

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        """A deferred wait that timed out must not leave the job running (and billing): stop it first. Back from
        the trigger, its log cursor's XCom goes (the task's XComs show its result only)."""
        self.forget_log_cursor(context)
        if next_method == "__fail__" and self.stop_on_kill:
            try:
                self.own(context)
                started = self.lifecycle.choose(self.base_job_name(context))
                if started.action == "reattach-running":
                    self.lifecycle.track(started.name)
                    self.on_kill()
            except Exception as exc:  # noqa: BLE001 - the original failure is what the task reports
                self.log.warning("could not stop the job after the deferral failed: %s", exc)
        return super().resume_execution(next_method, next_kwargs, context)

    def seed_log_cursor(self, backend: Backend, cursor_key: str) -> None:
        """Before deferring: write the record the trigger will keep its log cursor in (its task instance's XCom,
        ``airflow_smdist.triggers.cursor``), with no cursor yet, where the trigger will use that store. The
        trigger's first read then finds it: Airflow 3's XCom client logs an error-level "XCom not found" in the
        triggerer's log for every read of a missing XCom. Best effort: without it, that one line is all."""
        from airflow_smdist.triggers.cursor import XCOM_KEY, cursor_record, kept_in_xcom

        ti = self._task_instance
        if not self.print_logs or not kept_in_xcom(ti, backend):
            return
        try:
            ti.xcom_push(key=XCOM_KEY, value=cursor_record(cursor_key, None))
        except Exception as exc:  # noqa: BLE001 - the trigger starts without it, at the cost of one log line
            self.log.debug("could not seed the trigger's log cursor XCom: %s", exc)

    def forget_log_cursor(self, context: Any) -> None:
        """Delete the XCom in which the trigger kept its log cursor (``airflow_smdist.triggers.cursor``): one call,
        best effort (a new try starts without XComs anyway)."""
        if not self.print_logs:
            return
        from airflow_smdist._compat import task_xcom_delete
        from airflow_smdist.triggers.cursor import XCOM_KEY

        try:
            task_xcom_delete(context["ti"], XCOM_KEY)
        except Exception as exc:  # noqa: BLE001 - a leftover cursor harms nothing
            self.log.debug("could not delete the trigger's log cursor XCom: %s", exc)

    def lineage(self) -> tuple[list[str], list[str]]:
        """(inputs, outputs) for OpenLineage: from the last job's description (see airflow_smdist.lineage)."""
        description = self._lifecycle.last_description if self._lifecycle is not None else None
        return kind_info(self.kind).lineage(description) if description else ([], [])

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Input and output datasets of the job, when the OpenLineage provider is installed."""
        from airflow_smdist.lineage import operator_lineage

        inputs, outputs = self.lineage()
        if not inputs and not outputs:
            return None
        return operator_lineage(inputs, outputs)

    def check_and_result(self, description: dict[str, Any]) -> dict[str, Any]:
        """The result of a completed job; :class:`~airflow_smdist.lifecycle.JobFailed` with its reason and
        last log lines otherwise."""
        return self.result(self.lifecycle.check(description))

    def on_kill(self) -> None:
        """Stop every job of this task that is still running (each waited for, at most 180 s)."""
        if self.stop_on_kill and self._lifecycle is not None and self._lifecycle.running:
            self._lifecycle.stop()


def as_bool(value: Any, name: str) -> bool:
    """A rendered template field as a bool: True/False, or the strings Jinja renders them as."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", "", "none"):
        return False
    from airflow_smdist.specs.errors import SpecError

    raise SpecError(name, f"{value!r} is not a boolean.", "give true or false (e.g. a boolean Param).")


def isoformat(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value

