"""SageMaker instance types: accelerator counts, families, and checks against the service model.

Pure data and functions: no I/O, nothing heavy imported at module level (botocore's service model is
loaded on first use by :mod:`airflow_smdist.specs.validate`).

Where the numbers come from (each checked on 2026-12-02):

* GPU counts for p2, p3, p3dn, p4d, p4de, p5.48xlarge, g4dn and g5: the SageMaker Python SDK's own table,
  ``sagemaker/core/image_uri_config/instance_gpu_info.json`` (SDK 3.27, region us-east-1).
* g6, g6e, gr6, p5.4xlarge, p5e, p5en, p6-b200, p6e-gb200 and the Trainium device counts: AWS's
  ``aws/sagemaker-hyperpod-cli`` ``INSTANCE_RESOURCES`` table.
* g7e (NVIDIA RTX PRO 6000 Blackwell): the EC2 G7e size table (1/1/1/2/4/8 GPUs), which AWS's hyperpod CLI
  added in March 2026 (PR #390). p6-b300.48xlarge: 8 B300 GPUs (EC2 P6-B300 product page).
* Not listed, on purpose: ``ml.g7.*`` (RTX PRO 4500). The public sources disagree about its per-size GPU
  counts, so :func:`gpu_count` returns 0 for it (see :func:`is_gpu`, which still calls it a GPU type).
* Neuron cores (what the training toolkit's ``num_neurons()`` counts via ``neuron-ls``, and so what
  ``SM_NUM_NEURONS`` and torchrun's ``--nproc_per_node`` become on Trainium): 2 NeuronCore-v2 per Trainium1
  / Inferentia2 device; 4 logical cores per Trainium2 device with the Neuron SDK's default logical
  NeuronCore size of 2 (LNC=2).
"""

from __future__ import annotations

import re

from airflow_smdist.specs.errors import SpecError, close_matches

#: NVIDIA GPUs per SageMaker instance type (sources in the module docstring).
GPU_COUNTS: dict[str, int] = {
    # P2 (K80), P3 (V100), P3dn: SDK instance_gpu_info.json
    "ml.p2.xlarge": 1, "ml.p2.8xlarge": 8, "ml.p2.16xlarge": 16,
    "ml.p3.2xlarge": 1, "ml.p3.8xlarge": 4, "ml.p3.16xlarge": 8,
    "ml.p3dn.24xlarge": 8,
    # P4d / P4de (A100): SDK instance_gpu_info.json
    "ml.p4d.24xlarge": 8, "ml.p4de.24xlarge": 8,
    # P5 (H100), P5e / P5en (H200): SDK (p5.48xlarge), hyperpod CLI (p5.4xlarge, p5e, p5en)
    "ml.p5.4xlarge": 1, "ml.p5.48xlarge": 8,
    "ml.p5e.48xlarge": 8, "ml.p5en.48xlarge": 8,
    # P6 (Blackwell): hyperpod CLI (b200, gb200), EC2 P6-B300 page (b300)
    "ml.p6-b200.48xlarge": 8, "ml.p6-b300.48xlarge": 8, "ml.p6e-gb200.36xlarge": 4,
    # G4dn (T4): SDK instance_gpu_info.json
    "ml.g4dn.xlarge": 1, "ml.g4dn.2xlarge": 1, "ml.g4dn.4xlarge": 1, "ml.g4dn.8xlarge": 1,
    "ml.g4dn.16xlarge": 1, "ml.g4dn.12xlarge": 4,
    # G5 (A10G): SDK instance_gpu_info.json
    "ml.g5.xlarge": 1, "ml.g5.2xlarge": 1, "ml.g5.4xlarge": 1, "ml.g5.8xlarge": 1, "ml.g5.16xlarge": 1,
    "ml.g5.12xlarge": 4, "ml.g5.24xlarge": 4, "ml.g5.48xlarge": 8,
    # G6 (L4), G6e (L40S), Gr6 (L4): hyperpod CLI
    "ml.g6.xlarge": 1, "ml.g6.2xlarge": 1, "ml.g6.4xlarge": 1, "ml.g6.8xlarge": 1, "ml.g6.16xlarge": 1,
    "ml.g6.12xlarge": 4, "ml.g6.24xlarge": 4, "ml.g6.48xlarge": 8,
    "ml.g6e.xlarge": 1, "ml.g6e.2xlarge": 1, "ml.g6e.4xlarge": 1, "ml.g6e.8xlarge": 1, "ml.g6e.16xlarge": 1,
    "ml.g6e.12xlarge": 4, "ml.g6e.24xlarge": 4, "ml.g6e.48xlarge": 8,
    "ml.gr6.4xlarge": 1, "ml.gr6.8xlarge": 1,
    # G7e (RTX PRO 6000 Blackwell): EC2 G7e size table
    "ml.g7e.2xlarge": 1, "ml.g7e.4xlarge": 1, "ml.g7e.8xlarge": 1,
    "ml.g7e.12xlarge": 2, "ml.g7e.24xlarge": 4, "ml.g7e.48xlarge": 8,
}

