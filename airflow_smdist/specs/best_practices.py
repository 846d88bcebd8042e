"""Distributed-training advice: scale up before out, checkpoint multi-host jobs, scale the learning rate.

:func:`check_training` returns :class:`Advice` for choices that run but waste money or progress, and raises
SpecError for choices that cannot work. :func:`scale_learning_rate` applies the linear scaling rule with
gradual warm-up (Goyal et al., 2017) or the square-root rule, and :func:`world_size` counts the processes the
SageMaker launchers start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.instances import default_processes_per_host, gpu_count, is_gpu, is_trainium, \
    multi_gpu_alternative


@dataclass(frozen=True)
class Advice:
    """One piece of advice about a job. ``level`` is ``"warning"`` (likely costs money, time or progress)
    or ``"info"``; ``code`` is a stable identifier (``scale-up-first``...) for filtering."""

    level: Literal["warning", "info"]
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.level} [{self.code}]: {self.message}"


def _positive_int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(field, f"must be a positive integer, not {value!r}.", "give 1 or more.")
    return value


def world_size(instance_type: str, instance_count: int, distribution: dict[str, Any] | None) -> int:
    """Processes (data-parallel workers) in the job: hosts x processes per host.

    Processes per host follow the training toolkit's launchers (``sagemaker_training/runner.py``): MPI's
    ``processes_per_host`` if given; else one per GPU, or per NeuronCore on Trainium, or 1 on CPU. A job
    with no launcher, or with ``parameter_server`` (one worker process per host), counts one per host.
    ``multi_worker_mirrored_strategy`` runs one process per host that drives every GPU, so it counts the
    GPUs (its replicas), which is what batch-size arithmetic needs. For model parallelism this is the
    total process count, not the data-parallel degree.
    """
    from airflow_smdist.specs.distribution import processes_per_host, strategy_of

    hosts = _positive_int(instance_count, "instance_count")
    strategy = strategy_of(distribution)
    if strategy in (None, "parameter_server"):
        return hosts
    per_host = processes_per_host(distribution) or default_processes_per_host(instance_type)
    return hosts * per_host


def check_training(
    *,
    instance_type: str,
    instance_count: int,
    distribution: dict[str, Any] | None,
    checkpoint_s3_uri: str | None,
    algorithm: str | None = None,
    instance_groups: list[dict[str, Any]] | None = None,
    spot: bool = False,
) -> list[Advice]:
    """Best-practice checks for a training job. Raises SpecError for hard errors (including every
    :func:`airflow_smdist.specs.distribution.distribution_hyperparameters` error, such as SMDDP on an
    unsupported instance type); returns the advice list otherwise.

    * ``scale-up-first`` (warning): more than one host of a single-GPU type when the family has a multi-GPU
      size. GPUs inside one instance exchange gradients over NVLink/PCIe, far faster than the network between
      instances, and fewer hosts means fewer that can fail. Skipped for built-in algorithms that use one GPU
      per instance (:mod:`airflow_smdist.specs.builtin_algorithms`).
    * ``no-checkpoint`` (warning): a managed spot job (``spot``) on several hosts without
      ``checkpoint_s3_uri``: spot capacity is taken back as a matter of course, and each interruption then
      restarts the job from scratch. (Any job's run that turns out long without checkpoints is told so after
      it ends, by its insight: a short test is not warned before it starts.)
    * ``torch-distributed-cpu`` (warning): torch_distributed on a CPU instance type. It runs (gloo; the local
      backend does exactly this), but the SageMaker SDK only supports it on GPU and Trainium and refuses it.
    * ``strategy-not-enabled`` (info): a strategy key present without ``"enabled": True`` does nothing.

    ``instance_groups`` (``ResourceConfig.InstanceGroups``) is passed on to the distribution validation for
    heterogeneous clusters; without it a ``distribution["instance_groups"]`` key is left to
    ``distribution_hyperparameters`` (which the training builder calls with the groups) and not re-checked.
    """
    from airflow_smdist.specs.distribution import STRATEGIES, distribution_hyperparameters, strategy_of

    count = _positive_int(instance_count, "instance_count")
    advice: list[Advice] = []
    to_check = distribution
    if instance_groups is None and isinstance(distribution, dict) and "instance_groups" in distribution:
        to_check = {k: v for k, v in distribution.items() if k != "instance_groups"}
    distribution_hyperparameters(to_check, instance_type=instance_type, instance_groups=instance_groups)
    strategy = strategy_of(distribution)

    uses_multi_gpu = True
    if algorithm is not None:
        from airflow_smdist.specs.builtin_algorithms import get_algorithm

        uses_multi_gpu = get_algorithm(algorithm).multi_gpu

    alternative = multi_gpu_alternative(instance_type)
    if count > 1 and gpu_count(instance_type) == 1 and alternative and uses_multi_gpu:
        n_alt = gpu_count(alternative)
        advice.append(Advice(
            "warning", "scale-up-first",
            f"{count} x {instance_type} puts one GPU on each of {count} hosts. Scale up before scaling out: "
            f"{alternative} has {n_alt} GPUs in one host, which exchange gradients over NVLink/PCIe instead of "
            f"the network between instances, and fewer hosts means fewer that can fail "
            f"(for {count} GPUs: {math.ceil(count / n_alt)} x {alternative}).",
        ))
    if spot and count > 1 and not checkpoint_s3_uri:
        advice.append(Advice(
            "warning", "no-checkpoint",
            f"this managed spot job runs on {count} hosts without checkpoint_s3_uri: each interruption (a lost "
            "host) loses the whole job's progress; set checkpoint_s3_uri and checkpoint from one rank (rank 0) "
            "to /opt/ml/checkpoints, so a resumed job continues instead of starting over.",
        ))
    td_enabled = isinstance(distribution, dict) and isinstance(distribution.get("torch_distributed"), dict) \
        and distribution["torch_distributed"].get("enabled") is True
    if td_enabled and not is_gpu(instance_type) and not is_trainium(instance_type):
        advice.append(Advice(
            "warning", "torch-distributed-cpu",
            f"torch_distributed on {instance_type} (no GPU): SageMaker's Python SDK only supports "
            "torch_distributed on GPU and Trainium instances and refuses this configuration. The request is "
            "valid and torchrun runs one gloo process per host; for GPU speed pick a GPU type.",
        ))
    if isinstance(distribution, dict):
        for key in STRATEGIES:
            options = distribution.get(key)
            if key == "smdistributed" and isinstance(options, dict):
                for sub, sub_options in options.items():
                    if isinstance(sub_options, dict) and sub_options.get("enabled") is not True:
                        advice.append(_not_enabled(f"smdistributed.{sub}"))
            elif isinstance(options, dict) and options.get("enabled") is not True:
                advice.append(_not_enabled(key))
        if strategy is None and count > 1 and any(k in distribution for k in STRATEGIES):
            advice.append(Advice("info", "no-launcher",
                                 f"no strategy is enabled: each of the {count} hosts runs one independent process."))
    return advice


def channels_matching_output(request: dict[str, Any]) -> list[Advice]:
    """``channel-matches-output`` (warning): an S3Prefix channel whose prefix the job's output path starts
    with. S3Prefix matches every key that starts with it, folder or not (``s3://b/data`` also matches
    ``s3://b/data-output/...``), so the models and outputs of this and earlier jobs become training data of
    the next run. SageMaker runs it all the same; the local backend too."""
    output = str((request.get("OutputDataConfig") or {}).get("S3OutputPath") or "")
    advice = []
    for channel in request.get("InputDataConfig") or []:
        source = (channel.get("DataSource") or {}).get("S3DataSource") or {}
        uri = str(source.get("S3Uri") or "")
        if not output or not uri or source.get("S3DataType", "S3Prefix") != "S3Prefix":
            continue
        if output.startswith(uri):
            advice.append(Advice(
                "warning", "channel-matches-output",
                f"channel {channel.get('ChannelName')!r} ({uri}) is a prefix of the job's output path {output}: "
                "S3Prefix takes every key that starts with it, so what this and earlier jobs write there becomes "
                "this channel's data in the next run. End the channel's prefix with '/' and keep the output "
                "outside it.",
            ))
    return advice


def _not_enabled(name: str) -> Advice:
    return Advice("info", "strategy-not-enabled",
                  f"distribution.{name} is present but not enabled, so it does nothing; add \"enabled\": True "
                  "to use it.")


@dataclass(frozen=True)
class LRScaling:
    """The result of :func:`scale_learning_rate`."""

    rule: str
    base_learning_rate: float
    base_batch_size: int
    per_device_batch_size: int
    world_size: int
    global_batch_size: int
    scale_factor: float
    learning_rate: float
    warmup_epochs: float
    warmup_start_learning_rate: float

    def hyperparameters(self, lr_name: str = "learning_rate", warmup_name: str = "warmup_epochs") -> dict[str, Any]:
        """``{lr_name: learning_rate, warmup_name: warmup_epochs}``, to merge into the job's hyperparameters."""
        return {lr_name: self.learning_rate, warmup_name: self.warmup_epochs}

    def describe(self) -> str:
        """One line showing the computation."""
        factor = (f"{self.global_batch_size}/{self.base_batch_size}" if self.rule == "linear"
                  else f"sqrt({self.global_batch_size}/{self.base_batch_size})")
        line = (f"{self.rule} rule: global batch {self.per_device_batch_size} x {self.world_size} workers = "
                f"{self.global_batch_size}; learning rate {self.base_learning_rate:g} x {factor} "
                f"= {self.learning_rate:g}")
        if self.warmup_epochs:
            line += (f", warmed up linearly from {self.warmup_start_learning_rate:g} over "
                     f"{self.warmup_epochs:g} epochs")
        else:
            line += ", no warm-up (the learning rate does not grow)"
        source = "Goyal et al. 2017" if self.rule == "linear" else "Krizhevsky 2014; Hoffer et al. 2017"
        return f"{line} ({source})"


def scale_learning_rate(
    *,
    base_learning_rate: float,
    base_batch_size: int,
    per_device_batch_size: int,
    world_size: int,
    warmup_epochs: float = 5,
    rule: str = "linear",
) -> LRScaling:
    """Scale a learning rate tuned at ``base_batch_size`` to the job's global batch.

    Global batch = ``per_device_batch_size`` x ``world_size``; k = global / base batch.

    * ``rule="linear"``: "When the minibatch size is multiplied by k, multiply the learning rate by k", with
      gradual warm-up from the base learning rate to k x base over the first epochs (5 in the paper)
      -- Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", 2017. For SGD.
    * ``rule="sqrt"``: multiply by sqrt(k), which keeps the variance of the gradient estimate constant
      -- Krizhevsky, "One weird trick for parallelizing convolutional neural networks", 2014; Hoffer et al.,
      "Train longer, generalize better", 2017. Often the better start for adaptive optimizers (Adam...).

    When k <= 1 the learning rate does not grow, so ``warmup_epochs`` is 0. Raises SpecError with field
    ``lr_scaling.<argument>`` for non-positive numbers or an unknown rule.
    """
    def positive(value: Any, name: str, integer: bool) -> None:
        bad = isinstance(value, bool) or not isinstance(value, int if integer else (int, float))
        if bad or not value > 0 or (not integer and not math.isfinite(value)):
            kind = "a positive integer" if integer else "a positive number"
            raise SpecError(f"lr_scaling.{name}", f"must be {kind}, not {value!r}.", f"give {kind}.")

    positive(base_learning_rate, "base_learning_rate", integer=False)
    positive(base_batch_size, "base_batch_size", integer=True)
    positive(per_device_batch_size, "per_device_batch_size", integer=True)
    positive(world_size, "world_size", integer=True)
    if isinstance(warmup_epochs, bool) or not isinstance(warmup_epochs, (int, float)) or warmup_epochs < 0 \
            or not math.isfinite(warmup_epochs):
        raise SpecError("lr_scaling.warmup_epochs", f"must be a number >= 0, not {warmup_epochs!r}.",
                        "give the warm-up length in epochs (0 for none).")
    if rule not in ("linear", "sqrt"):
        raise SpecError("lr_scaling.rule", f"{rule!r} is not a scaling rule.",
                        "use 'linear' (SGD; Goyal et al. 2017) or 'sqrt' (adaptive optimizers).")

    global_batch = per_device_batch_size * world_size
    ratio = global_batch / base_batch_size
    factor = ratio if rule == "linear" else math.sqrt(ratio)
    return LRScaling(
        rule=rule,
        base_learning_rate=float(base_learning_rate),
        base_batch_size=base_batch_size,
        per_device_batch_size=per_device_batch_size,
        world_size=world_size,
        global_batch_size=global_batch,
        scale_factor=factor,
        learning_rate=base_learning_rate * factor,
        warmup_epochs=warmup_epochs if factor > 1 else 0,
        warmup_start_learning_rate=float(base_learning_rate),
    )
