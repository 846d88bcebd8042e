"""What every job operator of the provider shares: backend choice, stable job names, waiting with logs,
stopping on kill, and a small JSON result for XCom."""

from __future__ import annotations

import hashlib
import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from airflow_smdist._compat import AirflowException, BaseOperator, default_deferrable
from airflow_smdist.backends.base import OPERATIONS, RUNNING_STATES, TERMINAL_STATES, JobNotFound

if TYPE_CHECKING:
    from airflow_smdist.backends.base import Backend

NAME_LIMIT = 63
MAX_ATTEMPT_NAMES = 30
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


class SmdistJobOperator(BaseOperator):
    """Base of the provider's job operators. Subclasses set ``kind`` and implement :meth:`build_request`."""

    kind: ClassVar[str] = "training"
    name_prefix: ClassVar[str] = "smdist"
    trigger_class: ClassVar[str] = "airflow_smdist.triggers.base.SmdistJobTrigger"
    ui_color = "#b6d7a8"

    def __init__(self, *, job_name: str | None = None, backend: str | None = None,
                 smdist_conn_id: str | None = "smdist_default", aws_conn_id: str | None = None,
                 region_name: str | None = None, wait_for_completion: bool = True, poll_interval: float = 10,
                 print_logs: bool = True, stop_on_kill: bool = True, deferrable: bool | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
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
        self._running_job: str | None = None

    # -- to implement ------------------------------------------------------------------------------
    def build_request(self, job_name: str, backend_name: str, context: Any) -> dict[str, Any]:
        """Return the validated Create* request; do any upload the request relies on (it is new)."""
        raise NotImplementedError

    def result(self, description: dict[str, Any]) -> dict[str, Any]:
        """The small XCom result for a finished job."""
        raise NotImplementedError

    def persist_links(self, context: Any, job_name: str) -> None:
        """Store console links (sagemaker backend)."""

    # -- machinery ---------------------------------------------------------------------------------
    @property
    def hook(self):
        from airflow_smdist.hooks.smdist import SmdistHook

        return SmdistHook(self.smdist_conn_id, aws_conn_id=self.aws_conn_id, region_name=self.region_name)

    def get_backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.hook.get_backend(self.backend)
        return self._backend

    def base_job_name(self, context: Any) -> str:
        if self.job_name:
            return str(self.job_name)
        ti = context["ti"]
        return stable_job_name(self.name_prefix, ti.dag_id, ti.task_id, context["run_id"],
                               getattr(ti, "map_index", -1))

    def choose_job(self, backend: Backend, base: str) -> tuple[str, str]:
        """(name, action): reattach to a running or completed job of this task instance, or pick the first
        free attempt name after ones that failed or were stopped."""
        for attempt in range(1, MAX_ATTEMPT_NAMES + 1):
            name = base if attempt == 1 else f"{base}-r{attempt}"
            try:
                status = backend.describe(self.kind, name)[OPERATIONS[self.kind]["status_key"]]
            except JobNotFound:
                return name, "create"
            if status in RUNNING_STATES:
                return name, "reattach-running"
            if status == "Completed":
                return name, "reattach-completed"
            self.log.info("Job %s of an earlier try ended %s; the next attempt gets a new name.", name, status)
        raise AirflowException(f"{MAX_ATTEMPT_NAMES} attempts of job {base} ended without success; "
                               "not starting another. Give a new job_name to try again.")

    def execute(self, context: Any) -> dict[str, Any]:
        backend = self.get_backend()
        name, action = self.choose_job(backend, self.base_job_name(context))
        if action == "create":
            request = self.build_request(name, backend.name, context)
            backend.submit(self.kind, request)
            self.log.info("Started %s job %s on the %s backend.", self.kind, name, backend.name)
        elif action == "reattach-running":
            self.log.info("Reattaching to %s job %s, still running from an earlier try (no second job started).",
                          self.kind, name)
        else:
            self.log.info("%s job %s of an earlier try already completed; returning its result.", self.kind, name)
        self._running_job = name
        self.persist_links(context, name)
        if not self.wait_for_completion:
            return self.result(backend.describe(self.kind, name))
        if self.deferrable:
            as_of = time.time()
            description = backend.describe(self.kind, name)
            if description[OPERATIONS[self.kind]["status_key"]] in TERMINAL_STATES:  # done before we deferred
                return self.check_and_result(description)
            ti = context["ti"]
            self.defer(trigger=self.make_trigger(backend, name, description, as_of,
                                                 cursor_key=f"{name}/{getattr(ti, 'try_number', 0)}"),
                       method_name="execute_complete", timeout=self.deferral_timeout(description))
        description = self.wait(backend, name)
        self._running_job = None
        return self.check_and_result(description)

    # -- deferral ----------------------------------------------------------------------------------
    def make_trigger(self, backend: Backend, name: str, description: dict[str, Any] | None = None,
                     as_of: float | None = None, cursor_key: str | None = None):
        """The trigger to defer to. With the job's ``description`` (and when it was taken, ``as_of``) the
        trigger starts from that status and costs no Describe of its own."""
        import importlib

        module, _, cls = self.trigger_class.rpartition(".")
        trigger = getattr(importlib.import_module(module), cls)
        created = (description or {}).get("CreationTime")
        return trigger(job_name=name, backend=backend.name, smdist_conn_id=self.smdist_conn_id,
                       aws_conn_id=self.aws_conn_id, region_name=self.region_name, poll_interval=self.poll_interval,
                       print_logs=self.print_logs, kind=self.kind,
                       job_status=description[OPERATIONS[self.kind]["status_key"]] if description else None,
                       as_of=as_of if description else None,
                       created=created.timestamp() if hasattr(created, "timestamp") else None,
                       cursor_key=cursor_key)

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

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Back from the trigger: the same result (or error) as the non-deferred path."""
        backend = self.get_backend()
        name = event["job_name"]
        try:
            description = backend.describe(self.kind, name)
        except JobNotFound:
            raise AirflowException(f"{self.kind} job {name}: {event.get('failure_reason')}") from None
        self.log_metrics(description, name)
        if self.print_logs and description[OPERATIONS[self.kind]["status_key"]] != "Completed":
            events, _ = backend.log_events(self.kind, name)
            self._last_lines = [e.format() for e in events][-20:]
        return self.check_and_result(description)

    def log_metrics(self, description: dict[str, Any], name: str) -> None:
        """The metrics summary line (FinalMetricDataList), once per change; both wait paths log it."""
        metrics = {m["MetricName"]: m["Value"] for m in description.get("FinalMetricDataList") or []}
        if metrics and metrics != getattr(self, "_last_metrics", None):
            self.log.info("%s job %s metrics: %s", self.kind, name,
                          ", ".join(f"{k}={v:g}" for k, v in sorted(metrics.items())))
            self._last_metrics = metrics

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any):
        """A deferred wait that timed out must not leave the job running (and billing): stop it first."""
        if next_method == "__fail__" and self.stop_on_kill:
            try:
                backend = self.get_backend()
                name, action = self.choose_job(backend, self.base_job_name(context))
                if action == "reattach-running":
                    self._running_job = name
                    self.on_kill()
            except Exception as exc:  # noqa: BLE001 - the original failure is what the task reports
                self.log.warning("could not stop the job after the deferral failed: %s", exc)
        return super().resume_execution(next_method, next_kwargs, context)

    def wait(self, backend: Backend, name: str) -> dict[str, Any]:
        status_key = OPERATIONS[self.kind]["status_key"]
        cursor = None
        last_secondary = None
        while True:
            description = backend.describe(self.kind, name)
            if self.print_logs:
                cursor = self.print_new_logs(backend, name, cursor)
            self.log_metrics(description, name)
            secondary = description.get("SecondaryStatus")
            if secondary and secondary != last_secondary:
                self.log.info("%s job %s: %s / %s", self.kind, name, description[status_key], secondary)
                last_secondary = secondary
            if description[status_key] in TERMINAL_STATES:
                if self.print_logs:  # the last lines may land after the status
                    self.print_new_logs(backend, name, cursor)
                return description
            backend.wait_for_change(self.kind, name, self.poll_interval)

    def print_new_logs(self, backend: Backend, name: str, cursor: Any) -> Any:
        try:
            events, cursor = backend.log_events(self.kind, name, cursor)
        except JobNotFound:
            return cursor
        for event in events:
            self.log.info("%s", event.format())
        self._last_lines = (getattr(self, "_last_lines", []) + [e.format() for e in events])[-20:]
        return cursor

    def lineage(self) -> tuple[list[str], list[str]]:
        """(inputs, outputs) for OpenLineage: from the last job's description (see airflow_smdist.lineage)."""
        from airflow_smdist.lineage import lineage_uris

        description = getattr(self, "_last_description", None)
        return lineage_uris(self.kind, description) if description else ([], [])

    def get_openlineage_facets_on_complete(self, task_instance: Any):
        """Input and output datasets of the job, when the OpenLineage provider is installed."""
        from airflow_smdist.lineage import operator_lineage

        inputs, outputs = self.lineage()
        if not inputs and not outputs:
            return None
        return operator_lineage(inputs, outputs)

    def check_and_result(self, description: dict[str, Any]) -> dict[str, Any]:
        self._last_description = description
        status = description[OPERATIONS[self.kind]["status_key"]]
        if status != "Completed":
            reason = description.get("FailureReason") or description.get("SecondaryStatus") or status
            tail = "\n".join(getattr(self, "_last_lines", [])[-10:])
            name = description[OPERATIONS[self.kind]["name_key"]]
            raise AirflowException(f"{self.kind} job {name} ended {status}: {reason}"
                                   + (f"\nLast log lines:\n{tail}" if tail else ""))
        return self.result(description)

    def on_kill(self) -> None:
        name = self._running_job
        if not (name and self.stop_on_kill):
            return
        backend = self.get_backend()
        self.log.info("Task killed: stopping %s job %s.", self.kind, name)
        try:
            backend.stop(self.kind, name)
            deadline = time.time() + 180
            while time.time() < deadline:
                status = backend.describe(self.kind, name)[OPERATIONS[self.kind]["status_key"]]
                if status in TERMINAL_STATES:
                    self.log.info("%s job %s is %s.", self.kind, name, status)
                    return
                time.sleep(2)
            self.log.warning("%s job %s did not stop within 180 s.", self.kind, name)
        except JobNotFound:
            pass


def isoformat(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def template_sequence(*names: str) -> Sequence[str]:
    return tuple(names)