#: AWS Neuron devices (Trainium / Inferentia chips) per instance type.
NEURON_DEVICE_COUNTS: dict[str, int] = {
    "ml.trn1.2xlarge": 1, "ml.trn1.32xlarge": 16, "ml.trn1n.32xlarge": 16,
    "ml.trn2.48xlarge": 16,
    "ml.inf2.xlarge": 1, "ml.inf2.8xlarge": 1, "ml.inf2.24xlarge": 6, "ml.inf2.48xlarge": 12,
}

#: NeuronCores each device of a family shows to ``neuron-ls`` (see the module docstring).
_NEURON_CORES_PER_DEVICE: dict[str, int] = {"trn1": 2, "trn1n": 2, "trn2": 4, "inf2": 2}

# SMDDP (the SageMaker distributed data parallelism library) runs only on these instance types.
# Sources: the SageMaker Python SDK's fw_utils.SM_DATAPARALLEL_SUPPORTED_INSTANCE_TYPES (p3.16xlarge,
# p3dn.24xlarge, p4d.24xlarge, p4de.24xlarge, plus "local_gpu") and the Developer Guide page
# distributed-data-parallel-support ("Supported Instance Types": the same four in the 2023 snapshot read here).
# ml.p5.48xlarge is added for SMDDP v2: the SDK accepts smdistributed on p5 only together with
# torch_distributed ("SMModelParallel and SMDataParallel currently do not support p5 instances."), which
# airflow_smdist.specs.distribution enforces.
SMDDP_SUPPORTED_INSTANCE_TYPES = (
    "ml.p3.16xlarge",
    "ml.p3dn.24xlarge",
    "ml.p4d.24xlarge",
    "ml.p4de.24xlarge",
    "ml.p5.48xlarge",
)

#: Which request member carries the instance type, per operation (botocore service model paths).
INSTANCE_TYPE_MEMBERS: dict[str, str] = {
    "CreateTrainingJob": "ResourceConfig.InstanceType",
    "CreateProcessingJob": "ProcessingResources.ClusterConfig.InstanceType",
    "CreateTransformJob": "TransformResources.InstanceType",
}
_OPERATION_ALIASES = {
    "training": "CreateTrainingJob",
    "tuning": "CreateTrainingJob",
    "CreateHyperParameterTuningJob": "CreateTrainingJob",
    "processing": "CreateProcessingJob",
    "transform": "CreateTransformJob",
}

# ml.<family>.<size>; the family may carry a dash (p6-b200, m7i-flex). Same shape as the SDK's
# fw_utils regex ^ml[\._]([a-z\d\-]+)\.?\w*$, but the size is required.
_TYPE_RE = re.compile(r"^ml\.([a-z0-9][a-z0-9\-]*)\.([a-z0-9\-]+)$")
_SIZE_RE = re.compile(r"^(\d+)?xlarge$")


def family(instance_type: str) -> str:
    """The instance family: ``"ml.g5.12xlarge"`` -> ``"g5"``, ``"ml.p6-b200.48xlarge"`` -> ``"p6-b200"``.
    Returns ``""`` for anything that is not shaped like ``ml.<family>.<size>``."""
    match = _TYPE_RE.match(instance_type) if isinstance(instance_type, str) else None
    return match.group(1) if match else ""


def _size_rank(instance_type: str) -> float:
    """Orders sizes within a family: medium < large < xlarge < 2xlarge < ... < 48xlarge."""
    match = _TYPE_RE.match(instance_type)
    size = match.group(2) if match else ""
    named = {"nano": 0.05, "micro": 0.1, "small": 0.2, "medium": 0.25, "large": 0.5}
    if size in named:
        return named[size]
    m = _SIZE_RE.match(size)
    if m:
        return float(m.group(1) or 1)
    return float("inf")


def gpu_count(instance_type: str) -> int:
    """NVIDIA GPUs of ``instance_type``; 0 for CPU, Trainium/Inferentia and unknown types."""
    return GPU_COUNTS.get(instance_type, 0)


def neuron_device_count(instance_type: str) -> int:
    """Trainium / Inferentia devices (chips) of ``instance_type``; 0 for everything else."""
    return NEURON_DEVICE_COUNTS.get(instance_type, 0)


