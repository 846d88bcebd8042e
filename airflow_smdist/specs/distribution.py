"""The SageMaker Python SDK v2 ``distribution=`` argument, turned into the hyperparameters the SDK sends.

A framework estimator (``PyTorch``, ``TensorFlow``, ``HuggingFace``) does not send ``distribution`` to the
API: it validates it (``sagemaker/fw_utils.py``) and turns it into ``sagemaker_*`` hyperparameters
(``EstimatorBase``/``Framework._distribution_configuration`` in ``estimator.py``,
``PyTorch._pytorch_distribution_configuration``, ``TensorFlow._distribution_configuration``), which the
framework containers' training toolkits read to pick a launcher (torchrun, mpirun, SMDDP, parameter
server...). :func:`distribution_hyperparameters` does the same, so a DAG author can keep writing the dicts
that AWS's documentation and examples use. The values returned are raw Python values; the training
builder JSON-encodes every hyperparameter, as the SDK's ``_json_encode_hyperparameters`` does.

``distribution`` -> hyperparameters (the SDK's; contracts file section 2.1):

* ``{"torch_distributed": {"enabled": True}}`` -> ``sagemaker_torch_distributed_enabled``,
  ``sagemaker_instance_type``.
* ``{"pytorchddp": {"enabled": True}}`` -> ``sagemaker_pytorch_ddp_enabled``, ``sagemaker_instance_type``
  (see below).
* ``{"mpi": {"enabled": True, "processes_per_host": P, "custom_mpi_options": "..."}}`` ->
  ``sagemaker_mpi_enabled``, ``sagemaker_mpi_num_of_processes_per_host`` (only if given),
  ``sagemaker_mpi_custom_mpi_options`` (always; default ``""``).
* ``{"smdistributed": {"dataparallel": {"enabled": True}}}`` -> ``sagemaker_distributed_dataparallel_enabled``,
  ``sagemaker_instance_type``, ``sagemaker_distributed_dataparallel_custom_mpi_options``.
* ``{"smdistributed": {"modelparallel": {...}}, "mpi": {...}}`` (SMP v1) -> ``mp_parameters`` (the dict),
  ``sagemaker_distributed_dataparallel_enabled: False``, ``sagemaker_instance_type``, plus the MPI keys.
* ``{"torch_distributed": ..., "smdistributed": ...}`` (SMP v2; SMDDP on p5) -> the smdistributed keys plus
  ``sagemaker_torch_distributed_enabled`` and ``sagemaker_instance_type``.
* ``{"parameter_server": {"enabled": True}}`` -> ``sagemaker_parameter_server_enabled``.
* ``{"multi_worker_mirrored_strategy": {"enabled": True}}`` ->
  ``sagemaker_multi_worker_mirrored_strategy_enabled``.
* ``{"pytorchxla": {"enabled": True}}`` -> ``sagemaker_pytorch_xla_multi_worker_enabled``.
* ``{"instance_groups": ["name"]}`` -> ``sagemaker_distribution_instance_groups`` (the list of names).

Where this module departs from SDK v2.257 on purpose:

* ``pytorchddp``: SDK v2.257's ``PyTorch.__init__`` rewrites ``{"pytorchddp": ...}`` into
  ``{"smdistributed": {"dataparallel": ...}}``, so it sends ``sagemaker_distributed_dataparallel_enabled``
  and subjects the job to SMDDP's framework-version list. The PyTorch training toolkit still honours
  ``sagemaker_pytorch_ddp_enabled`` (``LAUNCH_PYTORCH_DDP_ENV_NAME``, "Invoking SMDataParallel for native PT
  DDP job"), which runs plain PyTorch DDP on any instance. **We emit ``sagemaker_pytorch_ddp_enabled``**:
  it is what older SDKs sent, it works with older containers, and it is not tied to SMDDP's instance types,
  so the same request also runs on CPU instances and on the local backend.
* ``torch_distributed`` on CPU instances: the SDK raises "Currently torch_distributed is supported only for
  GPU and Trainium instances." **We allow it**: the training toolkit's torchrun launcher starts one process
  per host when there is no GPU, PyTorch's gloo backend trains on CPUs, and the local backend runs exactly
  this. :func:`airflow_smdist.specs.best_practices.check_training` says so as a warning instead.
* Framework-version lists (``SM_DATAPARALLEL_SUPPORTED_FRAMEWORK_VERSIONS``,
  ``TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS``) are not enforced: the SDK skips them when an
  ``image_uri`` is given and they lag the containers; the image lookup rejects versions with no image.
* Unknown option keys (``{"mpi": {"process_per_host": 8}}``) are errors; the SDK silently ignores them.
* ``sagemaker_distribution_instance_groups`` is sent whenever the job uses instance groups; the SDK
  drops it on its torch_distributed-only and pytorchddp paths.
* ``mp_parameters`` must be a dict (the SDK also takes a path to a JSON file; this module does no I/O).
"""

