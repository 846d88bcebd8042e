"""``training_request(...)``: a DAG author's few arguments -> a validated CreateTrainingJob request.

Pure: no file is read or written and no call is made here. The source directory is *named* in the request
(``sagemaker_submit_directory`` = ``<code_location>/<job>/source/sourcedir.tar.gz``, as the SageMaker SDK
does); packing and uploading it is the caller's I/O (:func:`airflow_smdist.sourcedir.pack_source_dir`,
:func:`airflow_smdist.sourcedir.upload_source`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from airflow_smdist.specs.errors import SpecError, as_mapping, as_tags
from airflow_smdist.specs.validate import validate_request
from airflow_smdist.wire import encode_hyperparameters

log = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"
INPUT_MODES = ("File", "FastFile", "Pipe")
DISTRIBUTION_TYPES = ("FullyReplicated", "ShardedByS3Key")
#: the frameworks whose SDK estimator requires py_version with framework_version (scikit-learn's and XGBoost's
#: default to "py3")
PY_VERSION_REQUIRED = ("pytorch", "tensorflow", "huggingface")
#: The SageMaker SDK's script-mode hyperparameters (see docs/contracts.md §2.1).
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
    advice: list[Any] = field(default_factory=list)
    lr_scaling: Any = None
    world_size: int = 1


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


# -- the spec sections: each argument of a training job is written once, here ------------------------------


def checked_metric_definitions(metric_definitions: Any) -> list[dict[str, str]]:
    """MetricDefinitions with every regex compiled and holding exactly one capture group (the value), so a
    typo fails here rather than in the job (or, silently, as no metrics at all)."""
    if not isinstance(metric_definitions, (list, tuple)):
        raise SpecError("metric_definitions", f"{metric_definitions!r} is not a list.",
                        "give [{'Name': 'train:loss', 'Regex': 'loss=([0-9.]+)'}].")
    out = []
    for i, m in enumerate(metric_definitions):
        where = f"metric_definitions[{i}]"
        if not isinstance(m, dict) or not m.get("Name") or not isinstance(m.get("Regex"), str):
            raise SpecError(where, f"{m!r} needs a 'Name' and a 'Regex'.", "give {'Name': 'train:loss', 'Regex': "
                            "'loss=([0-9.]+)'}.")
        try:
            groups = re.compile(m["Regex"]).groups
        except re.error as exc:
            raise SpecError(f"{where}.Regex", f"{m['Regex']!r} is not a valid regular expression ({exc}).",
                            "fix the pattern, e.g. 'loss=([0-9.]+)'.") from None
        if groups != 1:
            raise SpecError(f"{where}.Regex", f"{m['Regex']!r} has {groups} capture groups; the metric's value is "
                            "the one group SageMaker reads.", "capture exactly the number, e.g. 'loss=([0-9.]+)'; "
                            "make other groups non-capturing: (?:...).")
        out.append(dict(m))
    return out


def _input_channels(inputs: Any) -> dict[str, Any]:
    """``inputs`` as {channel: spec}; one URI alone is the "training" channel, as the SDK's ``fit(inputs)``."""
    if isinstance(inputs, str) and "://" in inputs and not inputs.lstrip().startswith(("{", "[")):
        return {"training": inputs}
    return as_mapping(inputs, "inputs", "{'train': 's3://bucket/train/'}")


@dataclass
class JobSection:
    """Who runs the job, where its output goes, and what the script is told."""

    role: str
    output_path: str
    hyperparameters: dict[str, Any] | None = None
    metric_definitions: list[dict[str, str]] | None = None
    environment: dict[str, Any] | None = None
    tags: dict[str, str] | list[dict[str, str]] | None = None

    def __post_init__(self) -> None:  # wrong types name their field (e.g. Jinja that rendered a dict as text)
        self.hyperparameters = as_mapping(self.hyperparameters, "hyperparameters", "{'epochs': 10}")
        self.environment = as_mapping(self.environment, "environment", "{'NAME': 'value'}")
        self.tags = as_tags(self.tags)
        if self.metric_definitions:
            self.metric_definitions = checked_metric_definitions(self.metric_definitions)

    def to_request(self, request: dict[str, Any]) -> None:
        request["RoleArn"] = self.role
        request["OutputDataConfig"] = {"S3OutputPath": self.output_path}
        if self.metric_definitions:
            request["AlgorithmSpecification"]["MetricDefinitions"] = [dict(m) for m in self.metric_definitions]
        if self.environment:
            request["Environment"] = {str(k): str(v) for k, v in self.environment.items()}
        if self.tags:
            request["Tags"] = self.tags


