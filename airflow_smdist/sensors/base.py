"""What the provider's sensors share: wait for a job of one kind started elsewhere (an operator with
``wait_for_completion=False``, another DAG, the console), on either backend, and return the same small
result the operator returns."""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from airflow_smdist._compat import AirflowException, BaseSensorOperator, PokeReturnValue
from airflow_smdist.backends.base import OPERATIONS, TERMINAL_STATES


class SmdistJobSensor(BaseSensorOperator):
    """Succeeds when job ``job_name`` is Completed; fails with its FailureReason when it ends Failed or
    Stopped. Subclasses set ``kind`` and implement :meth:`result`."""

    kind: ClassVar[str] = "training"
    template_fields: Sequence[str] = ("job_name", "backend")

    def __init__(self, *, job_name: str, backend: str | None = None, smdist_conn_id: str | None = "smdist_default",
                 aws_conn_id: str | None = None, region_name: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 30)
        super().__init__(**kwargs)
        self.job_name = job_name
        self.backend = backend
        self.smdist_conn_id = smdist_conn_id
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def result(self, description: dict[str, Any], backend) -> dict[str, Any]:
        raise NotImplementedError

    def status_line(self, description: dict[str, Any]) -> str:
        status = description[OPERATIONS[self.kind]["status_key"]]
        secondary = description.get("SecondaryStatus")
        return f"{status} / {secondary}" if secondary else status

    def failure_reason(self, description: dict[str, Any]) -> str:
        return description.get("FailureReason") or description.get("SecondaryStatus") or \
            description[OPERATIONS[self.kind]["status_key"]]

    def poke(self, context: Any):
        from airflow_smdist.hooks.smdist import SmdistHook

        backend = SmdistHook(self.smdist_conn_id, aws_conn_id=self.aws_conn_id,
                             region_name=self.region_name).get_backend(self.backend)
        description = backend.describe(self.kind, self.job_name)
        status = description[OPERATIONS[self.kind]["status_key"]]
        self.log.info("%s job %s: %s", self.kind, self.job_name, self.status_line(description))
        if status not in TERMINAL_STATES:
            return False
        if status != "Completed":
            raise AirflowException(f"{self.kind} job {self.job_name} ended {status}: {self.failure_reason(description)}")
        return PokeReturnValue(is_done=True, xcom_value=self.result(description, backend))