from __future__ import annotations

from typing import Any, cast

from airflow_smdist.specs.errors import SpecError, close_matches
from airflow_smdist.specs.instances import SMDDP_SUPPORTED_INSTANCE_TYPES, family, is_trainium

#: The strategy keys the SDK v2 ``distribution=`` dict can hold (plus ``instance_groups``).
STRATEGIES = (
    "torch_distributed",
    "pytorchddp",
    "smdistributed",
    "mpi",
    "parameter_server",
    "multi_worker_mirrored_strategy",
    "pytorchxla",
)

#: smdistributed sub-strategies (fw_utils.SMDISTRIBUTED_SUPPORTED_STRATEGIES).
SMDISTRIBUTED_STRATEGIES = ("dataparallel", "modelparallel")

# Hyperparameter names (estimator.py / pytorch/estimator.py / tensorflow/estimator.py constants).
HP_TORCH_DISTRIBUTED = "sagemaker_torch_distributed_enabled"
HP_PYTORCH_DDP = "sagemaker_pytorch_ddp_enabled"
HP_MPI = "sagemaker_mpi_enabled"
HP_MPI_PROCESSES_PER_HOST = "sagemaker_mpi_num_of_processes_per_host"
HP_MPI_CUSTOM_OPTIONS = "sagemaker_mpi_custom_mpi_options"
HP_SMDDP = "sagemaker_distributed_dataparallel_enabled"
HP_SMDDP_CUSTOM_OPTIONS = "sagemaker_distributed_dataparallel_custom_mpi_options"
HP_INSTANCE_TYPE = "sagemaker_instance_type"
HP_MP_PARAMETERS = "mp_parameters"
HP_PARAMETER_SERVER = "sagemaker_parameter_server_enabled"
HP_MWMS = "sagemaker_multi_worker_mirrored_strategy_enabled"
HP_PYTORCH_XLA = "sagemaker_pytorch_xla_multi_worker_enabled"
HP_INSTANCE_GROUPS = "sagemaker_distribution_instance_groups"

_OPTIONS: dict[str, tuple[str, ...]] = {
    "torch_distributed": ("enabled",),
    "pytorchddp": ("enabled",),
    "mpi": ("enabled", "processes_per_host", "custom_mpi_options"),
    "parameter_server": ("enabled",),
    "multi_worker_mirrored_strategy": ("enabled",),
    "pytorchxla": ("enabled",),
}
_SMD_OPTIONS: dict[str, tuple[str, ...]] = {
    "dataparallel": ("enabled", "custom_mpi_options"),
    "modelparallel": ("enabled", "parameters"),
}

#: Which strategies each framework's estimator and container act on (SDK v2 estimators; TensorFlow's
#: handles parameter_server, mpi, smdistributed and multi_worker_mirrored_strategy; PyTorch's and Hugging
#: Face's torch_distributed, pytorchddp, smdistributed, mpi and pytorchxla; MXNet's parameter_server, mpi).
FRAMEWORK_STRATEGIES: dict[str, tuple[str, ...]] = {
    "pytorch": ("torch_distributed", "pytorchddp", "smdistributed", "mpi", "pytorchxla"),
    "huggingface": ("torch_distributed", "pytorchddp", "smdistributed", "mpi", "pytorchxla"),
    "tensorflow": ("parameter_server", "mpi", "smdistributed", "multi_worker_mirrored_strategy"),
    "mxnet": ("parameter_server", "mpi"),
}

# The launcher keys: each starts the script its own way, so a job enables one (see _check_launchers).
_LAUNCHERS = ("torch_distributed", "pytorchddp", "mpi", "parameter_server", "multi_worker_mirrored_strategy",
              "pytorchxla")


def _enabled(options: Any) -> bool:
    return isinstance(options, dict) and options.get("enabled", False) is True


def _smd(distribution: dict[str, Any], name: str) -> dict[str, Any]:
    smd = distribution.get("smdistributed")
    if isinstance(smd, dict) and isinstance(smd.get(name), dict):
        return cast("dict[str, Any]", smd[name])
    return {}