@dataclass
class ImageSection:
    """Exactly one of ``image_uri``, ``algorithm`` (+ ``algorithm_version``) and ``framework`` +
    ``framework_version`` (+ ``py_version``; + ``base_framework_version`` for huggingface) names the image."""

    image_uri: str | None = None
    algorithm: str | None = None
    algorithm_version: str | None = None
    framework: str | None = None
    framework_version: str | None = None
    py_version: str | None = None
    base_framework_version: str | None = None

    def __post_init__(self) -> None:
        # Jinja with render_template_as_native_obj turns "2.5" into 2.5: versions are strings
        for name in ("framework_version", "algorithm_version", "py_version", "base_framework_version"):
            value = getattr(self, name)
            setattr(self, name, None if value is None else str(value))

    def check(self, entry_point: str | None) -> None:
        chosen = [n for n, v in (("image_uri", self.image_uri), ("algorithm", self.algorithm),
                                 ("framework", self.framework)) if v]
        if len(chosen) != 1:
            raise SpecError("image_uri", f"{'none' if not chosen else ' and '.join(chosen)} given: exactly one of "
                            "image_uri, algorithm and framework names the container image.",
                            "pass image_uri='<ecr uri>', algorithm='xgboost', or framework='pytorch' with "
                            "framework_version.")
        if self.algorithm and entry_point:
            raise SpecError("entry_point", f"built-in algorithm {self.algorithm!r} runs its own code.",
                            "drop entry_point, or use framework=... / image_uri=... for script mode.")
        if self.framework and not entry_point:
            raise SpecError("entry_point", f"framework {self.framework!r} needs the script to run.",
                            "pass entry_point='train.py'.")

    def resolve(self, region: str, cluster: Cluster, input_mode: str, hyperparameters: dict[str, Any],
                distribution: dict[str, Any] | None) -> tuple[str, list[str]]:
        """The image URI, and the built-in algorithm's scaling advice."""
        if self.algorithm:
            from airflow_smdist.specs import builtin_algorithms

            advice = builtin_algorithms.check_scaling(self.algorithm, cluster.primary_type, cluster.total_count,
                                                      input_mode, hyperparameters) or []
            return builtin_algorithms.algorithm_image_uri(self.algorithm, region, self.algorithm_version), advice
        if self.framework:
            from airflow_smdist.specs import images

            if not self.framework_version:
                raise SpecError("framework_version", f"is required with framework={self.framework!r}.",
                                "pass framework_version='2.5' (see the SageMaker Deep Learning Containers list).")
            self._check_py_version(region, cluster, distribution)
            return images.framework_image_uri(self.framework, self.framework_version, self.py_version,
                                              cluster.primary_type, region,
                                              base_framework_version=self.base_framework_version,
                                              distribution=distribution), []
        return str(self.image_uri), []

    def _check_py_version(self, region: str, cluster: Cluster, distribution: dict[str, Any] | None) -> None:
        """The SDK's estimators of these frameworks (PyTorch, TensorFlow, HuggingFace) refuse a framework image
        without ``py_version`` (``fw_utils.validate_version_or_image_args``), where ``image_uris.retrieve`` alone
        would default to an image's only Python: a DAG that passes here must not fail where the SDK builds it."""
        if self.py_version or str(self.framework).lower() not in PY_VERSION_REQUIRED:
            return
        from airflow_smdist.specs import images

        try:
            uri = images.framework_image_uri(str(self.framework), str(self.framework_version), None,
                                             cluster.primary_type, region,
                                             base_framework_version=self.base_framework_version,
                                             distribution=distribution)
            found = re.search(r"-(py3\d*)(?:-|$)", uri.rsplit(":", 1)[-1])
            which = f"py_version={found[1]!r} (that image's Python)" if found else "py_version"
        except ValueError as exc:
            which = "py_version (" + str(exc).rsplit("Supported ", 1)[-1].rstrip(".") + ")"
        raise SpecError("py_version", f"is required with framework={self.framework!r}: the SageMaker Python SDK "
                        "refuses a framework image without it (framework_version or py_version was None, yet "
                        "image_uri was also None).", f"pass {which}, or image_uri.")


