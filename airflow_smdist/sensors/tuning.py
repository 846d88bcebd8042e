"""Wait for a tuning job started elsewhere (e.g. by SmdistTuningOperator with wait_for_completion=False)."""

from __future__ import annotations

from typing import Any

from airflow_smdist.sensors.base import SmdistJobSensor


class SmdistTuningSensor(SmdistJobSensor):
    """Succeeds when tuning job ``job_name`` is Completed; fails with its FailureReason when it ends Failed
    or Stopped. Works on both backends; returns the tuning job's small result (best training job, its
    hyperparameters, objective value and model artifact) via XCom. Named ``Smdist...`` because the Amazon
    provider has a ``SageMakerTuningSensor``."""

    kind = "tuning"

    def status_line(self, description: dict[str, Any]) -> str:
        counters = description.get("TrainingJobStatusCounters") or {}
        return (f"{description['HyperParameterTuningJobStatus']} (training jobs: "
                + (", ".join(f"{k} {v}" for k, v in counters.items() if v) or "none yet") + ")")
