"""Wait for a training job started elsewhere (e.g. by an operator with wait_for_completion=False)."""

from __future__ import annotations

from airflow_smdist.sensors.base import SmdistJobSensor


class SageMakerDistributedTrainingSensor(SmdistJobSensor):
    """Succeeds when training job ``job_name`` is Completed; fails with its FailureReason when it ends
    Failed or Stopped. Works on both backends; returns the job's small result dict via XCom."""

    kind = "training"
