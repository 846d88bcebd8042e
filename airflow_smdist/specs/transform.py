"""Batch inference requests: a DAG author's few arguments -> validated CreateModel / CreateTransformJob /
CreateProcessingJob requests.

* :func:`build_model` / :func:`model_request`: what the SageMaker SDK's ``Model`` / framework models send to
  CreateModel: the artifact (``ModelDataUrl``), the serving image (``image_uri``, or the SDK's inference
  image for ``framework`` + ``framework_version``), and where the inference code is
  (``SAGEMAKER_PROGRAM`` + ``SAGEMAKER_SUBMIT_DIRECTORY``: a ``sourcedir.tar.gz`` the caller uploads, as
  ``SKLearnModel(entry_point=...)`` does, or ``/opt/ml/model/code``, the ``code/`` directory inside
  model.tar.gz, as the PyTorch serving container and a training script that saves its code do).
* :func:`build_transform` / :func:`transform_request`: ``Transformer.transform(...)``'s CreateTransformJob
  (SplitType, BatchStrategy, MaxPayloadInMB, MaxConcurrentTransforms, AssembleWith, Accept / ContentType,
  DataProcessing, ModelClientConfig), with the service's rules checked here
  (docs/contracts.md §4.1).
* :func:`build_processing_inference`: the same inference as one processing job whose data input is
  ``ShardedByS3Key`` (the processing fan-out): the model's artifact and code as inputs, and the batch
  runner (:mod:`airflow_smdist.runtime.batch_runner`, uploaded as ``smdist_batch_runner.py``) applying
  the model's handlers to each object of the instance's shard, writing the same ``<key>.out`` names.

Pure: no file is read or written and no call is made. Uploads (a sourcedir, the runner) are named in the
request and left to the caller.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, cast

from airflow_smdist.specs.errors import MissingUploadLocation, SpecError, as_mapping, as_tags
from airflow_smdist.specs.training import _as_int  # the builders' one integer coercion
from airflow_smdist.specs.validate import validate_request

DEFAULT_REGION = "us-east-1"
SPLIT_TYPES = ("None", "Line", "RecordIO", "TFRecord")
BATCH_STRATEGIES = ("SingleRecord", "MultiRecord")
ASSEMBLE_WITH = ("None", "Line")
JOIN_SOURCES = ("None", "Input")
COMPRESSION = ("None", "Gzip")
#: The SDK's inference images looked up for ``framework=`` (default Python version where the SDK needs one).
INFERENCE_FRAMEWORKS = {"sklearn": "py3", "pytorch": None, "xgboost": None, "tensorflow": None,
                        "huggingface": None}
#: Where the serving containers look for inference code inside the model archive.
CODE_IN_MODEL = "/opt/ml/model/code"
DEFAULT_PROGRAM = "inference.py"
MAX_PAYLOAD_LIMIT = 100  # MB; also MaxConcurrentTransforms x MaxPayloadInMB
DEFAULT_MAX_PAYLOAD = 6
#: The processing fan-out's container paths
PROCESSING_DATA = "/opt/ml/processing/input/data"
PROCESSING_MODEL = "/opt/ml/processing/input/model"
PROCESSING_SOURCE = "/opt/ml/processing/input/sourcedir"
PROCESSING_OUTPUT = "/opt/ml/processing/output"
RUNNER_NAME = "smdist_batch_runner.py"


def _region(region: str | None) -> str:
    return region or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION




def _choice(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        import difflib

        close = difflib.get_close_matches(str(value), allowed, n=1)
        raise SpecError(name, f"{value!r} is not one of {', '.join(allowed)}.",
                        f"did you mean '{close[0]}'?" if close else f"use one of {', '.join(allowed)}.")
    return cast(str, value)


def _tags(tags: Any) -> list[dict[str, str]] | None:
    return as_tags(tags)


def _env(environment: Any, name: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in as_mapping(environment, name, "{'NAME': 'value'}").items()}


def inference_image_uri(framework: str, framework_version: str, instance_type: str, region: str | None = None,
                        py_version: str | None = None) -> str:
    """The SDK's serving image, e.g. ``("sklearn", "1.2-1", "ml.m5.xlarge")`` ->
    ``683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3``, read from the image
    tables the package ships (specs/image_tables/, no SDK); they load on first use: not at DAG-parse time."""
    fw = (framework or "").lower()
    if fw not in INFERENCE_FRAMEWORKS:
        raise SpecError("framework", f"{framework!r} has no inference image lookup here.",
                        f"use one of {', '.join(INFERENCE_FRAMEWORKS)}, or pass image_uri explicitly.")
    from airflow_smdist.specs.images import retrieve_image_uri
    from airflow_smdist.specs.instances import check_instance_type

    check_instance_type(instance_type, "instance_type", "transform")
    return retrieve_image_uri(fw, _region(region), version=str(framework_version),
                              py_version=py_version or INFERENCE_FRAMEWORKS[fw], instance_type=instance_type,
                              image_scope="inference")


# -- CreateModel -------------------------------------------------------------------------------------------
@dataclass
class ModelPlan:
    """The CreateModel request, and the inference code the caller must pack and upload for it (if any)."""

    request: dict[str, Any]
    #: local directory (or file) to pack as sourcedir.tar.gz and upload to ``source_uri``
    source_dir: str | None = None
    entry_point: str | None = None
    source_uri: str | None = None

    @property
    def image(self) -> str:
        return cast(str, self.request["PrimaryContainer"]["Image"])

    @property
    def model_data(self) -> str:
        return cast(str, self.request["PrimaryContainer"]["ModelDataUrl"])


def _inference_code(model_name: str, entry_point: str | None, source_dir: str | None, code_location: str | None,
                    program: str) -> tuple[dict[str, str], str | None, str | None]:
    """SAGEMAKER_PROGRAM / SAGEMAKER_SUBMIT_DIRECTORY, the source URI and what to pack (framework models)."""
    env: dict[str, str] = {}
    source_uri: str | None = None
    pack: str | None = None
    if entry_point:
        if os.path.isabs(entry_point) and source_dir or ".." in entry_point.split("/"):
            raise SpecError("entry_point", f"{entry_point!r} must be a path inside source_dir.",
                            "give it relative to source_dir, e.g. 'inference.py'.")
        if source_dir and source_dir.startswith("s3://"):
            if not source_dir.endswith(".tar.gz"):
                raise SpecError("source_dir", f"{source_dir!r} is an S3 URI but not a .tar.gz.",
                                "point it at a sourcedir.tar.gz, or give a local directory.")
            source_uri = source_dir
        else:
            if not code_location:
                raise MissingUploadLocation("code_location", "is required to upload the inference code.",
                                "give an S3 prefix, e.g. code_location='s3://my-bucket/code'.")
            source_uri = f"{code_location.rstrip('/')}/{model_name}/sourcedir.tar.gz"
            pack = source_dir or entry_point
        program_name = entry_point if source_dir else os.path.basename(entry_point)
        env.update({"SAGEMAKER_PROGRAM": program_name, "SAGEMAKER_SUBMIT_DIRECTORY": source_uri})
    else:
        if source_dir:
            raise SpecError("source_dir", "has no effect without entry_point.",
                            "give entry_point='inference.py' too, or leave both out when model.tar.gz holds "
                            "code/inference.py.")
        env.update({"SAGEMAKER_PROGRAM": program, "SAGEMAKER_SUBMIT_DIRECTORY": CODE_IN_MODEL})
    return env, source_uri, pack


def build_model(
    *,
    model_name: str,
    model_data: str,
    role: str,
    image_uri: str | None = None,
    framework: str | None = None,
    framework_version: str | None = None,
    py_version: str | None = None,
    instance_type: str = "ml.m5.xlarge",
    entry_point: str | None = None,
    source_dir: str | None = None,
    code_location: str | None = None,
    program: str = DEFAULT_PROGRAM,
    environment: dict[str, str] | None = None,
    container_log_level: int = 20,
    region: str | None = None,
    enable_network_isolation: bool = False,
    subnets: list[str] | None = None,
    security_group_ids: list[str] | None = None,
    tags: Any = None,
    allow_local_uris: bool = True,
) -> ModelPlan:
    """A CreateModel request for a model.tar.gz (``model_data``) served by ``image_uri`` or the SDK's
    inference image of ``framework`` + ``framework_version`` (``instance_type`` picks CPU or GPU).

    Inference code: ``entry_point`` (+ ``source_dir``) is packed as ``sourcedir.tar.gz`` and uploaded by the
    caller to ``<code_location>/<model_name>/sourcedir.tar.gz`` (``SAGEMAKER_SUBMIT_DIRECTORY``), as the SDK's
    framework models do without network isolation. Without ``entry_point``, the code is the ``code/``
    directory inside model.tar.gz and ``program`` its module (``SAGEMAKER_PROGRAM``, default inference.py).
    """
    region = _region(region)
    framework_version = None if framework_version is None else str(framework_version)
    if bool(image_uri) == bool(framework):
        raise SpecError("image_uri", f"{'both' if image_uri else 'neither'} of image_uri and framework given.",
                        "give image_uri='<ecr uri>', or framework='sklearn' with framework_version='1.2-1'.")
    if framework:
        if not framework_version:
            raise SpecError("framework_version", f"is required with framework={framework!r}.",
                            "give framework_version='1.2-1' (sklearn), '2.5' (pytorch), ...")
        image = inference_image_uri(framework, framework_version, instance_type, region, py_version)
    else:
        image = cast(str, image_uri)
    if not isinstance(model_data, str) or "://" not in model_data:
        raise SpecError("model_data", f"{model_data!r} is not a URI.",
                        "give the s3:// URI of model.tar.gz (a training job's ModelArtifacts.S3ModelArtifacts).")
    env, source_uri, pack = _inference_code(model_name, entry_point, source_dir, code_location, program)
    env.update({"SAGEMAKER_CONTAINER_LOG_LEVEL": str(int(container_log_level)), "SAGEMAKER_REGION": region})
    env.update(_env(environment, "environment"))
    request: dict[str, Any] = {
        "ModelName": model_name,
        "PrimaryContainer": {"Image": image, "ModelDataUrl": model_data, "Environment": env},
        "ExecutionRoleArn": role,
    }
    if subnets or security_group_ids:
        if not (subnets and security_group_ids):
            raise SpecError("subnets" if not subnets else "security_group_ids",
                            "VPC mode needs both subnets and security_group_ids.", "give both, or neither.")
        request["VpcConfig"] = {"Subnets": list(subnets), "SecurityGroupIds": list(security_group_ids)}
    if enable_network_isolation:
        if source_uri:
            raise SpecError("enable_network_isolation", "a model with network isolation cannot download its "
                            "code from S3 at start.",
                            "put the code in model.tar.gz (code/inference.py) and drop entry_point.")
        request["EnableNetworkIsolation"] = True
    tag_list = _tags(tags)
    if tag_list:
        request["Tags"] = tag_list
    validate_request("CreateModel", request, allow_local_uris=allow_local_uris)
    return ModelPlan(request=request, source_dir=pack, entry_point=entry_point if pack else None,
                     source_uri=source_uri if pack else None)


def model_request(**kwargs: Any) -> dict[str, Any]:
    """The CreateModel request for these arguments (see :func:`build_model`)."""
    return build_model(**kwargs).request


# -- CreateTransformJob -------------------------------------------------------------------------------------
def _check_jsonpath(path: Any, name: str) -> str:
    if not isinstance(path, str) or not path.startswith("$"):
        raise SpecError(name, f"{path!r} is not a JSONPath.", "start it with '$', e.g. '$[1:]' or '$.features'.")
    if len(path) > 63:
        raise SpecError(name, f"is {len(path)} characters long; at most 63 are allowed.", "shorten it.")
    try:
        from jsonpath_ng import parse  # type: ignore[attr-defined]  # re-exported, not in __all__
    except ImportError:  # the service checks it then
        return path
    inner = path[2:-1] if path.startswith("$[") and path.endswith("]") else None
    parts = [f"$[{p.strip()}]" for p in inner.split(",")] if inner and "," in inner and ":" in inner \
        and "'" not in inner and '"' not in inner else [path]
    for p in parts:
        try:
            parse(p)
        except Exception as e:  # noqa: BLE001 - jsonpath-ng raises its own error types
            raise SpecError(name, f"{path!r} is not a valid JSONPath ({e}).",
                            "see the JSONPath operators SageMaker supports: $, .name, ['a','b'], [0], [1:], "
                            "[0,5:], [*].") from None
    return path


@dataclass
class TransformSettings:
    """The record handling a transform request asks for, checked (and shared with the processing fan-out)."""

    content_type: str | None = None
    accept: str | None = None
    split_type: str = "None"
    compression: str = "None"
    batch_strategy: str | None = None
    max_payload_mb: int | None = None
    max_concurrent_transforms: int | None = None
    assemble_with: str | None = None
    input_filter: str | None = None
    join_source: str | None = None
    output_filter: str | None = None
    invocations_timeout: int | None = None
    invocations_max_retries: int | None = None
    advice: list[str] = field(default_factory=list)

    @property
    def data_processing(self) -> dict[str, str] | None:
        dp = {}
        if self.input_filter:
            dp["InputFilter"] = self.input_filter
        if self.output_filter:
            dp["OutputFilter"] = self.output_filter
        if self.join_source:
            dp["JoinSource"] = self.join_source
        return dp or None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and k != "advice"}


def check_settings(*, content_type: str | None = None, accept: str | None = None, split_type: str | None = None,
                   compression: str | None = None, batch_strategy: str | None = None,
                   max_payload_mb: Any = None, max_concurrent_transforms: Any = None,
                   assemble_with: str | None = None, input_filter: str | None = None,
                   join_source: str | None = None, output_filter: str | None = None,
                   invocations_timeout: Any = None, invocations_max_retries: Any = None) -> TransformSettings:
    """Check the transform settings against the service's rules; SpecError names the argument and the fix."""
    split = _choice(split_type or "None", "split_type", SPLIT_TYPES)
    comp = _choice(compression or "None", "compression", COMPRESSION)
    strategy = _choice(batch_strategy, "batch_strategy", BATCH_STRATEGIES) if batch_strategy else None
    if strategy == "MultiRecord" and split == "None":
        raise SpecError("batch_strategy", "MultiRecord packs several records into a request, but with "
                        "split_type None each object is one record.",
                        "give split_type='Line' (or RecordIO / TFRecord), or use SingleRecord.")
    payload = _as_int(max_payload_mb, "max_payload_mb", 0) if max_payload_mb is not None else None
    if payload is not None and payload > MAX_PAYLOAD_LIMIT:
        raise SpecError("max_payload_mb", f"{payload} is above the maximum {MAX_PAYLOAD_LIMIT}.",
                        f"use at most {MAX_PAYLOAD_LIMIT} MB.")
    concurrent = _as_int(max_concurrent_transforms, "max_concurrent_transforms", 0) \
        if max_concurrent_transforms is not None else None
    effective = DEFAULT_MAX_PAYLOAD if payload is None else payload
    if concurrent and effective and concurrent * effective > MAX_PAYLOAD_LIMIT:
        raise SpecError("max_concurrent_transforms",
                        f"{concurrent} concurrent requests x MaxPayloadInMB {effective} = "
                        f"{concurrent * effective} MB; SageMaker allows at most {MAX_PAYLOAD_LIMIT}.",
                        f"lower max_concurrent_transforms to {MAX_PAYLOAD_LIMIT // effective} or max_payload_mb "
                        f"to {MAX_PAYLOAD_LIMIT // concurrent}.")
    assemble = _choice(assemble_with, "assemble_with", ASSEMBLE_WITH) if assemble_with else None
    join = _choice(join_source, "join_source", JOIN_SOURCES) if join_source else None
    in_filter = _check_jsonpath(input_filter, "input_filter") if input_filter else None
    out_filter = _check_jsonpath(output_filter, "output_filter") if output_filter else None
    timeout = _as_int(invocations_timeout, "invocations_timeout", 1) if invocations_timeout is not None else None
    if timeout is not None and timeout > 3600:
        raise SpecError("invocations_timeout", f"{timeout} is above the maximum 3600.", "use at most 3600 seconds.")
    retries = _as_int(invocations_max_retries, "invocations_max_retries", 0) \
        if invocations_max_retries is not None else None
    if retries is not None and retries > 3:
        raise SpecError("invocations_max_retries", f"{retries} is above the maximum 3.", "use 0 to 3.")
    advice = []
    if split == "Line" and assemble != "Line":
        advice.append("split_type='Line' without assemble_with='Line' concatenates the responses without "
                      "separators; give assemble_with='Line' to keep one output line per request.")
    return TransformSettings(content_type=content_type, accept=accept, split_type=split, compression=comp,
                             batch_strategy=strategy, max_payload_mb=payload, max_concurrent_transforms=concurrent,
                             assemble_with=assemble, input_filter=in_filter, join_source=join,
                             output_filter=out_filter, invocations_timeout=timeout,
                             invocations_max_retries=retries, advice=advice)


