"""The trigger a deferred SageMakerDistributedTrainingOperator waits on (coalesced polling, see base)."""

from __future__ import annotations

from airflow_smdist.triggers.base import SmdistJobTrigger


class SageMakerDistributedTrainingTrigger(SmdistJobTrigger):
    kind = "training"
