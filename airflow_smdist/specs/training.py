"""``training_request(...)``: a DAG author's few arguments -> a validated CreateTrainingJob request.

Pure: no file is read or written and no call is made here. The source directory is *named* in the request
(``sagemaker_submit_directory`` = ``<code_location>/<job>/source/sourcedir.tar.gz``, as the SageMaker SDK
does); packing and uploading it is the caller's I/O (:func:`airflow_smdist.specs.source.pack_source_dir`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.validate import validate_request

log = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"
INPUT_MODES = ("File", "FastFile", "Pipe")
DISTRIBUTION_TYPES = ("FullyReplicated", "ShardedByS3Key")
#: The SageMaker SDK's script-mode hyperparameters (see shared/reference/sagemaker-contracts.md §2.1).
SCRIPT_MODE_KEYS = ("sagemaker_program", "sagemaker_submit_directory", "sagemaker_container_log_level",
                    "sagemaker_job_name", "sagemaker_region")
CHANNEL_KEYS = {
    "s3_uri": "S3Uri",
    "distribution": "S3DataDistributionType",
    "s3_data_type": "S3DataType",
    "input_mode": "InputMode",
    "content_type": "ContentType",
    "compression": "CompressionType",
    "record_wrapping": "RecordWrapperType",
    "shuffle_seed": "ShuffleConfig",
    "instance_groups": "InstanceGroupNames",
    "attribute_names": "AttributeNames",
}
NETWORK_ISOLATION_SUBMIT_DIR = "/opt/ml/input/data/code/sourcedir.tar.gz"
MAX_RUNTIME_SECONDS = 28 * 24 * 3600  # StoppingCondition.MaxRuntimeInSeconds ceiling (2,419,200 s)


@dataclass
class TrainingPlan:
    """What the builder produced: the request, plus what the caller has to do and know about it."""

    request: dict[str, Any]
    #: local directory (or single file) to pack as sourcedir.tar.gz and upload to ``source_uri``
    source_dir: str | None = None
    entry_point: str | None = None
    source_uri: str | None = None
    advice: list = field(default_factory=list)
    lr_scaling: Any = None
    world_size: int = 1


def encode_hyperparameters(hps: dict[str, Any], *, script_mode: bool) -> dict[str, str]:
    """HyperParameters are a str->str map. In script mode the SDK JSON-encodes every value (``0.1`` ->
    ``"0.1"``, ``"abc"`` -> ``"\\"abc\\""``, ``True`` -> ``"true"``) and the training toolkit decodes them;
    built-in algorithms take plain strings."""
    out: dict[str, str] = {}
    for key, value in hps.items():
        if not isinstance(key, str) or not key:
            raise SpecError(f"hyperparameters[{key!r}]", "hyperparameter names must be non-empty strings.")
        if script_mode:
            try:
                out[key] = json.dumps(value)
            except TypeError:
                raise SpecError(f"hyperparameters[{key!r}]", f"value {value!r} is not JSON-serialisable.",
                                "use numbers, strings, booleans, lists or dicts.") from None
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, (dict, list)):
            out[key] = json.dumps(value)
        else:
            out[key] = str(value)
    return out


def _as_int(value: Any, name: str, minimum: int | None = 1) -> int:
    """Jinja renders numbers as strings: accept "2" for 2, reject "two" and 2.5 with the field named.
    The one integer coercion of the request builders (processing, transform and tuning use it too)."""
    fix = f"give an integer >= {minimum}." if minimum is not None else "give an integer."
    if isinstance(value, bool):
        raise SpecError(name, f"{value!r} is a boolean, not an integer.", fix)
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
        if not isinstance(value, str) and number != value:
            raise ValueError
    except (TypeError, ValueError):
        raise SpecError(name, f"{value!r} is not an integer.", fix) from None
    if minimum is not None and number < minimum:
        raise SpecError(name, f"{number} is below {minimum}.", fix)
    return number


def _channel(name: str, spec: Any, default_mode: str) -> dict[str, Any]:
    if isinstance(spec, str):
        spec = {"s3_uri": spec}
    if not isinstance(spec, dict):
        raise SpecError(f"inputs[{name!r}]", f"{spec!r} is neither a URI nor a dict.",
                        "give 's3://bucket/prefix' or {'s3_uri': ..., 'distribution': 'ShardedByS3Key'}.")
    unknown = set(spec) - set(CHANNEL_KEYS)
    if unknown:
        import difflib

        bad = sorted(unknown)[0]
        close = difflib.get_close_matches(bad, list(CHANNEL_KEYS), n=1)
        raise SpecError(f"inputs[{name!r}].{bad}", "is not a channel setting.",
                        f"did you mean '{close[0]}'?" if close else f"use one of {sorted(CHANNEL_KEYS)}.")
    if "s3_uri" not in spec:
        raise SpecError(f"inputs[{name!r}].s3_uri", "is required.", "give the channel's s3:// prefix.")
    distribution = spec.get("distribution", "FullyReplicated")
    if distribution not in DISTRIBUTION_TYPES:
        raise SpecError(f"inputs[{name!r}].distribution", f"{distribution!r} is not a distribution type.",
                        f"use one of {DISTRIBUTION_TYPES}.")
    mode = spec.get("input_mode", default_mode)
    if mode not in INPUT_MODES:
        raise SpecError(f"inputs[{name!r}].input_mode", f"{mode!r} is not an input mode.", f"use one of {INPUT_MODES}.")
    s3 = {"S3DataType": spec.get("s3_data_type", "S3Prefix"), "S3Uri": spec["s3_uri"],
          "S3DataDistributionType": distribution}
    if spec.get("attribute_names"):
        s3["AttributeNames"] = list(spec["attribute_names"])
    if spec.get("instance_groups"):
        s3["InstanceGroupNames"] = list(spec["instance_groups"])
    channel: dict[str, Any] = {"ChannelName": name, "DataSource": {"S3DataSource": s3}}
    if mode != default_mode:
        channel["InputMode"] = mode
    for key in ("content_type", "compression", "record_wrapping"):
        if spec.get(key) is not None:
            channel[CHANNEL_KEYS[key]] = spec[key]
    if spec.get("shuffle_seed") is not None:
        channel["ShuffleConfig"] = {"Seed": _as_int(spec["shuffle_seed"], f"inputs[{name!r}].shuffle_seed", 0)}
    return channel


def _tensorflow_model_dir(framework: str | None, model_dir: str | bool | None, dist_hps: dict[str, object],
                          output_path: str, job_name: str) -> str | None:
    """The ``model_dir`` hyperparameter the SDK's TensorFlow estimator always adds in script mode
    (``TensorFlow.hyperparameters``/``_default_s3_path``): the given one, else ``/opt/ml/model`` with MPI,
    else ``<output_path>/<job>/model``; none with ``model_dir=False`` or another framework."""
    if (framework or "").lower() != "tensorflow":
        if model_dir not in (None, False):
            raise SpecError("model_dir", f"only applies to framework='tensorflow', not {framework!r}.",
                            "drop model_dir, or pass it in hyperparameters.")
        return None
    if model_dir is False:
        return None
    if model_dir:
        return str(model_dir)
    from airflow_smdist.specs.distribution import HP_MPI

    if dist_hps.get(HP_MPI):
        return "/opt/ml/model"
    return f"{output_path.rstrip('/')}/{job_name}/model"


def build_training(
    *,
    job_name: str,
    role: str,
    output_path: str,
    instance_type: str | None = "ml.m5.xlarge",
    instance_count: int | str = 1,
    entry_point: str | None = None,
    source_dir: str | None = None,
    code_location: str | None = None,
    framework: str | None = None,
    framework_version: str | None = None,
    py_version: str | None = None,
    base_framework_version: str | None = None,
    image_uri: str | None = None,
    algorithm: str | None = None,
    algorithm_version: str | None = None,
    region: str | None = None,
    hyperparameters: dict[str, Any] | None = None,
    distribution: dict[str, Any] | None = None,
    distributed: Any = None,
    model_dir: str | bool | None = None,
    inputs: dict[str, Any] | None = None,
    input_mode: str = "File",
    checkpoint_s3_uri: str | None = None,
    checkpoint_local_path: str | None = None,
    max_run: int | str = 86400,
    use_spot_instances: bool = False,
    max_wait: int | str | None = None,
    max_retry_attempts: int | str | None = None,
    metric_definitions: list[dict[str, str]] | None = None,
    environment: dict[str, str] | None = None,
    volume_size: int | str = 30,
    subnets: list[str] | None = None,
    security_group_ids: list[str] | None = None,
    enable_network_isolation: bool = False,
    encrypt_inter_container_traffic: bool = False,
    instance_groups: list[dict[str, Any]] | None = None,
    lr_scaling: dict[str, Any] | None = None,
    container_log_level: int = logging.INFO,
    tags: dict[str, str] | None = None,
    allow_local_uris: bool = True,
) -> TrainingPlan:
    """Build a CreateTrainingJob request the way the SageMaker Python SDK (v2 estimators) would.

    Exactly one of ``image_uri``, ``algorithm`` (a built-in algorithm: its image from the SDK's data) and
    ``framework`` + ``framework_version`` (+ ``py_version``; + ``base_framework_version`` for huggingface,
    e.g. "pytorch2.5.1": a Deep Learning Container) names the image.
    ``entry_point`` (+ ``source_dir``) makes it a script-mode job. ``distribution`` takes the SDK v2
    ``distribution=`` dict; ``distributed`` the SDK v3 ``ModelTrainer(distributed=...)`` configuration
    (``Torchrun(...)``, ``MPI(...)``, ``SMP(...)`` objects or their dict forms, see
    :func:`airflow_smdist.specs.distribution.from_distributed`), which map to the same request.
    ``model_dir`` (TensorFlow only): the ``model_dir`` hyperparameter the SDK sends, by default
    ``<output_path>/<job>/model`` (``/opt/ml/model`` with MPI); False sends none. ``inputs`` maps channel names to an S3 prefix or a dict with ``s3_uri``,
    ``distribution`` (FullyReplicated|ShardedByS3Key), ``input_mode`` (File|FastFile|Pipe), ...

    ``lr_scaling`` = {"base_learning_rate", "base_batch_size", "per_device_batch_size", "warmup_epochs",
    "rule" ("linear"|"sqrt"), "hyperparameter" (default "learning_rate"), "warmup_hyperparameter"
    (default "warmup_epochs")} computes the learning rate for the global batch (Goyal et al. 2017) and
    sends it as hyperparameters; the computation is logged and kept in ``plan.lr_scaling``.
    """
    from airflow_smdist.specs import best_practices, distribution as dist_mod, instances

    region = region or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
    hyperparameters = dict(hyperparameters or {})
    distribution = dist_mod.resolve_distribution(distribution, distributed)
    # Jinja with render_template_as_native_obj turns "2.5" into 2.5: versions are strings
    framework_version = None if framework_version is None else str(framework_version)
    algorithm_version = None if algorithm_version is None else str(algorithm_version)
    py_version = None if py_version is None else str(py_version)
    base_framework_version = None if base_framework_version is None else str(base_framework_version)
    if input_mode not in INPUT_MODES:
        raise SpecError("input_mode", f"{input_mode!r} is not an input mode.", f"use one of {INPUT_MODES}.")
    max_run = _as_int(max_run, "max_run")
    if max_run > MAX_RUNTIME_SECONDS:
        raise SpecError("max_run", f"{max_run} s is above SageMaker's limit of {MAX_RUNTIME_SECONDS} s (28 days).",
                        "split the training into links that resume from a checkpoint "
                        "(airflow_smdist.operators.workflows.SageMakerTrainingChainOperator).")
    volume_size = _as_int(volume_size, "volume_size")

    # -- image ---------------------------------------------------------------------------------------
    chosen = [n for n, v in (("image_uri", image_uri), ("algorithm", algorithm), ("framework", framework)) if v]
    if len(chosen) != 1:
        raise SpecError("image_uri", f"{'none' if not chosen else ' and '.join(chosen)} given: exactly one of "
                        "image_uri, algorithm and framework names the container image.",
                        "pass image_uri='<ecr uri>', algorithm='xgboost', or framework='pytorch' with framework_version.")
    if algorithm and entry_point:
        raise SpecError("entry_point", f"built-in algorithm {algorithm!r} runs its own code.",
                        "drop entry_point, or use framework=... / image_uri=... for script mode.")
    if framework and not entry_point:
        raise SpecError("entry_point", f"framework {framework!r} needs the script to run.", "pass entry_point='train.py'.")

    # -- cluster -------------------------------------------------------------------------------------
    resource: dict[str, Any] = {"VolumeSizeInGB": volume_size}
    if instance_groups:
        groups = []
        for i, g in enumerate(instance_groups):
            name = g.get("instance_group_name") or g.get("InstanceGroupName")
            itype = g.get("instance_type") or g.get("InstanceType")
            count = _as_int(g.get("instance_count", g.get("InstanceCount", 1)), f"instance_groups[{i}].instance_count")
            if not name or not itype:
                raise SpecError(f"instance_groups[{i}]", "needs instance_group_name and instance_type.",
                                "give {'instance_group_name': 'train1', 'instance_type': 'ml.p4d.24xlarge', 'instance_count': 2}.")
            instances.check_instance_type(itype, f"instance_groups[{i}].instance_type")
            groups.append({"InstanceGroupName": name, "InstanceType": itype, "InstanceCount": count})
        resource["InstanceGroups"] = groups
        primary_type = groups[0]["InstanceType"]
        total_count = sum(g["InstanceCount"] for g in groups)
    else:
        if not instance_type:
            raise SpecError("instance_type", "is required.", "pass instance_type='ml.m5.xlarge' (or instance_groups).")
        instances.check_instance_type(instance_type, "instance_type")
        instance_count = _as_int(instance_count, "instance_count")
        resource.update({"InstanceType": instance_type, "InstanceCount": instance_count})
        primary_type, total_count = instance_type, instance_count

    if algorithm:
        from airflow_smdist.specs import builtin_algorithms

        advice_msgs = builtin_algorithms.check_scaling(algorithm, primary_type, total_count, input_mode,
                                                       hyperparameters) or []
        image = builtin_algorithms.algorithm_image_uri(algorithm, region, algorithm_version)
    elif framework:
        from airflow_smdist.specs import images

        if not framework_version:
            raise SpecError("framework_version", f"is required with framework={framework!r}.",
                            "pass framework_version='2.5' (see the SageMaker Deep Learning Containers list).")
        image = images.framework_image_uri(framework, framework_version, py_version, primary_type, region,
                                           base_framework_version=base_framework_version,
                                           distribution=distribution)
        advice_msgs = []
    else:
        image, advice_msgs = image_uri, []

    # -- distribution and best practices -------------------------------------------------------------
    dist_hps = dist_mod.distribution_hyperparameters(
        distribution, instance_type=primary_type, framework=framework, framework_version=framework_version,
        py_version=py_version, entry_point=entry_point, instance_groups=resource.get("InstanceGroups"))
    if dist_hps and not entry_point:
        raise SpecError("distribution", "distribution strategies launch a training script.",
                        "pass entry_point=..., or drop distribution for a built-in algorithm "
                        "(they distribute themselves across instance_count).")
    advice = best_practices.check_training(instance_type=primary_type, instance_count=total_count,
                                           distribution=distribution, checkpoint_s3_uri=checkpoint_s3_uri,
                                           algorithm=algorithm, instance_groups=resource.get("InstanceGroups"))
    advice = list(advice) + [best_practices.Advice("warning", "algorithm", m) for m in advice_msgs]
    world = best_practices.world_size(primary_type, total_count, distribution)

    scaling = None
    if lr_scaling:
        ls = dict(lr_scaling)
        lr_name = ls.pop("hyperparameter", "learning_rate")
        warm_name = ls.pop("warmup_hyperparameter", "warmup_epochs")
        for hp_name in (lr_name, warm_name):
            if hp_name in hyperparameters:
                raise SpecError(f"hyperparameters[{hp_name!r}]", "is also computed by lr_scaling.",
                                f"drop '{hp_name}' from hyperparameters, or drop lr_scaling.")
        try:
            scaling = best_practices.scale_learning_rate(world_size=world, **ls)
        except TypeError as e:
            raise SpecError("lr_scaling", str(e), "use base_learning_rate, base_batch_size, per_device_batch_size, "
                            "warmup_epochs, rule, hyperparameter, warmup_hyperparameter.") from None
        hyperparameters.update(scaling.hyperparameters(lr_name=lr_name, warmup_name=warm_name))
        log.info("Learning-rate scaling: %s", scaling.describe())

    for a in advice:
        (log.warning if a.level == "warning" else log.info)("%s", a)

    # -- hyperparameters -------------------------------------------------------------------------------
    for key in hyperparameters:
        if key in SCRIPT_MODE_KEYS or key in dist_hps:
            raise SpecError(f"hyperparameters[{key!r}]", "is set by the builder.", "drop it from hyperparameters.")
        if key == "model_dir" and (framework or "").lower() == "tensorflow" and entry_point and model_dir is not False:
            raise SpecError("hyperparameters['model_dir']", "is set by the builder for TensorFlow (as the SDK does).",
                            "pass model_dir='s3://...' (or model_dir=False to send none) instead.")
    script_mode = bool(entry_point)
    all_hps: dict[str, Any] = dict(hyperparameters)
    all_hps.update(dist_hps)
    source_uri = None
    channels: list[dict[str, Any]] = []
    if script_mode:
        if source_dir and source_dir.startswith("s3://"):
            if not source_dir.endswith(".tar.gz"):
                raise SpecError("source_dir", f"{source_dir!r} is an S3 URI but not a .tar.gz.",
                                "point it at a sourcedir.tar.gz, or give a local directory.")
            source_uri = source_dir
        else:
            base = (code_location or output_path).rstrip("/")
            source_uri = f"{base}/{job_name}/source/sourcedir.tar.gz"
        submit_dir = source_uri
        if enable_network_isolation:
            submit_dir = NETWORK_ISOLATION_SUBMIT_DIR
            channels.append({"ChannelName": "code", "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": source_uri, "S3DataDistributionType": "FullyReplicated"}}})
        if source_dir:
            if os.path.isabs(entry_point) or ".." in entry_point.split("/"):
                raise SpecError("entry_point", f"{entry_point!r} must be a path inside source_dir.",
                                "give it relative to source_dir, e.g. 'train.py'.")
            program, pack = entry_point, source_dir
        else:  # the SDK packs the entry point file alone
            program, pack = os.path.basename(entry_point), entry_point
        tf_model_dir = _tensorflow_model_dir(framework, model_dir, dist_hps, output_path, job_name)
        if tf_model_dir is not None:
            all_hps["model_dir"] = tf_model_dir
        all_hps.update({"sagemaker_program": program,
                        "sagemaker_submit_directory": submit_dir,
                        "sagemaker_container_log_level": container_log_level,
                        "sagemaker_job_name": job_name,
                        "sagemaker_region": region})

    # -- channels --------------------------------------------------------------------------------------
    for name, spec in (inputs or {}).items():
        if name == "code" and enable_network_isolation and script_mode:
            raise SpecError("inputs['code']", "is the channel that carries the source with network isolation.",
                            "rename the channel.")
        channels.append(_channel(name, spec, input_mode))

    request: dict[str, Any] = {
        "TrainingJobName": job_name,
        "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": input_mode},
        "RoleArn": role,
        "OutputDataConfig": {"S3OutputPath": output_path},
        "ResourceConfig": resource,
        "StoppingCondition": {"MaxRuntimeInSeconds": max_run},
        "HyperParameters": encode_hyperparameters(all_hps, script_mode=script_mode),
    }
    if metric_definitions:
        request["AlgorithmSpecification"]["MetricDefinitions"] = [dict(m) for m in metric_definitions]
    if channels:
        request["InputDataConfig"] = channels
    if checkpoint_s3_uri:
        cp = {"S3Uri": checkpoint_s3_uri}
        if checkpoint_local_path:
            cp["LocalPath"] = checkpoint_local_path
        request["CheckpointConfig"] = cp
    elif checkpoint_local_path:
        raise SpecError("checkpoint_local_path", "has no effect without checkpoint_s3_uri.", "set checkpoint_s3_uri too.")
    if use_spot_instances:
        request["EnableManagedSpotTraining"] = True
        wait = _as_int(max_wait if max_wait is not None else max_run, "max_wait")
        if wait < max_run:
            raise SpecError("max_wait", f"{wait} is below max_run {max_run}.",
                            "max_wait counts waiting for spot capacity plus the run: make it >= max_run.")
        request["StoppingCondition"]["MaxWaitTimeInSeconds"] = wait
        if not checkpoint_s3_uri:
            advice.append(best_practices.Advice("warning", "spot-checkpoint",
                          "managed spot training without checkpoint_s3_uri restarts from scratch after an interruption."))
    elif max_wait is not None:
        raise SpecError("max_wait", "only applies to managed spot training.", "set use_spot_instances=True or drop max_wait.")
    if max_retry_attempts is not None:
        request["RetryStrategy"] = {"MaximumRetryAttempts": _as_int(max_retry_attempts, "max_retry_attempts")}
    if environment:
        request["Environment"] = {str(k): str(v) for k, v in environment.items()}
    if subnets or security_group_ids:
        if not (subnets and security_group_ids):
            raise SpecError("subnets" if not subnets else "security_group_ids",
                            "VPC mode needs both subnets and security_group_ids.", "give both, or neither.")
        request["VpcConfig"] = {"Subnets": list(subnets), "SecurityGroupIds": list(security_group_ids)}
    if enable_network_isolation:
        request["EnableNetworkIsolation"] = True
    if encrypt_inter_container_traffic:
        request["EnableInterContainerTrafficEncryption"] = True
    if tags:
        request["Tags"] = [{"Key": str(k), "Value": str(v)} for k, v in tags.items()]

    validate_request("CreateTrainingJob", request, allow_local_uris=allow_local_uris)
    uploads = script_mode and source_uri != source_dir
    return TrainingPlan(request=request, source_dir=pack if uploads else None,
                        entry_point=entry_point, source_uri=source_uri if uploads else None,
                        advice=advice, lr_scaling=scaling, world_size=world)


def training_request(**kwargs: Any) -> dict[str, Any]:
    """The CreateTrainingJob request for these arguments (see :func:`build_training`)."""
    return build_training(**kwargs).request
