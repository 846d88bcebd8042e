"""What the provider's sensors share: wait for jobs started elsewhere (an operator with
``wait_for_completion=False``, another DAG, the console), on either backend, and return the same small
result the operator returns. Each poke is one look through :class:`~airflow_smdist.lifecycle.JobLifecycle`
(the same Describe with throttling backoff, the same failure reason, the same error)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_smdist._compat import BaseSensorOperator, PokeReturnValue
from airflow_smdist.kinds import kind_info
from airflow_smdist.lifecycle import JobLifecycle, is_throttling


class SmdistSensorBase(BaseSensorOperator):
    """Backend and lifecycle of a sensor over jobs of ``kind``."""

    kind: str = "training"

    def __init__(self, *, backend: str | None = None, smdist_conn_id: str | None = "smdist_default",
                 aws_conn_id: str | None = None, region_name: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 30)
        super().__init__(**kwargs)
        self.backend = backend
        self.smdist_conn_id = smdist_conn_id
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self._lifecycle: JobLifecycle | None = None

    @property
    def lifecycle(self) -> JobLifecycle:
        if self._lifecycle is None or self._lifecycle.kind != self.kind:
            from airflow_smdist.hooks.smdist import SmdistHook

            backend = SmdistHook(self.smdist_conn_id, aws_conn_id=self.aws_conn_id,
                                 region_name=self.region_name).get_backend(self.backend)
            self._lifecycle = JobLifecycle(backend, self.kind, log=self.log, print_logs=False)
        return self._lifecycle

    def describe_all(self, names: Sequence[str]) -> list[dict[str, Any]] | None:
        """The descriptions of ``names``; None when the service kept throttling for a whole poke interval
        (the next poke tries again)."""
        try:
            return [self.lifecycle.describe(name, give_up_after=float(self.poke_interval)) for name in names]
        except Exception as exc:
            if not is_throttling(exc):
                raise
            self.log.warning("The %s API is throttling; trying again at the next poke: %s", self.backend, exc)
            return None


class SmdistJobSensor(SmdistSensorBase):
    """Succeeds when job ``job_name`` is Completed; fails with its FailureReason when it ends Failed or
    Stopped. Subclasses set ``kind``; used directly, ``kind=`` names any kind of the registry (the sensor of a
    kind without its own). The result is the kind's (the registry's ``result_function``)."""

    template_fields: Sequence[str] = ("job_name", "backend")

    def __init__(self, *, job_name: str, kind: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        if kind is not None:
            self.kind = kind_info(kind).name  # an unknown kind is refused here, naming the kinds there are

    def result(self, description: dict[str, Any], backend: Any) -> dict[str, Any]:
        return kind_info(self.kind).result(description, backend)

    def status_line(self, description: dict[str, Any]) -> str:
        status = self.lifecycle.status(description)
        secondary = description.get("SecondaryStatus")
        return f"{status} / {secondary}" if secondary else status

    def poke(self, context: Any) -> bool | PokeReturnValue:
        lifecycle = self.lifecycle
        described = self.describe_all([self.job_name])
        if described is None:
            return False
        description = described[0]
        self.log.info("%s job %s: %s", self.kind, self.job_name, self.status_line(description))
        if not lifecycle.ended(description):
            return False
        return PokeReturnValue(is_done=True, xcom_value=self.result(lifecycle.check(description), lifecycle.backend))