def strategy_of(distribution: dict[str, Any] | None) -> str | None:
    """The strategy that runs the job: ``"torch_distributed"``, ``"pytorchddp"``,
    ``"smdistributed_dataparallel"``, ``"smdistributed_modelparallel"``, ``"mpi"``, ``"parameter_server"``,
    ``"multi_worker_mirrored_strategy"``, ``"pytorchxla"``, or None (a plain single process per host).

    Only enabled strategies count. smdistributed wins over the launcher it rides on: SMP v2 is
    ``torch_distributed`` + ``smdistributed.modelparallel`` and is launched by torchrun, SMP v1 rides on
    ``mpi``; both report ``"smdistributed_modelparallel"`` (look at the ``torch_distributed`` key to tell
    them apart). SMDDP on p5 (``torch_distributed`` + ``smdistributed.dataparallel``) reports
    ``"smdistributed_dataparallel"``. Does not validate; call :func:`distribution_hyperparameters` for that.
    """
    if not isinstance(distribution, dict) or not distribution:
        return None
    if _enabled(_smd(distribution, "modelparallel")):
        return "smdistributed_modelparallel"
    if _enabled(_smd(distribution, "dataparallel")):
        return "smdistributed_dataparallel"
    for name in ("pytorchddp", "torch_distributed", "mpi", "parameter_server", "multi_worker_mirrored_strategy",
                 "pytorchxla"):
        if _enabled(distribution.get(name)):
            return name
    return None


def processes_per_host(distribution: dict[str, Any] | None) -> int | None:
    """``mpi.processes_per_host`` when MPI is enabled and it is given, else None (the launcher's default:
    one process per GPU, see :func:`airflow_smdist.specs.instances.default_processes_per_host`)."""
    if not isinstance(distribution, dict):
        return None
    mpi = distribution.get("mpi")
    if isinstance(mpi, dict) and _enabled(mpi) and mpi.get("processes_per_host"):
        return cast("int | None", mpi["processes_per_host"])
    return None


def distribution_hyperparameters(
    distribution: dict[str, Any] | None,
    *,
    instance_type: str | None,
    framework: str | None = None,
    framework_version: str | None = None,
    py_version: str | None = None,
    entry_point: str | None = None,
    instance_groups: list[dict[str, Any]] | None = None,
) -> dict[str, object]:
    """Validate an SDK v2 ``distribution`` dict and return the hyperparameters the SDK would send for it.

    ``instance_type`` is the job's ``ResourceConfig.InstanceType``. For a heterogeneous cluster pass
    ``instance_groups`` (``ResourceConfig.InstanceGroups``: dicts with ``InstanceGroupName``,
    ``InstanceType``, ``InstanceCount``) and name the training group in ``distribution["instance_groups"]``
    (optional when there is exactly one group), as the SDK's ``validate_distribution`` requires; the checks
    then apply to that group's instance type, which is also what ``sagemaker_instance_type`` carries when
    ``instance_type`` is None. ``framework`` (``pytorch``, ``tensorflow``, ``huggingface``, ``mxnet``),
    ``framework_version``, ``py_version`` and ``entry_point`` enable the checks that depend on them.

    Returns ``{}`` for None or ``{}``. Raises :class:`SpecError` naming the offending member
    (``distribution.mpi.processes_per_host``...) with the SDK's own wording where the SDK has a check. See
    the module docstring for the table and for where (and why) this departs from the SDK; the two that
    matter most: ``pytorchddp`` yields ``sagemaker_pytorch_ddp_enabled`` (not the SMDDP rewrite of SDK
    v2.257), and ``torch_distributed`` is accepted on CPU instance types.
    """
    if distribution is None or distribution == {}:
        return {}
    if not isinstance(distribution, dict):
        raise SpecError("distribution", f"must be a dict such as {{'torch_distributed': {{'enabled': True}}}}, "
                                        f"not {type(distribution).__name__}.",
                        "give a dict keyed by strategy name.")
    _check_keys(distribution)
    names, group_types = _resolve_instance_groups(distribution, instance_groups)
    types_to_check = group_types or ([instance_type] if instance_type else [])
    if not types_to_check:
        raise SpecError("instance_type", "is required to build distribution hyperparameters.",
                        "pass the job's instance type (or instance_groups for a heterogeneous cluster).")
    hp_instance_type = instance_type or types_to_check[0]

    _check_launchers(distribution, names)
    _check_framework(distribution, framework, framework_version)
    for t in types_to_check:
        _check_for_instance_type(distribution, t)
    _check_torch_distributed(distribution, py_version, entry_point)
    mp_parameters = _check_smdistributed(distribution, py_version)
    _check_mpi(distribution)

    return _hyperparameters(distribution, hp_instance_type, names, mp_parameters)


# ---------------------------------------------------------------------------------------------- checks


def _check_keys(distribution: dict[str, Any]) -> None:
    for key, options in distribution.items():
        if key == "instance_groups":
            continue
        if key not in STRATEGIES:
            close = close_matches(str(key), STRATEGIES + ("instance_groups",), n=1)
            fix = f"did you mean '{close[0]}'?" if close else f"use one of {', '.join(STRATEGIES)}."
            raise SpecError(f"distribution.{key}", "is not a distribution strategy.", fix)
        if not isinstance(options, dict):
            # fw_utils.validate_smdistributed: "smdistributed strategy requires a dictionary"
            raise SpecError(f"distribution.{key}", f"{key} strategy requires a dictionary, not "
                                                   f"{type(options).__name__}.",
                            f"write {{'{key}': {{'enabled': True}}}}.")
        if key == "smdistributed":
            _check_smdistributed_shape(options)
            continue
        _check_options(f"distribution.{key}", options, _OPTIONS[key])