@dataclass
class Cluster:
    """The resolved cluster: ``ResourceConfig``, and the instance type and count the checks look at."""

    resource: dict[str, Any]
    primary_type: str
    total_count: int

    @property
    def groups(self) -> list[dict[str, Any]] | None:
        groups: list[dict[str, Any]] | None = self.resource.get("InstanceGroups")
        return groups


@dataclass
class ClusterSection:
    """``instance_type`` x ``instance_count``, or heterogeneous ``instance_groups``; ``volume_size`` (GB)."""

    instance_type: str | None = "ml.m5.xlarge"
    instance_count: int | str = 1
    instance_groups: list[dict[str, Any]] | None = None
    volume_size: int | str = 30

    def resolve(self) -> Cluster:
        from airflow_smdist.specs import instances

        resource: dict[str, Any] = {"VolumeSizeInGB": _as_int(self.volume_size, "volume_size")}
        if self.instance_groups:
            groups = [self._group(i, g) for i, g in enumerate(self.instance_groups)]
            resource["InstanceGroups"] = groups
            return Cluster(resource, groups[0]["InstanceType"], sum(g["InstanceCount"] for g in groups))
        if not self.instance_type:
            raise SpecError("instance_type", "is required.", "pass instance_type='ml.m5.xlarge' (or instance_groups).")
        instances.check_instance_type(self.instance_type, "instance_type")
        count = _as_int(self.instance_count, "instance_count")
        resource.update({"InstanceType": self.instance_type, "InstanceCount": count})
        return Cluster(resource, self.instance_type, count)

    @staticmethod
    def _group(i: int, g: dict[str, Any]) -> dict[str, Any]:
        from airflow_smdist.specs import instances

        name = g.get("instance_group_name") or g.get("InstanceGroupName")
        itype = g.get("instance_type") or g.get("InstanceType")
        count = _as_int(g.get("instance_count", g.get("InstanceCount", 1)), f"instance_groups[{i}].instance_count")
        if not name or not itype:
            raise SpecError(f"instance_groups[{i}]", "needs instance_group_name and instance_type.",
                            "give {'instance_group_name': 'train1', 'instance_type': 'ml.p4d.24xlarge', "
                            "'instance_count': 2}.")
        instances.check_instance_type(itype, f"instance_groups[{i}].instance_type")
        return {"InstanceGroupName": name, "InstanceType": itype, "InstanceCount": count}


@dataclass
class ScriptSection:
    """Script mode: ``entry_point`` (+ ``source_dir``, a local directory or an s3:// sourcedir.tar.gz), packed
    to ``<code_location or output_path>/<job>/source/sourcedir.tar.gz`` as the SDK does;
    ``container_log_level``; ``model_dir`` (TensorFlow: the hyperparameter the SDK sends, by default
    ``<output_path>/<job>/model``, ``/opt/ml/model`` with MPI; False sends none)."""

    entry_point: str | None = None
    source_dir: str | None = None
    code_location: str | None = None
    container_log_level: int = logging.INFO
    model_dir: str | bool | None = None

    def source_uri(self, output_path: str, job_name: str) -> str:
        if self.source_dir and self.source_dir.startswith("s3://"):
            if not self.source_dir.endswith(".tar.gz"):
                raise SpecError("source_dir", f"{self.source_dir!r} is an S3 URI but not a .tar.gz.",
                                "point it at a sourcedir.tar.gz, or give a local directory.")
            return self.source_dir
        base = (self.code_location or output_path).rstrip("/")
        return f"{base}/{job_name}/source/sourcedir.tar.gz"

    def program_and_pack(self) -> tuple[str, str]:
        """The program the toolkit runs, and what is packed as the source (the SDK packs a lone entry point
        file by itself)."""
        entry_point = str(self.entry_point)
        if not self.source_dir:
            return os.path.basename(entry_point), entry_point
        if os.path.isabs(entry_point) or ".." in entry_point.split("/"):
            raise SpecError("entry_point", f"{entry_point!r} must be a path inside source_dir.",
                            "give it relative to source_dir, e.g. 'train.py'.")
        return entry_point, self.source_dir


