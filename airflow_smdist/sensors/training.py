"""Wait for a training job started elsewhere (e.g. by an operator with wait_for_completion=False)."""

from __future__ import annotations

from typing import Any, Sequence

from airflow_smdist._compat import AirflowException, BaseSensorOperator
from airflow_smdist.backends.base import TERMINAL_STATES


class SageMakerDistributedTrainingSensor(BaseSensorOperator):
    """Succeeds when training job ``job_name`` is Completed; fails with its FailureReason when it ends
    Failed or Stopped. Works on both backends; returns the job's small result dict via XCom."""

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

    def poke(self, context: Any):
        from airflow_smdist.hooks.smdist import SmdistHook
        from airflow_smdist.operators.training import training_result

        backend = SmdistHook(self.smdist_conn_id, aws_conn_id=self.aws_conn_id,
                             region_name=self.region_name).get_backend(self.backend)
        description = backend.describe("training", self.job_name)
        status = description["TrainingJobStatus"]
        self.log.info("training job %s: %s / %s", self.job_name, status, description.get("SecondaryStatus"))
        if status not in TERMINAL_STATES:
            return False
        if status != "Completed":
            raise AirflowException(f"training job {self.job_name} ended {status}: "
                                   f"{description.get('FailureReason') or description.get('SecondaryStatus')}")
        from airflow_smdist._compat import PokeReturnValue

        return PokeReturnValue(is_done=True, xcom_value=training_result(description, backend.name))