def _check_options(field: str, options: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for opt in options:
        if opt not in allowed:
            close = close_matches(str(opt), allowed, n=1)
            fix = f"did you mean '{close[0]}'?" if close else f"use only {', '.join(allowed)}."
            raise SpecError(f"{field}.{opt}", "is not an option of this strategy (the SDK would ignore it, "
                                              "silently changing how the job runs).", fix)
    if "enabled" in options and not isinstance(options["enabled"], bool):
        raise SpecError(f"{field}.enabled", f"must be True or False, not {options['enabled']!r}.",
                        "write 'enabled': True.")


def _check_smdistributed_shape(smd: dict[str, Any]) -> None:
    # fw_utils.validate_smdistributed
    if len(smd) > 1:
        raise SpecError("distribution.smdistributed",
                        "Cannot use more than 1 smdistributed strategy.",
                        f"choose one of the supported strategies: {list(SMDISTRIBUTED_STRATEGIES)}.")
    for strategy, options in smd.items():
        if strategy not in SMDISTRIBUTED_STRATEGIES:
            close = close_matches(str(strategy), SMDISTRIBUTED_STRATEGIES, n=1)
            fix = f"did you mean '{close[0]}'?" if close else \
                f"use one of the supported strategies: {list(SMDISTRIBUTED_STRATEGIES)}."
            raise SpecError(f"distribution.smdistributed.{strategy}",
                            f"Invalid smdistributed strategy provided: {strategy}.", fix)
        if not isinstance(options, dict):
            raise SpecError(f"distribution.smdistributed.{strategy}",
                            f"requires a dictionary, not {type(options).__name__}.",
                            f"write {{'{strategy}': {{'enabled': True}}}}.")
        _check_options(f"distribution.smdistributed.{strategy}", options, _SMD_OPTIONS[strategy])


def _resolve_instance_groups(distribution: dict[str, Any], instance_groups: list[dict[str, Any]] | None
                             ) -> tuple[list[str], list[str]]:
    """fw_utils.validate_distribution's heterogeneous-cluster rules. Returns (training group names, their
    instance types); both empty for an ordinary cluster."""
    names = distribution.get("instance_groups")
    field = "distribution.instance_groups"
    if names is None:
        names = []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SpecError(field, f"must be a list of instance group names, not {names!r}.",
                        "write 'instance_groups': ['<InstanceGroupName>'].")
    if instance_groups is None:
        if names:
            raise SpecError(field, "Instance groups not specified in the estimator! The distribution names "
                                   "instance groups but the job defines none.",
                            "pass instance_groups (ResourceConfig.InstanceGroups) or drop this key.")
        return [], []
    by_name: dict[str, dict[str, Any]] = {}
    for i, group in enumerate(instance_groups):
        if not isinstance(group, dict) or not isinstance(group.get("InstanceGroupName"), str):
            raise SpecError(f"instance_groups[{i}]", "must be a dict with InstanceGroupName, InstanceType and "
                                                     "InstanceCount.", "give ResourceConfig.InstanceGroups entries.")
        by_name[group["InstanceGroupName"]] = group
    if len(names) > len(instance_groups):
        raise SpecError(field, "Train instance groups oversubscribed! It names more groups than the job has.",
                        "name one of the job's instance groups.")
    if len(instance_groups) == 1 and not names:
        names = [instance_groups[0]["InstanceGroupName"]]  # the SDK fills in the only group
    elif len(instance_groups) > 1 and len(names) != 1:
        raise SpecError(field, "Distribution should only contain one instance group name! With several "
                               "instance groups, the distribution names the one that trains.",
                        f"set it to one of {sorted(by_name)}.")
    types = []
    for name in names:
        if name not in by_name:
            close = close_matches(name, list(by_name), n=1)
            raise SpecError(field, f"Invalid training instance group {name}!",
                            f"did you mean '{close[0]}'?" if close else f"use one of {sorted(by_name)}.")
        types.append(by_name[name].get("InstanceType"))
    return names, [t for t in types if isinstance(t, str)]


def _check_launchers(distribution: dict[str, Any], group_names: list[str]) -> None:
    """One launcher per job. The combinations SageMaker's containers run are torch_distributed +
    smdistributed (SMP v2, and SMDDP on p5) and mpi + smdistributed.modelparallel (SMP v1)."""
    enabled = [k for k in _LAUNCHERS if _enabled(distribution.get(k))]
    smddp = _enabled(_smd(distribution, "dataparallel"))
    smp = _enabled(_smd(distribution, "modelparallel"))
    if "pytorchddp" in distribution and "smdistributed" in distribution:
        # pytorch/estimator.py
        raise SpecError("distribution", "Cannot use both pytorchddp and smdistributed distribution options "
                                        "together.",
                        "use pytorchddp for plain PyTorch DDP, or smdistributed.dataparallel for SMDDP.")
    launchers = enabled + (["smdistributed.dataparallel"] if smddp else [])
    allowed = (
        len(launchers) <= 1
        or set(launchers) == {"torch_distributed", "smdistributed.dataparallel"}
        or (set(launchers) == {"torch_distributed", "mpi"} and smp)
    )
    if not allowed:
        raise SpecError(
            "distribution",
            f"enables more than one launcher ({', '.join(launchers)}); a training container starts the "
            "script with exactly one.",
            "keep one. The only combinations SageMaker runs are torch_distributed + smdistributed (SMP v2, "
            "SMDDP on p5) and mpi + smdistributed.modelparallel (SMP v1).",
        )
    if smp and not (_enabled(distribution.get("mpi")) or _enabled(distribution.get("torch_distributed"))):
        # estimator.py (before SMP v2): "Cannot use Model Parallelism without MPI enabled!"
        raise SpecError("distribution.smdistributed.modelparallel",
                        "needs a launcher: Cannot use Model Parallelism without MPI or torch_distributed enabled.",
                        "add 'torch_distributed': {'enabled': True} (SMP v2, PyTorch >= 2.0) or "
                        "'mpi': {'enabled': True, 'processes_per_host': <GPUs per host>} (SMP v1).")
    if group_names and not (launchers or smp):
        # estimator.py _distribution_configuration
        raise SpecError("distribution.instance_groups",
                        "Don't set training instance groups while no distribution strategies enabled!",
                        "enable a strategy, or drop instance_groups from the distribution.")


def _check_framework(distribution: dict[str, Any], framework: str | None, framework_version: str | None) -> None:
    if not framework:
        return
    supported = FRAMEWORK_STRATEGIES.get(framework.lower())
    if supported is None:
        return
    for key in distribution:
        if key in STRATEGIES and key not in supported:
            raise SpecError(f"distribution.{key}",
                            f"the {framework} training containers do not run the {key} strategy.",
                            f"use one of {', '.join(supported)}.")
    if (framework.lower() == "tensorflow" and framework_version
            and _enabled(distribution.get("multi_worker_mirrored_strategy"))
            and _version_tuple(framework_version) < (2, 9)):
        # tensorflow/estimator.py _validate_mwms_config
        raise SpecError("distribution.multi_worker_mirrored_strategy",
                        f"Multi Worker Mirrored Strategy is only supported from framework_version 2.9 but "
                        f"received {framework_version}.", "use TensorFlow 2.9 or later.")


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for p in str(version).split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _check_for_instance_type(distribution: dict[str, Any], instance_type: str) -> None:
    strategies = [k for k in distribution if k != "instance_groups"]
    if is_trainium(instance_type):
        # fw_utils.validate_distribution_for_instance_type
        if len(strategies) > 1:
            raise SpecError("distribution", "Multiple distribution strategies are not supported for Trainium "
                                            f"instances ({instance_type}).",
                            "use only {'torch_distributed': {'enabled': True}}.")
        if strategies and strategies[0] != "torch_distributed":
            raise SpecError(f"distribution.{strategies[0]}",
                            f"Provided distribution strategy {strategies[0]} is not supported for Trainium "
                            f"instances ({instance_type}).",
                            "use {'torch_distributed': {'enabled': True}}, the only strategy Trainium supports.")
    if _enabled(_smd(distribution, "dataparallel")) and instance_type not in SMDDP_SUPPORTED_INSTANCE_TYPES:
        raise SpecError("distribution.smdistributed.dataparallel",
                        f"SMDDP (the SageMaker distributed data parallelism library) runs only on "
                        f"{', '.join(SMDDP_SUPPORTED_INSTANCE_TYPES)}; {instance_type} is not one of them.",
                        "use one of those instance types, or {'torch_distributed': {'enabled': True}} (PyTorch "
                        "DDP over NCCL/gloo), which runs on any instance type.")
    td = _enabled(distribution.get("torch_distributed"))
    smd = distribution.get("smdistributed")
    if isinstance(smd, dict) and smd and family(instance_type) in ("p5", "p5e", "p5en") and \
            instance_type.endswith(".48xlarge") and not td:
        # estimator.py: "SMModelParallel and SMDataParallel currently do not support p5 instances." unless
        # torch_distributed is on (the SDK tests for "p5.48xlarge"; p5e/p5en are the same
        # 8-GPU P5 design with H200s, so they get the same rule).
        raise SpecError("distribution.smdistributed",
                        f"SMModelParallel and SMDataParallel currently do not support p5 instances "
                        f"({instance_type}) without torch_distributed.",
                        "add 'torch_distributed': {'enabled': True} (SMP v2 / SMDDP over torchrun).")


def _check_torch_distributed(distribution: dict[str, Any], py_version: str | None, entry_point: str | None) -> None:
    # fw_utils.validate_torch_distributed_distribution (minus the GPU/Trainium-only rule: see module docstring)
    if not _enabled(distribution.get("torch_distributed")):
        return
    if py_version and "py3" not in py_version:
        raise SpecError("py_version", f"Provided py_version {py_version} is not supported by torch_distributed.",
                        "use py_version >= py3 (for example 'py311').")
    if entry_point is not None and not str(entry_point).endswith(".py"):
        raise SpecError("entry_point", f"Unsupported entry point type for the distribution torch_distributed "
                                       f"({entry_point!r}). Only python programs (*.py) are supported.",
                        "point entry_point at a .py script (torchrun runs scripts, not shell scripts or "
                        "packages).")


def _check_smdistributed(distribution: dict[str, Any], py_version: str | None) -> dict[str, Any] | None:
    dp = _smd(distribution, "dataparallel")
    if _enabled(dp):
        if py_version and "py3" not in py_version:
            # fw_utils._validate_smdataparallel_args
            raise SpecError("py_version", f"Provided py_version {py_version} is not supported by smdataparallel.",
                            "use py_version >= py3.")
        if not isinstance(dp.get("custom_mpi_options", ""), str):
            raise SpecError("distribution.smdistributed.dataparallel.custom_mpi_options",
                            f"must be a string of mpirun options, not {dp['custom_mpi_options']!r}.",
                            "write them as one string, e.g. '-verbose -x NCCL_DEBUG=VERSION'.")
    mp = _smd(distribution, "modelparallel")
    if not _enabled(mp):
        return None
    params = mp.get("parameters", {})
    if not isinstance(params, dict):
        raise SpecError("distribution.smdistributed.modelparallel.parameters",
                        f"must be a dict of SMP parameters, not {type(params).__name__} (the SDK also reads a "
                        "JSON file path; request builders do no file I/O).",
                        "load the JSON yourself and pass the dict.")
    _validate_mp_config(params)
    return dict(params)


def _validate_mp_config(config: dict[str, Any]) -> None:
    """fw_utils.validate_mp_config, with fields."""
    base = "distribution.smdistributed.modelparallel.parameters"

    def one_of(key: str, values: list[Any]) -> None:
        if key in config and config[key] not in values:
            raise SpecError(f"{base}.{key}", f"{key} must be a value in: {values}.", f"use one of {values}.")

    one_of("pipeline", ["simple", "interleaved", "_only_forward"])
    one_of("placement_strategy", ["spread", "cluster"])
    one_of("optimize", ["speed", "memory"])
    for key in ("microbatches", "partitions", "active_microbatches"):
        value = config.get(key)
        if key in config and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise SpecError(f"{base}.{key}", f"The number of {key} must be a positive integer, not {value!r}.",
                            f"give {key} as an integer >= 1.")
    for key in ("auto_partition", "contiguous", "load_partition", "horovod", "ddp", "deterministic_server"):
        one_of(key, [True, False])
    if "partition_file" in config and not isinstance(config["partition_file"], str):
        raise SpecError(f"{base}.partition_file", "'partition_file' must be a str.", "give a path string.")
    if config.get("auto_partition") is False and "default_partition" not in config:
        raise SpecError(f"{base}.default_partition",
                        "default_partition must be supplied if auto_partition is set to False!",
                        "set default_partition (a partition index) or auto_partition: True.")
    if "default_partition" in config and "partitions" in config and \
            config["default_partition"] >= config["partitions"]:
        raise SpecError(f"{base}.default_partition", "default_partition must be less than the number of "
                                                     "partitions!", f"use 0..{config['partitions'] - 1}.")
    if "memory_weight" in config and not (0.0 <= config["memory_weight"] <= 1.0):
        raise SpecError(f"{base}.memory_weight", "memory_weight must be between 0.0 and 1.0!",
                        "give a fraction in [0, 1].")
    for key in ("ddp_port", "ddp_dist_backend"):
        if key in config and "ddp" not in config:
            raise SpecError(f"{base}.{key}", f"`{key}` needs `ddp` to be set as well", "add 'ddp': True.")
    if "ddp_port" in config:
        port = config["ddp_port"]
        if isinstance(port, bool) or not isinstance(port, int) or port < 0:
            raise SpecError(f"{base}.ddp_port", f"Invalid port number {port}.", "give a port number >= 0.")
    if config.get("horovod", False) and config.get("ddp", False):
        raise SpecError(f"{base}.ddp", "'ddp' and 'horovod' cannot be simultaneously enabled.",
                        "enable one of them.")


def _check_mpi(distribution: dict[str, Any]) -> None:
    mpi = distribution.get("mpi")
    if not isinstance(mpi, dict):
        return
    if "processes_per_host" in mpi:
        p = mpi["processes_per_host"]
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise SpecError("distribution.mpi.processes_per_host", f"must be a positive integer, not {p!r}.",
                            "give the number of processes per host, usually the GPUs per instance.")
    if "custom_mpi_options" in mpi and not isinstance(mpi["custom_mpi_options"], str):
        raise SpecError("distribution.mpi.custom_mpi_options",
                        f"must be a string of mpirun options, not {mpi['custom_mpi_options']!r}.",
                        "write them as one string, e.g. '-verbose --NCCL_DEBUG=INFO'.")


# --------------------------------------------------------------------------------------- the mapping


def _hyperparameters(distribution: dict[str, Any], instance_type: str, group_names: list[str],
                     mp_parameters: dict[str, Any] | None) -> dict[str, object]:
    """PyTorch._pytorch_distribution_configuration + Framework._distribution_configuration (+ TensorFlow's
    mwms and the PyTorch/Hugging Face XLA key)."""
    hp: dict[str, object] = {}
    if group_names:
        hp[HP_INSTANCE_GROUPS] = list(group_names)
    td = _enabled(distribution.get("torch_distributed"))
    if _enabled(distribution.get("pytorchddp")):
        hp[HP_PYTORCH_DDP] = True
        hp[HP_INSTANCE_TYPE] = instance_type
        return hp
    if td and "smdistributed" not in distribution:
        hp[HP_TORCH_DISTRIBUTED] = True
        hp[HP_INSTANCE_TYPE] = instance_type
        return hp

    if "parameter_server" in distribution:
        hp[HP_PARAMETER_SERVER] = distribution["parameter_server"].get("enabled", False)
    if "mpi" in distribution:
        mpi = distribution["mpi"]
        hp[HP_MPI] = mpi.get("enabled", False)
        if mpi.get("processes_per_host"):
            hp[HP_MPI_PROCESSES_PER_HOST] = mpi["processes_per_host"]
        hp[HP_MPI_CUSTOM_OPTIONS] = mpi.get("custom_mpi_options", "")
    if "smdistributed" in distribution:
        if mp_parameters is not None:
            hp[HP_MP_PARAMETERS] = mp_parameters
        dp = _smd(distribution, "dataparallel")
        smddp = _enabled(dp)
        hp[HP_SMDDP] = smddp
        hp[HP_INSTANCE_TYPE] = instance_type
        if smddp:
            hp[HP_SMDDP_CUSTOM_OPTIONS] = dp.get("custom_mpi_options", "")
    if "multi_worker_mirrored_strategy" in distribution:
        hp[HP_MWMS] = distribution["multi_worker_mirrored_strategy"].get("enabled", False)
    if "pytorchxla" in distribution:
        hp[HP_PYTORCH_XLA] = distribution["pytorchxla"].get("enabled", False)
    if td:
        hp[HP_TORCH_DISTRIBUTED] = True
        hp[HP_INSTANCE_TYPE] = instance_type
    return hp


# ------------------------------------------------------------------------- SDK v3 distributed configurations

#: SDK v3 ``sagemaker.train.distributed`` classes -> their fields (``ModelTrainer(distributed=...)``).
V3_CONFIGS: dict[str, tuple[str, ...]] = {
    "torchrun": ("process_count_per_node", "smp"),
    "mpi": ("process_count_per_node", "mpi_additional_options"),
    "smp": ("hybrid_shard_degree", "sm_activation_offloading", "activation_loading_horizon",
            "fsdp_cache_flush_warnings", "allow_empty_shards", "tensor_parallel_degree", "context_parallel_degree",
            "expert_parallel_degree", "random_seed"),
}


def _v3_dict_form(distributed: Any) -> tuple[str, dict[str, Any]]:
    """An SDK v3 object (duck-typed by class name and pydantic's ``model_dump``, so the SDK is not imported)
    or its dict form ``{"torchrun": {...}}`` / ``{"mpi": {...}}`` / ``{"smp": {...}}`` -> (kind, fields)."""
    kind = type(distributed).__name__.lower()
    if kind in V3_CONFIGS and hasattr(distributed, "model_dump"):
        return kind, dict(distributed.model_dump(exclude_none=True))
    if isinstance(distributed, dict) and len(distributed) == 1:
        (key, fields), = distributed.items()
        kind = str(key).lower()
        if kind in V3_CONFIGS:
            if fields is None:
                fields = {}
            if not isinstance(fields, dict):
                raise SpecError(f"distributed.{key}", f"must be a dict of {kind} settings, not "
                                                      f"{type(fields).__name__}.", f"write {{'{key}': {{}}}}.")
            return kind, {k: v for k, v in fields.items() if v is not None}
        close = close_matches(kind, list(V3_CONFIGS), n=1)
        raise SpecError(f"distributed.{key}", "is not an SDK v3 distributed configuration.",
                        f"did you mean '{close[0]}'?" if close else "use torchrun, mpi or smp.")
    raise SpecError("distributed", f"{distributed!r} is not an SDK v3 distributed configuration.",
                    "give Torchrun(...), MPI(...) or SMP(...) from sagemaker.train.distributed, or their dict forms "
                    "{'torchrun': {...}}, {'mpi': {...}}, {'smp': {...}}.")


def _check_v3_fields(kind: str, fields: dict[str, Any], where: str) -> None:
    for name in fields:
        if name not in V3_CONFIGS[kind]:
            close = close_matches(str(name), V3_CONFIGS[kind], n=1)
            raise SpecError(f"{where}.{name}", f"is not a field of {kind}.",
                            f"did you mean '{close[0]}'?" if close else f"use {', '.join(V3_CONFIGS[kind])}.")


def from_distributed(distributed: Any) -> dict[str, Any] | None:
    """The SDK v2 ``distribution=`` dict that asks the training containers for what an SDK v3
    ``ModelTrainer(distributed=...)`` configuration asks for, so both build the same request:

    * ``Torchrun()`` / ``{"torchrun": {}}`` -> ``{"torch_distributed": {"enabled": True}}``;
    * ``Torchrun(smp=SMP(**p))`` (and ``SMP(**p)`` alone) -> SMP v2:
      ``{"torch_distributed": {"enabled": True}, "smdistributed": {"modelparallel": {"enabled": True,
      "parameters": p}}}`` (``mp_parameters`` then carries ``p`` as ``SMP._to_mp_hyperparameters`` does);
    * ``MPI(process_count_per_node=P, mpi_additional_options=[...])`` -> ``{"mpi": {"enabled": True,
      "processes_per_host": P, "custom_mpi_options": "<options joined by spaces>"}}``.

    ``Torchrun(process_count_per_node=...)`` has no counterpart in the contract the training containers read
    (their torchrun launcher starts one process per GPU, one per host without GPUs): it is refused with that
    fix rather than silently ignored. None -> None.
    """
    if distributed is None:
        return None
    kind, fields = _v3_dict_form(distributed)
    _check_v3_fields(kind, fields, f"distributed.{kind}")
    if kind == "mpi":
        mpi: dict[str, Any] = {"enabled": True}
        if "process_count_per_node" in fields:
            mpi["processes_per_host"] = fields["process_count_per_node"]
        options = fields.get("mpi_additional_options")
        if options:
            if isinstance(options, str) or not all(isinstance(o, str) for o in options):
                raise SpecError("distributed.mpi.mpi_additional_options", f"{options!r} is not a list of strings.",
                                "give e.g. ['-x', 'NCCL_DEBUG=INFO'].")
            mpi["custom_mpi_options"] = " ".join(options)
        return {"mpi": mpi}
    if kind == "smp":
        fields = {"smp": fields}
    elif fields.get("process_count_per_node") is not None:
        raise SpecError("distributed.torchrun.process_count_per_node",
                        "has no counterpart in the training containers' contract: their torchrun launcher starts "
                        "one process per GPU (one per host on CPU instances).",
                        "drop process_count_per_node (or use MPI(process_count_per_node=...)).")
    out: dict[str, Any] = {"torch_distributed": {"enabled": True}}
    smp = fields.get("smp")
    if smp is not None:
        if hasattr(smp, "model_dump"):
            smp = smp.model_dump(exclude_none=True)
        if not isinstance(smp, dict):
            raise SpecError("distributed.torchrun.smp", f"{smp!r} is not an SMP configuration.",
                            "give SMP(...) or a dict of SMP v2 parameters.")
        smp = {k: v for k, v in smp.items() if v is not None}
        _check_v3_fields("smp", smp, "distributed.smp")
        out["smdistributed"] = {"modelparallel": {"enabled": True, "parameters": smp}}
    return out


def resolve_distribution(distribution: dict[str, Any] | None, distributed: Any) -> dict[str, Any] | None:
    """The one ``distribution`` dict a job uses: the SDK v2 ``distribution`` or the SDK v3 ``distributed``
    (converted by :func:`from_distributed`), never both."""
    if distributed is None:
        return distribution
    if distribution:
        raise SpecError("distributed", "is given together with distribution.",
                        "give the SDK v3 distributed=... or the SDK v2 distribution={...}, not both.")
    return from_distributed(distributed)