@dataclass
class DistributionSection:
    """``distribution`` (SDK v2 dict) or ``distributed`` (SDK v3 Torchrun/MPI/SMP, objects or dict forms);
    ``lr_scaling`` (the linear scaling rule for the global batch, see :func:`build_training`)."""

    distribution: dict[str, Any] | None = None
    distributed: Any = None
    lr_scaling: dict[str, Any] | None = None


@dataclass
class ChannelsSection:
    """``inputs``: channel name -> S3 prefix or {'s3_uri', 'distribution', 'input_mode', ...};
    ``input_mode`` the job's default (File, FastFile, Pipe)."""

    inputs: dict[str, Any] | None = None
    input_mode: str = "File"

    def __post_init__(self) -> None:
        self.inputs = _input_channels(self.inputs)
        if self.input_mode not in INPUT_MODES:
            raise SpecError("input_mode", f"{self.input_mode!r} is not an input mode.", f"use one of {INPUT_MODES}.")

    def to_channels(self, code_channel_reserved: bool) -> list[dict[str, Any]]:
        channels = []
        for name, spec in (self.inputs or {}).items():
            if name == "code" and code_channel_reserved:
                raise SpecError("inputs['code']", "is the channel that carries the source with network isolation.",
                                "rename the channel.")
            channels.append(_channel(name, spec, self.input_mode))
        return channels


@dataclass
class StoppingSection:
    """``max_run`` (s, at most 28 days), managed spot (``use_spot_instances``, ``max_wait``),
    ``max_retry_attempts``."""

    max_run: int | str = 86400
    use_spot_instances: bool = False
    max_wait: int | str | None = None
    max_retry_attempts: int | str | None = None

    def max_run_seconds(self) -> int:
        max_run = _as_int(self.max_run, "max_run")
        if max_run > MAX_RUNTIME_SECONDS:
            raise SpecError("max_run", f"{max_run} s is above SageMaker's limit of {MAX_RUNTIME_SECONDS} s (28 days).",
                            "split the training into links that resume from a checkpoint "
                            "(airflow_smdist.operators.workflows.SageMakerTrainingChainOperator).")
        return max_run

    def to_request(self, request: dict[str, Any], max_run: int) -> list[Any]:
        """Spot and retry members; returns advice (spot without checkpoints)."""
        from airflow_smdist.specs import best_practices

        advice: list[Any] = []
        if self.use_spot_instances:
            request["EnableManagedSpotTraining"] = True
            wait = _as_int(self.max_wait if self.max_wait is not None else max_run, "max_wait")
            if wait < max_run:
                raise SpecError("max_wait", f"{wait} is below max_run {max_run}.",
                                "max_wait counts waiting for spot capacity plus the run: make it >= max_run.")
            request["StoppingCondition"]["MaxWaitTimeInSeconds"] = wait
            if "CheckpointConfig" not in request:
                advice.append(best_practices.Advice(
                    "warning", "spot-checkpoint",
                    "managed spot training without checkpoint_s3_uri restarts from scratch after an interruption."))
        elif self.max_wait is not None:
            raise SpecError("max_wait", "only applies to managed spot training.",
                            "set use_spot_instances=True or drop max_wait.")
        if self.max_retry_attempts is not None:
            request["RetryStrategy"] = {"MaximumRetryAttempts": _as_int(self.max_retry_attempts, "max_retry_attempts")}
        return advice


@dataclass
class CheckpointSection:
    """``checkpoint_s3_uri`` (+ ``checkpoint_local_path``, default /opt/ml/checkpoints)."""

    checkpoint_s3_uri: str | None = None
    checkpoint_local_path: str | None = None

    def to_request(self, request: dict[str, Any]) -> None:
        if self.checkpoint_s3_uri:
            cp = {"S3Uri": self.checkpoint_s3_uri}
            if self.checkpoint_local_path:
                cp["LocalPath"] = self.checkpoint_local_path
            request["CheckpointConfig"] = cp
        elif self.checkpoint_local_path:
            raise SpecError("checkpoint_local_path", "has no effect without checkpoint_s3_uri.",
                            "set checkpoint_s3_uri too.")