def neuron_core_count(instance_type: str) -> int:
    """NeuronCores the training toolkit sees (``SM_NUM_NEURONS``); 0 without Neuron devices."""
    return neuron_device_count(instance_type) * _NEURON_CORES_PER_DEVICE.get(family(instance_type), 0)


def default_processes_per_host(instance_type: str) -> int:
    """Processes a SageMaker launcher starts per host when nobody says otherwise.

    The training toolkit's rule (``runner.py``: "Default to single process for CPU"): one per GPU, else
    one per NeuronCore on Trainium (the toolkit's torchrun driver uses ``SM_NUM_NEURONS`` there), else 1.
    """
    return gpu_count(instance_type) or neuron_core_count(instance_type) or 1


def is_gpu(instance_type: str) -> bool:
    """True for NVIDIA GPU instance types.

    Known types come from :data:`GPU_COUNTS`; a type not in the table counts as GPU when its family starts
    with ``p`` or ``g``, which is the SageMaker SDK's own test (``fw_utils._is_gpu_instance``). So a new
    family such as ``ml.g7`` is a GPU type even though :func:`gpu_count` does not know how many it has.
    """
    if gpu_count(instance_type) > 0:
        return True
    fam = family(instance_type)
    return bool(fam) and fam[0] in "pg"


def is_trainium(instance_type: str) -> bool:
    """True for Trainium (``ml.trn*``) types: the SDK's ``fw_utils._is_trainium_instance`` test."""
    return family(instance_type).startswith("trn")


def multi_gpu_alternative(instance_type: str) -> str | None:
    """The smallest instance type of the same family with more than one GPU.

    ``ml.g5.xlarge`` -> ``ml.g5.12xlarge``; ``ml.p3.2xlarge`` -> ``ml.p3.8xlarge``. None when
    ``instance_type`` already has more than one GPU, or its family has no multi-GPU size in the table.
    "Smallest" means fewest GPUs, then the smallest size.
    """
    if gpu_count(instance_type) > 1:
        return None
    fam = family(instance_type)
    if not fam:
        return None
    candidates = [t for t, n in GPU_COUNTS.items() if n > 1 and family(t) == fam]
    if not candidates:
        return None
    return min(candidates, key=lambda t: (GPU_COUNTS[t], _size_rank(t)))


def single_gpu_types(family_name: str) -> list[str]:
    """The single-GPU types of a family, smallest first (for advice about idle GPUs)."""
    return sorted((t for t, n in GPU_COUNTS.items() if n == 1 and family(t) == family_name), key=_size_rank)


def check_instance_type(instance_type: str, field: str, operation: str = "CreateTrainingJob") -> str:
    """Raise SpecError naming ``field`` unless ``instance_type`` is a valid instance type for ``operation``.

    The valid values are the enum of the operation's instance-type member in botocore's SageMaker service
    model (``ResourceConfig.InstanceType``, ``ProcessingResources.ClusterConfig.InstanceType``,
    ``TransformResources.InstanceType``). ``operation`` is an API name or one of ``training``, ``tuning``,
    ``processing``, ``transform``. The SDK's local-mode types (``local``, ``local_gpu``) are rejected too:
    the local backend simulates real ``ml.*`` hosts, so it takes the type the job would run on in SageMaker.
    Returns ``instance_type``.
    """
    op = _OPERATION_ALIASES.get(operation, operation)
    if op not in INSTANCE_TYPE_MEMBERS:
        raise ValueError(f"unknown operation {operation!r}; use one of {sorted(INSTANCE_TYPE_MEMBERS)}")
    if not isinstance(instance_type, str) or not instance_type:
        raise SpecError(field, f"must be an instance type string such as 'ml.m5.xlarge', not {instance_type!r}.",
                        "give an ml.* instance type.")
    if instance_type in ("local", "local_gpu"):
        raise SpecError(
            field,
            f"{instance_type!r} is the SageMaker SDK's local-mode marker, not an instance type.",
            "give the real type the job runs on in SageMaker (for example 'ml.m5.xlarge', or "
            "'ml.g5.xlarge' for GPU); the local backend simulates hosts of that type, so the same request "
            "runs unchanged on both backends.",
        )
    from airflow_smdist.specs.validate import enum_values

    allowed = enum_values(op, INSTANCE_TYPE_MEMBERS[op])
    if instance_type not in allowed:
        close = close_matches(instance_type, allowed, n=1)
        fix = f"did you mean '{close[0]}'?" if close else f"use one of the {len(allowed)} types {op} accepts."
        kind = op[len("Create"):-len("Job")].lower()
        raise SpecError(field, f"{instance_type!r} is not an instance type SageMaker offers for {kind} jobs.", fix)
    return instance_type
