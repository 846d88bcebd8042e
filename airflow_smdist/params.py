"""Params that explain themselves in Airflow's trigger form (used by the example DAGs; yours may use them).

Import-cheap: only Airflow's Param. Every Param here has a description; instance types come with a list of
proposals (free text still allowed, so any type SageMaker offers works); defaults that are ``file://`` paths
say they are the local backend's scratch space on the Airflow machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_smdist._compat import Param

#: Proposals for training instance types, CPU first, then GPU (NVIDIA) and Trainium; each one is in the botocore
#: service model of every boto3 MWAA pins (1.35 .. 1.43). Any ml.* type works.
TRAINING_INSTANCE_TYPES = (
    "ml.m5.large", "ml.m5.xlarge", "ml.m5.2xlarge", "ml.m5.4xlarge", "ml.c5.xlarge", "ml.c5.4xlarge",
    "ml.g4dn.xlarge", "ml.g4dn.12xlarge", "ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.12xlarge", "ml.g5.48xlarge",
    "ml.p3.2xlarge", "ml.p3.16xlarge", "ml.p4d.24xlarge", "ml.p5.48xlarge", "ml.trn1.32xlarge",
)
#: Proposals for processing and batch transform instance types.
PROCESSING_INSTANCE_TYPES = (
    "ml.m5.large", "ml.m5.xlarge", "ml.m5.2xlarge", "ml.m5.4xlarge", "ml.c5.xlarge", "ml.c5.4xlarge",
    "ml.r5.xlarge", "ml.r5.4xlarge", "ml.g4dn.xlarge", "ml.g5.xlarge", "ml.g5.2xlarge", "ml.p3.2xlarge",
)
INSTANCE_TYPE_PATTERN = r"^ml\.[a-z0-9-]+\.[a-z0-9]+$"
LOCAL_SCRATCH_NOTE = ("The default is the local backend's scratch space on the Airflow machine (a file:// path "
                      "there); give an s3:// prefix to run on SageMaker.")


def instance_type_param(default: str = "ml.m5.xlarge", *, what: str = "Training",
                        choices: tuple[str, ...] = TRAINING_INSTANCE_TYPES, note: str = "") -> Param:
    """An instance type: a list to pick from (incl. GPU types), free text for any other ml.* type."""
    return Param(default, type="string", examples=list(choices), pattern=INSTANCE_TYPE_PATTERN,
                 description=f"{what} instance type: pick one of the list (g*, p*: NVIDIA GPUs; trn*: Trainium) "
                             "or type any ml.* type SageMaker offers. The local backend runs every type on this "
                             "machine's CPUs." + (f" {note}" if note else ""))


def storage_param(default: str, description: str) -> Param:
    """A data or output prefix; a file:// default is marked as the local backend's scratch space."""
    if str(default).startswith("file://"):
        description = f"{description} {LOCAL_SCRATCH_NOTE}"
    return Param(default, type="string", description=description)


def role_param() -> Param:
    return Param("arn:aws:iam::000000000000:role/SageMakerExecutionRole", type="string",
                 pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$",
                 description="SageMaker execution role ARN (used by the sagemaker backend only; the local backend "
                             "ignores it).")


def deferrable_param(default: bool | None = None) -> Param:
    """Whether the run's long tasks wait in the triggerer (freeing their worker slot) or in the worker.
    The default is the deployment's ``[operators] default_deferrable``."""
    if default is None:
        from airflow_smdist._compat import default_deferrable

        default = default_deferrable()
        origin = "this deployment's [operators] default_deferrable"
    else:
        origin = "this DAG's choice"
    return Param(default, type="boolean",
                 description="Wait for jobs in the triggerer (deferrable: frees the worker slot while a job runs; "
                             f"needs a running triggerer) instead of in the task. Default: {origin}.")


def integer_param(default: int, description: str, **limits: Any) -> Param:
    return Param(default, type="integer", description=description, **limits)


#: the environment variable the local backend reads for rehearsed spot interruptions (see backends/local/job/spot.py)
SPOT_INTERRUPTIONS_ENV = "SMDIST_LOCAL_SPOT_INTERRUPTIONS"


def spot_interruptions_param(default: str = "3,3") -> Param:
    """Rehearsed managed spot interruptions of the run's spot jobs on the local backend."""
    return Param(default, type="string",
                 pattern=r"^$|^\s*(ITEM\s*(,\s*ITEM\s*)*|random:[0-9]+:[0-9]+(:[0-9.]+)?)$".replace(
                     "ITEM", r"([0-9]+(\.[0-9]+)?|checkpoint(:[1-9][0-9]*)?)"),
                 description="Local backend only: interrupt each managed spot job of this run on purpose, as "
                             "SageMaker does when capacity goes: one item per try, seconds of training or "
                             "checkpoint[:N] (right after the try's N-th checkpoint): 'checkpoint,checkpoint' "
                             "interrupts twice, each after a checkpoint was written; '3,3' twice, 3 s into each "
                             "try; or random:SEED:N. Empty: no interruption. The request is unchanged; the "
                             "sagemaker backend ignores it.")


def rehearse_spot_interruptions(param: str = "spot_interruptions") -> Callable[[Any], None]:
    """An ``on_execute_callback`` that hands the run's Param ``param`` to the local backend (as
    ``SMDIST_LOCAL_SPOT_INTERRUPTIONS`` in the task's own process, before it submits its job). The smdist
    connection's ``local_spot_interruptions`` extra, where set, still wins."""

    def callback(context: Any) -> None:
        import os

        value = str((context.get("params") or {}).get(param) or "").strip()
        if value:
            os.environ[SPOT_INTERRUPTIONS_ENV] = value
        else:
            os.environ.pop(SPOT_INTERRUPTIONS_ENV, None)

    return callback