@dataclass
class NetworkSection:
    """VPC (``subnets`` + ``security_group_ids``), ``enable_network_isolation``,
    ``encrypt_inter_container_traffic``."""

    subnets: list[str] | None = None
    security_group_ids: list[str] | None = None
    enable_network_isolation: bool = False
    encrypt_inter_container_traffic: bool = False

    def to_request(self, request: dict[str, Any]) -> None:
        if self.subnets or self.security_group_ids:
            if not (self.subnets and self.security_group_ids):
                raise SpecError("subnets" if not self.subnets else "security_group_ids",
                                "VPC mode needs both subnets and security_group_ids.", "give both, or neither.")
            request["VpcConfig"] = {"Subnets": list(self.subnets), "SecurityGroupIds": list(self.security_group_ids)}
        if self.enable_network_isolation:
            request["EnableNetworkIsolation"] = True
        if self.encrypt_inter_container_traffic:
            request["EnableInterContainerTrafficEncryption"] = True


#: The sections of a training job, in the order their checks run.
SECTIONS: tuple[type, ...] = (JobSection, ImageSection, ClusterSection, ScriptSection, DistributionSection,
                              ChannelsSection, StoppingSection, CheckpointSection, NetworkSection)


def training_fields() -> list[dataclasses.Field[Any]]:
    """Every argument of a training job (the fields of the sections), for operators to derive their
    arguments and template fields from."""
    return [f for section in SECTIONS for f in dataclasses.fields(section)]


#: The builder's arguments (the sections' field names), in section order.
TRAINING_ARGS: tuple[str, ...] = tuple(f.name for f in training_fields())