def _transform_io(s: TransformSettings, data_type: str, input_uri: str, output_uri: str, compression: Any,
                  split_type: Any, output_kms_key: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """TransformInput and TransformOutput."""
    transform_input: dict[str, Any] = {"DataSource": {"S3DataSource": {"S3DataType": data_type, "S3Uri": input_uri}}}
    if s.content_type:
        transform_input["ContentType"] = s.content_type
    if compression:
        transform_input["CompressionType"] = s.compression
    if split_type:
        transform_input["SplitType"] = s.split_type
    transform_output: dict[str, Any] = {"S3OutputPath": output_uri}
    if s.accept:
        transform_output["Accept"] = s.accept
    if s.assemble_with:
        transform_output["AssembleWith"] = s.assemble_with
    if output_kms_key:
        transform_output["KmsKeyId"] = output_kms_key
    return transform_input, transform_output


def _settings_members(s: TransformSettings) -> dict[str, Any]:
    """BatchStrategy, MaxConcurrentTransforms, MaxPayloadInMB, ModelClientConfig, DataProcessing."""
    request: dict[str, Any] = {}
    if s.batch_strategy:
        request["BatchStrategy"] = s.batch_strategy
    if s.max_concurrent_transforms is not None:
        request["MaxConcurrentTransforms"] = s.max_concurrent_transforms
    if s.max_payload_mb is not None:
        request["MaxPayloadInMB"] = s.max_payload_mb
    mc = {}
    if s.invocations_timeout is not None:
        mc["InvocationsTimeoutInSeconds"] = s.invocations_timeout
    if s.invocations_max_retries is not None:
        mc["InvocationsMaxRetries"] = s.invocations_max_retries
    if mc:
        request["ModelClientConfig"] = mc
    if s.data_processing:
        request["DataProcessing"] = s.data_processing
    return request


def build_transform(
    *,
    job_name: str,
    model_name: str,
    input_uri: str,
    output_uri: str,
    instance_type: str = "ml.m5.xlarge",
    instance_count: int | str = 1,
    s3_data_type: str = "S3Prefix",
    content_type: str | None = None,
    split_type: str | None = None,
    compression: str | None = None,
    batch_strategy: str | None = None,
    max_payload_mb: int | str | None = None,
    max_concurrent_transforms: int | str | None = None,
    assemble_with: str | None = None,
    accept: str | None = None,
    input_filter: str | None = None,
    join_source: str | None = None,
    output_filter: str | None = None,
    environment: dict[str, str] | None = None,
    invocations_timeout: int | str | None = None,
    invocations_max_retries: int | str | None = None,
    output_kms_key: str | None = None,
    volume_kms_key: str | None = None,
    tags: Any = None,
    experiment_config: dict[str, str] | None = None,
    allow_local_uris: bool = True,
) -> dict[str, Any]:
    """The CreateTransformJob request ``Transformer(...).transform(...)`` sends, checked.

    ``input_uri`` is an S3 prefix (``s3_data_type='S3Prefix'``) or a ManifestFile; every object becomes
    ``<output_uri>/<key below the prefix>.out``; objects are spread over ``instance_count`` instances.
    ``split_type`` None|Line|RecordIO|TFRecord, ``batch_strategy`` SingleRecord|MultiRecord (MultiRecord
    needs a split type), ``max_payload_mb`` 0..100 (0: streaming), ``max_concurrent_transforms`` per
    instance (x max_payload_mb <= 100), ``assemble_with`` None|Line, ``input_filter`` / ``join_source``
    (None|Input) / ``output_filter`` JSONPaths (DataProcessing), ``invocations_timeout`` (1..3600 s) and
    ``invocations_max_retries`` (0..3) (ModelClientConfig).
    """
    from airflow_smdist.specs.instances import check_instance_type

    check_instance_type(instance_type, "instance_type", "transform")
    count = _as_int(instance_count, "instance_count")
    if count > 100:
        raise SpecError("instance_count", f"{count} is above the maximum 100.", "use at most 100 instances.")
    data_type = _choice(s3_data_type, "s3_data_type", ("S3Prefix", "ManifestFile"))
    for name, uri in (("input_uri", input_uri), ("output_uri", output_uri)):
        if not isinstance(uri, str) or "://" not in uri:
            raise SpecError(name, f"{uri!r} is not a URI.", "give an s3:// prefix.")
    s = check_settings(content_type=content_type, accept=accept, split_type=split_type, compression=compression,
                       batch_strategy=batch_strategy, max_payload_mb=max_payload_mb,
                       max_concurrent_transforms=max_concurrent_transforms, assemble_with=assemble_with,
                       input_filter=input_filter, join_source=join_source, output_filter=output_filter,
                       invocations_timeout=invocations_timeout, invocations_max_retries=invocations_max_retries)
    transform_input, transform_output = _transform_io(s, data_type, input_uri, output_uri, compression,
                                                      split_type, output_kms_key)
    resources: dict[str, Any] = {"InstanceType": instance_type, "InstanceCount": count}
    if volume_kms_key:
        resources["VolumeKmsKeyId"] = volume_kms_key
    request: dict[str, Any] = {"TransformJobName": job_name, "ModelName": model_name,
                               "TransformInput": transform_input, "TransformOutput": transform_output,
                               "TransformResources": resources}
    request.update(_settings_members(s))
    env = _env(environment, "environment")
    if env:
        request["Environment"] = env
    tag_list = _tags(tags)
    if tag_list:
        request["Tags"] = tag_list
    if experiment_config:
        request["ExperimentConfig"] = dict(experiment_config)
    validate_request("CreateTransformJob", request, allow_local_uris=allow_local_uris)
    return request


def transform_request(**kwargs: Any) -> dict[str, Any]:
    """The CreateTransformJob request for these arguments (see :func:`build_transform`)."""
    return build_transform(**kwargs)


# -- the processing fan-out ---------------------------------------------------------------------------------
def runner_arguments(settings: TransformSettings, *, defaults: str = "generic", program: str | None = None,
                     code_dir: str | None = None) -> list[str]:
    """The batch runner's command line for these settings (SageMaker's defaults filled in)."""
    from airflow_smdist.runtime.batch_runner import Settings

    runner = Settings(content_type=settings.content_type, accept=settings.accept, split_type=settings.split_type,
                      compression=settings.compression, batch_strategy=settings.batch_strategy or "SingleRecord",
                      max_payload_mb=(DEFAULT_MAX_PAYLOAD if settings.max_payload_mb is None
                                      else settings.max_payload_mb),
                      max_concurrent_transforms=settings.max_concurrent_transforms or 1,
                      assemble_with=settings.assemble_with or "None", input_filter=settings.input_filter,
                      join_source=settings.join_source or "None", output_filter=settings.output_filter,
                      invocations_timeout=float(settings.invocations_timeout or 600),
                      invocations_max_retries=3 if settings.invocations_max_retries is None
                      else settings.invocations_max_retries)
    args = runner.to_args() + ["--defaults", defaults, "--input", PROCESSING_DATA, "--output", PROCESSING_OUTPUT,
                               "--model", PROCESSING_MODEL]
    if program:
        args += ["--program", program]
    if code_dir:
        args += ["--code-dir", code_dir]
    return args


def build_processing_inference(
    *,
    job_name: str,
    role: str,
    model: dict[str, Any],
    input_uri: str,
    output_uri: str,
    runner: str,
    code_location: str | None = None,
    instance_type: str = "ml.m5.xlarge",
    instance_count: int | str = 1,
    s3_data_type: str = "S3Prefix",
    settings: TransformSettings | None = None,
    environment: dict[str, str] | None = None,
    max_runtime_in_seconds: int | str | None = 86400,
    volume_size_in_gb: int | str = 30,
    tags: Any = None,
    region: str | None = None,
    allow_local_uris: bool = True,
) -> Any:  # a ProcessingPlan (specs.processing, imported lazily)
    """The processing fan-out: a CreateProcessingJob whose ``data`` input is ``input_uri`` with
    ``ShardedByS3Key`` (each instance gets about 1/n of the objects), running the batch runner
    (``runner``: a local copy of :mod:`airflow_smdist.runtime.batch_runner` named
    ``smdist_batch_runner.py``, uploaded by the caller with ``specs.processing.upload_plan`` to
    ``<code_location>/<job>/input/code/``; or the s3:// URI of one) in the model's own image over the model's
    artifact and inference code. ``model`` is the CreateModel request (or DescribeModel response) of the
    model. Outputs: ``<output_uri>/<key below the prefix>.out``, as a transform job names them. Returns the
    processing builder's ProcessingPlan (``plan.uploads`` names the runner upload)."""
    from airflow_smdist.runtime.batch_runner import defaults_for_image
    from airflow_smdist.specs.processing import build_processing

    container = model.get("PrimaryContainer") or {}
    image, model_data = container.get("Image"), container.get("ModelDataUrl")
    if not image or not model_data:
        raise SpecError("model.PrimaryContainer", "needs Image and ModelDataUrl for the processing fan-out.",
                        "create the model from a model.tar.gz and an image (model_data=..., framework=...).")
    model_env = dict(container.get("Environment") or {})
    settings = settings or check_settings()
    inputs: dict[str, Any] = {
        "data": {"source": input_uri, "destination": PROCESSING_DATA, "distribution": "ShardedByS3Key",
                 "s3_data_type": _choice(s3_data_type, "s3_data_type", ("S3Prefix", "ManifestFile"))},
        "model": {"source": model_data, "destination": PROCESSING_MODEL},
    }
    submit = model_env.get("SAGEMAKER_SUBMIT_DIRECTORY", "")
    code_dir = None
    if "://" in submit:  # a sourcedir.tar.gz: the runner extracts it
        inputs["sourcedir"] = {"source": submit, "destination": PROCESSING_SOURCE}
        code_dir = f"{PROCESSING_SOURCE}/{submit.rstrip('/').rsplit('/', 1)[-1]}"
    args = runner_arguments(settings, defaults=defaults_for_image(image),
                            program=model_env.get("SAGEMAKER_PROGRAM"), code_dir=code_dir)
    env = {k: v for k, v in model_env.items() if k != "SAGEMAKER_SUBMIT_DIRECTORY"}
    env.update(_env(environment, "environment"))
    if os.path.basename(runner.rstrip("/")) != RUNNER_NAME:
        raise SpecError("runner", f"{runner!r} is not named {RUNNER_NAME}.",
                        f"upload the runner as {RUNNER_NAME} (its name keeps it apart from the model's "
                        "inference.py).")
    return build_processing(job_name=job_name, role=role, image_uri=image, code=runner, command=["python3"],
                            code_location=code_location,
                            arguments=args, inputs=inputs, outputs={"predictions": {
                                "source": PROCESSING_OUTPUT, "destination": output_uri}},
                            instance_type=instance_type, instance_count=instance_count,
                            volume_size_in_gb=volume_size_in_gb, max_runtime_in_seconds=max_runtime_in_seconds,
                            env=env or None, tags=tags, region=region, allow_local_uris=allow_local_uris)
