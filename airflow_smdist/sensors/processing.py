"""Wait for a processing job started elsewhere (e.g. by an operator with wait_for_completion=False)."""

from __future__ import annotations

from airflow_smdist.sensors.base import SmdistJobSensor


class SmdistProcessingSensor(SmdistJobSensor):
    """Succeeds when processing job ``job_name`` (PySpark or plain) is Completed; fails with its
    FailureReason (and ExitMessage) when it ends Failed or Stopped. Works on both backends; returns the job's
    small result dict via XCom (``outputs``: output name -> S3 URI). Named ``Smdist...`` because the Amazon
    provider has a ``SageMakerProcessingSensor`` (SageMaker only)."""

    kind = "processing"