@dataclass
class TrainingSpec:
    """A training job's arguments, section by section. :meth:`from_arguments` takes them flat, as
    :func:`build_training` and the operators do."""

    job: JobSection
    image: ImageSection
    cluster: ClusterSection
    script: ScriptSection
    distribution: DistributionSection
    channels: ChannelsSection
    stopping: StoppingSection
    checkpoint: CheckpointSection
    network: NetworkSection

    @classmethod
    def from_arguments(cls, arguments: dict[str, Any]) -> TrainingSpec:
        unknown = set(arguments) - set(TRAINING_ARGS)
        if unknown:
            raise TypeError(f"build_training() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        parts: list[Any] = []
        for section in SECTIONS:
            names = [f.name for f in dataclasses.fields(section)]
            missing = [f.name for f in dataclasses.fields(section)
                       if f.default is dataclasses.MISSING and f.name not in arguments]
            if missing:
                raise TypeError(f"build_training() missing required keyword argument {missing[0]!r}")
            parts.append(section(**{n: arguments[n] for n in names if n in arguments}))
        return cls(*parts)

    # -- the steps of build_training -----------------------------------------------------------------
    def distribution_hyperparameters(self, distribution: dict[str, Any] | None, cluster: Cluster
                                     ) -> dict[str, object]:
        from airflow_smdist.specs import distribution as dist_mod

        image, entry_point = self.image, self.script.entry_point
        dist_hps = dist_mod.distribution_hyperparameters(
            distribution, instance_type=cluster.primary_type, framework=image.framework,
            framework_version=image.framework_version, py_version=image.py_version, entry_point=entry_point,
            instance_groups=cluster.groups)
        if dist_hps and not entry_point:
            raise SpecError("distribution", "distribution strategies launch a training script.",
                            "pass entry_point=..., or drop distribution for a built-in algorithm "
                            "(they distribute themselves across instance_count).")
        return dist_hps

    def scale_learning_rate(self, hyperparameters: dict[str, Any], world: int) -> Any:
        """Apply ``lr_scaling`` to ``hyperparameters`` (in place); returns the computation or None."""
        from airflow_smdist.specs import best_practices

        if not self.distribution.lr_scaling:
            return None
        ls = dict(self.distribution.lr_scaling)
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
        return scaling

    def check_hyperparameter_names(self, hyperparameters: dict[str, Any], dist_hps: dict[str, object]) -> None:
        tensorflow = (self.image.framework or "").lower() == "tensorflow"
        for key in hyperparameters:
            if key in SCRIPT_MODE_KEYS or key in dist_hps:
                raise SpecError(f"hyperparameters[{key!r}]", "is set by the builder.", "drop it from hyperparameters.")
            if key == "model_dir" and tensorflow and self.script.entry_point and self.script.model_dir is not False:
                raise SpecError("hyperparameters['model_dir']", "is set by the builder for TensorFlow (as the SDK "
                                "does).", "pass model_dir='s3://...' (or model_dir=False to send none) instead.")

    def script_mode(self, job_name: str, region: str, dist_hps: dict[str, object]
                    ) -> tuple[dict[str, Any], list[dict[str, Any]], str | None, str | None]:
        """The script-mode hyperparameters, the ``code`` channel (network isolation), the source URI and
        what to pack (None, None without an entry point)."""
        script = self.script
        if not script.entry_point:
            return {}, [], None, None
        source_uri = script.source_uri(self.job.output_path, job_name)
        submit_dir, channels = source_uri, []
        if self.network.enable_network_isolation:
            submit_dir = NETWORK_ISOLATION_SUBMIT_DIR
            channels.append({"ChannelName": "code", "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": source_uri, "S3DataDistributionType": "FullyReplicated"}}})
        program, pack = script.program_and_pack()
        hps: dict[str, Any] = {}
        tf_model_dir = _tensorflow_model_dir(self.image.framework, script.model_dir, dist_hps, self.job.output_path,
                                             job_name)
        if tf_model_dir is not None:
            hps["model_dir"] = tf_model_dir
        hps.update({"sagemaker_program": program, "sagemaker_submit_directory": submit_dir,
                    "sagemaker_container_log_level": script.container_log_level, "sagemaker_job_name": job_name,
                    "sagemaker_region": region})
        return hps, channels, source_uri, pack

    def build(self, *, job_name: str, region: str | None = None, allow_local_uris: bool = True) -> TrainingPlan:
        """The CreateTrainingJob request (see :func:`build_training`)."""
        from airflow_smdist.specs import best_practices
        from airflow_smdist.specs import distribution as dist_mod

        region = region or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        hyperparameters = dict(self.job.hyperparameters or {})
        distribution = dist_mod.resolve_distribution(self.distribution.distribution, self.distribution.distributed)
        max_run = self.stopping.max_run_seconds()
        self.image.check(self.script.entry_point)
        cluster = self.cluster.resolve()
        image, algorithm_advice = self.image.resolve(region, cluster, self.channels.input_mode, hyperparameters,
                                                     distribution)
        dist_hps = self.distribution_hyperparameters(distribution, cluster)
        advice = list(best_practices.check_training(
            instance_type=cluster.primary_type, instance_count=cluster.total_count, distribution=distribution,
            checkpoint_s3_uri=self.checkpoint.checkpoint_s3_uri, algorithm=self.image.algorithm,
            instance_groups=cluster.groups, spot=bool(self.stopping.use_spot_instances)))
        advice += [best_practices.Advice("warning", "algorithm", m) for m in algorithm_advice]
        world = best_practices.world_size(cluster.primary_type, cluster.total_count, distribution)
        scaling = self.scale_learning_rate(hyperparameters, world)
        for a in advice:
            (log.warning if a.level == "warning" else log.info)("%s", a)

        self.check_hyperparameter_names(hyperparameters, dist_hps)
        script_hps, channels, source_uri, pack = self.script_mode(job_name, region, dist_hps)
        channels += self.channels.to_channels(self.network.enable_network_isolation and bool(script_hps))
        all_hps: dict[str, Any] = {**hyperparameters, **dist_hps, **script_hps}
        request: dict[str, Any] = {
            "TrainingJobName": job_name,
            "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": self.channels.input_mode},
            "ResourceConfig": cluster.resource,
            "StoppingCondition": {"MaxRuntimeInSeconds": max_run},
            "HyperParameters": encode_hyperparameters(all_hps, script_mode=bool(script_hps)),
        }
        self.job.to_request(request)
        if channels:
            request["InputDataConfig"] = channels
        self.checkpoint.to_request(request)
        advice += self.stopping.to_request(request, max_run)
        self.network.to_request(request)
        request = {k: request[k] for k in REQUEST_ORDER if k in request}
        for a in best_practices.channels_matching_output(request):
            log.warning("%s", a)
            advice.append(a)

        validate_request("CreateTrainingJob", request, allow_local_uris=allow_local_uris)
        uploads = bool(script_hps) and source_uri != self.script.source_dir
        return TrainingPlan(request=request, source_dir=pack if uploads else None,
                            entry_point=self.script.entry_point, source_uri=source_uri if uploads else None,
                            advice=advice, lr_scaling=scaling, world_size=world)


#: The request's members in the order the builder has always written them (a stable rendering).
REQUEST_ORDER = ("TrainingJobName", "AlgorithmSpecification", "RoleArn", "OutputDataConfig", "ResourceConfig",
                 "StoppingCondition", "HyperParameters", "InputDataConfig", "CheckpointConfig",
                 "EnableManagedSpotTraining", "RetryStrategy", "Environment", "VpcConfig", "EnableNetworkIsolation",
                 "EnableInterContainerTrafficEncryption", "Tags")


def build_training(*, job_name: str, region: str | None = None, allow_local_uris: bool = True,
                   **arguments: Any) -> TrainingPlan:
    """Build a CreateTrainingJob request the way the SageMaker Python SDK (v2 estimators) would.

    The arguments are the fields of the spec sections (:data:`SECTIONS`, listed in :data:`TRAINING_ARGS`):

    * :class:`JobSection`: ``role``, ``output_path`` (both required), ``hyperparameters``,
      ``metric_definitions``, ``environment``, ``tags``;
    * :class:`ImageSection`: exactly one of ``image_uri``, ``algorithm`` (a built-in algorithm: its image from
      the SDK's data; ``algorithm_version``) and ``framework`` + ``framework_version`` (+ ``py_version``; +
      ``base_framework_version`` for huggingface, e.g. "pytorch2.5.1": a Deep Learning Container);
    * :class:`ClusterSection`: ``instance_type`` x ``instance_count`` or ``instance_groups``; ``volume_size``;
    * :class:`ScriptSection`: ``entry_point`` (+ ``source_dir``, ``code_location``) makes it a script-mode
      job; ``container_log_level``; ``model_dir`` (TensorFlow);
    * :class:`DistributionSection`: ``distribution`` takes the SDK v2 ``distribution=`` dict; ``distributed``
      the SDK v3 ``ModelTrainer(distributed=...)`` configuration (``Torchrun(...)``, ``MPI(...)``,
      ``SMP(...)`` objects or their dict forms, see :func:`airflow_smdist.specs.distribution.from_distributed`),
      which map to the same request; ``lr_scaling`` = {"base_learning_rate", "base_batch_size",
      "per_device_batch_size", "warmup_epochs", "rule" ("linear"|"sqrt"), "hyperparameter" (default
      "learning_rate"), "warmup_hyperparameter" (default "warmup_epochs")} computes the learning rate for the
      global batch (Goyal et al. 2017) and sends it as hyperparameters; the computation is logged and kept in
      ``plan.lr_scaling``;
    * :class:`ChannelsSection`: ``inputs`` maps channel names to an S3 prefix or a dict with ``s3_uri``,
      ``distribution`` (FullyReplicated|ShardedByS3Key), ``input_mode`` (File|FastFile|Pipe), ...;
      ``input_mode``;
    * :class:`StoppingSection`: ``max_run``, ``use_spot_instances``, ``max_wait``, ``max_retry_attempts``;
    * :class:`CheckpointSection`: ``checkpoint_s3_uri``, ``checkpoint_local_path``;
    * :class:`NetworkSection`: ``subnets``, ``security_group_ids``, ``enable_network_isolation``,
      ``encrypt_inter_container_traffic``.
    """
    return TrainingSpec.from_arguments(arguments).build(job_name=job_name, region=region,
                                                        allow_local_uris=allow_local_uris)


def training_request(**kwargs: Any) -> dict[str, Any]:
    """The CreateTrainingJob request for these arguments (see :func:`build_training`)."""
    return build_training(**kwargs).request
