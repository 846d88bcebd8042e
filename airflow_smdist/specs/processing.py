"""Processing requests: a DAG author's few arguments -> a validated CreateProcessingJob request.

Two builders, each the request the SageMaker Python SDK's processor would send for the same arguments:

* :func:`build_pyspark_processing` / :func:`pyspark_processing_request`: ``PySparkProcessor.run(...)``.
  ``AppSpecification.ContainerEntrypoint`` is ``smspark-submit [--py-files csv] [--jars csv] [--files csv]
  [--local-spark-event-logs-dir /opt/ml/processing/spark-events/] /opt/ml/processing/input/code/<app>``,
  inputs are the user's, then ``py-files``, ``jars``, ``files``, ``conf`` (the EMR-style configuration as
  ``configuration.json``) and ``code``; outputs the user's, then ``spark-event-logs`` (Continuous) when event
  logs are asked for (docs/contracts.md §3.3). The image is the SDK's
  ``sagemaker-spark-processing`` image for the framework version and region.
* :func:`build_processing` / :func:`processing_request`: ``ScriptProcessor.run(code=...)`` (a script in a
  scikit-learn / framework / own image: ``command + [/opt/ml/processing/input/code/<script>]``) or
  ``Processor.run()`` with an explicit ``entrypoint``.

Pure: no file is read or written and no call is made while building. Local files (the app, its
dependencies, the configuration, local input sources) are *named* in the request at the URIs the SDK would
upload them to, and listed in ``plan.uploads``; :func:`upload_plan` is the one function here that does I/O,
for the caller (the operator, a test, a script) to run before submitting.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from airflow_smdist.specs.errors import MissingUploadLocation, SpecError, as_tags
from airflow_smdist.specs.training import _as_int  # the builders' one integer coercion
from airflow_smdist.specs.validate import validate_request

DEFAULT_REGION = "us-east-1"
OPERATION = "CreateProcessingJob"
#: Where the processing container contract puts inputs and outputs (API: LocalPath must begin with it).
PROCESSING_ROOT = "/opt/ml/processing/"
#: The SDK's container paths (ScriptProcessor._CODE_CONTAINER_BASE_PATH, _SparkProcessorBase).
INPUT_BASE = "/opt/ml/processing/input/"
OUTPUT_BASE = "/opt/ml/processing/output/"
CODE_INPUT = "code"
CONF_INPUT = "conf"
CONF_FILE = "configuration.json"
SPARK_COMMAND = "smspark-submit"
SPARK_EVENT_LOGS_DIR = "/opt/ml/processing/spark-events/"
SPARK_EVENT_LOGS_OUTPUT = "spark-event-logs"
#: spark-submit option -> the SDK's input channel for local files given to it
DEPENDENCY_CHANNELS = (("submit_py_files", "py-files"), ("submit_jars", "jars"), ("submit_files", "files"))

#: Classifications the SageMaker Spark container accepts (the SDK's SparkConfigUtils and the container's
#: config.py); ``export`` is the nested environment entry of the ``*-env`` ones.
SPARK_CLASSIFICATIONS = (
    "core-site", "hadoop-env", "hadoop-log4j", "hive-env", "hive-log4j", "hive-exec-log4j", "hive-site",
    "spark-defaults", "spark-env", "spark-log4j", "spark-hive-site", "spark-metrics", "yarn-env", "yarn-site",
    "export",
)
CONFIGURATION_KEYS = ("Classification", "Properties", "Configurations")
EMR_CONFIGURE_APPS_URL = "https://docs.aws.amazon.com/emr/latest/ReleaseGuide/emr-configure-apps.html"

INPUT_KEYS = {
    "source": "S3Uri", "s3_uri": "S3Uri",
    "destination": "LocalPath", "local_path": "LocalPath",
    "input_name": "InputName",
    "distribution": "S3DataDistributionType", "s3_data_distribution_type": "S3DataDistributionType",
    "s3_data_type": "S3DataType",
    "s3_input_mode": "S3InputMode", "input_mode": "S3InputMode",
    "s3_compression_type": "S3CompressionType",
    "app_managed": "AppManaged",
}
OUTPUT_KEYS = {
    "source": "LocalPath", "local_path": "LocalPath",
    "destination": "S3Uri", "s3_uri": "S3Uri",
    "output_name": "OutputName",
    "s3_upload_mode": "S3UploadMode", "upload_mode": "S3UploadMode",
    "app_managed": "AppManaged",
}
#: FrameworkProcessor (SDK 2.x) with ``source_dir``: the source bundle is unpacked in the code input and
#: ``runproc.sh`` (its own input) runs the script; both uploaded to ``<code_location>/<job>/source/``.
ENTRYPOINT_INPUT = "entrypoint"
SOURCE_CODE_DIR = "/opt/ml/processing/input/code/"
RUNPROC_COMMAND = ["/bin/bash", INPUT_BASE + ENTRYPOINT_INPUT + "/runproc.sh"]
#: ``FrameworkProcessor._generate_framework_script`` of SDK 2.257.7 (no CodeArtifact repository), verbatim:
#: tests/unit/test_sdk_v2_parity.py compares it with what that SDK uploads.
RUNPROC_TEMPLATE = """#!/bin/bash

cd /opt/ml/processing/input/code/
tar -xzf sourcedir.tar.gz

# Exit on any error. SageMaker uses error code to mark failed job.
set -e

if [[ -f 'requirements.txt' ]]; then
    # Optionally log into CodeArtifact
    if ! hash aws 2>/dev/null; then
        echo "AWS CLI is not installed. Skipping CodeArtifact login."
    else
        echo 'CodeArtifact repository not specified. Skipping login.'
    fi

    # Some py3 containers has typing, which may breaks pip install
    pip uninstall --yes typing

    {command} -m pip install -r requirements.txt
fi

{command} {script} "$@"
"""
NETWORK_KEYS = ("enable_network_isolation", "encrypt_inter_container_traffic", "security_group_ids", "subnets")
#: Frameworks whose image :func:`build_processing` looks up (``framework=``), and the image scope / default
#: Python version the SDK's processors use for them (SKLearnProcessor: py3; FrameworkProcessor: training).
SCRIPT_FRAMEWORKS = {"sklearn": "py3", "xgboost": None, "pytorch": None, "tensorflow": None}


@dataclass(frozen=True)
class Upload:
    """A local file or directory (``path``), or bytes (``data``), the request expects at ``uri``.

    For ``path``: a file lands at ``<uri>/<file name>``, a directory's files under ``<uri>/`` keeping their
    relative paths. For ``data``: ``uri`` is the object itself. ``what`` names it in errors and logs."""

    uri: str
    what: str
    path: str | None = None
    data: bytes | None = None
    #: the builder argument it comes from (named in errors)
    field: str = ""
    #: a directory is accepted (local input sources), else a file is required (scripts, dependencies)
    allow_dir: bool = False
    #: ``path`` (a directory) is packed as the gzipped tar ``uri`` (sourcedir.tar.gz) instead of copied
    pack: bool = False
    #: with ``pack``: the file the bundle must hold (the script), checked before uploading
    entry_point: str | None = None


@dataclass
class ProcessingPlan:
    """What a builder produced: the request, and what the caller must upload before submitting it."""

    request: dict[str, Any]
    uploads: list[Upload] = field(default_factory=list)
    spark: bool = False
    #: the validated EMR-style configuration (list form), for PySpark jobs
    configuration: list[dict[str, Any]] | None = None


# -- the builders' arguments, written once (the operators derive theirs from these) -------------------------
@dataclass(kw_only=True)
class ProcessingArguments:
    """What every processing job takes (the SDK processors' common arguments)."""

    role: str
    instance_type: str = "ml.m5.xlarge"
    instance_count: int | str = 1
    inputs: Any = None
    outputs: Any = None
    arguments: list[Any] | None = None
    code_location: str | None = None
    volume_size_in_gb: int | str = 30
    volume_kms_key: str | None = None
    output_kms_key: str | None = None
    max_runtime_in_seconds: int | str | None = None
    env: dict[str, str] | None = None
    network_config: dict[str, Any] | None = None
    tags: Any = None
    experiment_config: dict[str, str] | None = None


@dataclass(kw_only=True)
class PySparkArguments(ProcessingArguments):
    """``PySparkProcessor(...).run(submit_app, ...)``'s own arguments (see :func:`build_pyspark_processing`)."""

    submit_app: str
    framework_version: str | None = None
    py_version: str | None = None
    container_version: str | None = None
    image_uri: str | None = None
    submit_py_files: list[str] | None = None
    submit_jars: list[str] | None = None
    submit_files: list[str] | None = None
    configuration: Any = None
    spark_event_logs_s3_uri: str | None = None
    dependency_location: str | None = None
    configuration_location: str | None = None


@dataclass(kw_only=True)
class ScriptArguments(ProcessingArguments):
    """``ScriptProcessor`` / ``FrameworkProcessor`` / ``Processor``'s own arguments (see
    :func:`build_processing`)."""

    image_uri: str | None = None
    framework: str | None = None
    framework_version: str | None = None
    py_version: str | None = None
    code: str | None = None
    source_dir: str | None = None
    command: list[str] | None = None
    entrypoint: list[str] | None = None


_Args = TypeVar("_Args", bound=ProcessingArguments)


def _arguments(cls: type[_Args], arguments: dict[str, Any], builder: str) -> _Args:
    """The builder's keyword arguments as ``cls`` (TypeError for an unknown or missing one, as a function)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(arguments) - names)
    if unknown:
        raise TypeError(f"{builder}() got an unexpected keyword argument {unknown[0]!r}")
    missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.name not in arguments]
    if missing:
        raise TypeError(f"{builder}() missing required keyword argument {missing[0]!r}")
    return cls(**arguments)


# -- small argument checks -------------------------------------------------------------------------------


def _as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise SpecError(name, f"{value!r} is not a boolean.", "give True or False.")


def _str_list(value: Any, name: str) -> list[str]:
    """A list of strings; numbers (as Jinja may render them) become strings; one string is not a list."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise SpecError(name, f"{value!r} is not a list.", f"give a list, e.g. {name}=['--flag', 'value'].")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise SpecError(f"{name}[{i}]", f"{item!r} is not a string.", "give strings (numbers are converted).")
        out.append(item if isinstance(item, str) else str(item))
    return out


def _is_uri(value: str) -> bool:
    return isinstance(value, str) and "://" in value


def _check_uri(value: str, name: str, allow_local: bool) -> None:
    scheme = value.split("://", 1)[0]
    if scheme == "s3" or (allow_local and scheme == "file"):
        return
    raise SpecError(name, f"{value!r} is not an S3 URI.",
                    "give s3://bucket/key" + (" (or file:///abs/path on the local backend)." if allow_local else "."))


def _check_local_path(path: Any, name: str) -> str:
    if not isinstance(path, str) or not path:
        raise SpecError(name, f"{path!r} is not a container path.", f"give a path under {PROCESSING_ROOT}.")
    norm = posixpath.normpath(path)
    if not (path.startswith(PROCESSING_ROOT) and norm.startswith(PROCESSING_ROOT.rstrip("/") + "/")) \
            or ".." in path.split("/"):
        raise SpecError(name, f"{path!r} is outside {PROCESSING_ROOT}.",
                        f"processing containers read and write under {PROCESSING_ROOT} only, e.g. "
                        f"'{INPUT_BASE}data' or '{OUTPUT_BASE}train'.")
    return path


def _join(base: str, *parts: str) -> str:
    out = base.rstrip("/")
    for p in parts:
        out += "/" + p.strip("/")
    return out


def _prefix(name: str, location: str | None, job_name: str, what: str, allow_local: bool) -> str:
    if not location:
        raise MissingUploadLocation(name, f"is required to upload {what}: the request must name where it lives.",
                        "give an S3 prefix, e.g. code_location='s3://my-bucket/smdist' (the SageMaker SDK uses "
                        "s3://sagemaker-<region>-<account>); the file is uploaded to <prefix>/<job>/input/<channel>.")
    _check_uri(location, name, allow_local)
    return _join(location, job_name, "input")


def _tags(tags: Any) -> list[dict[str, str]] | None:
    return as_tags(tags)


def network_config_request(network_config: Any) -> dict[str, Any] | None:
    """The SDK's ``NetworkConfig(...)._to_request_dict()`` from its keyword arguments (or the API shape)."""
    if network_config is None:
        return None
    if not isinstance(network_config, dict):
        raise SpecError("network_config", f"{network_config!r} is not a dict.",
                        f"give a dict with {', '.join(NETWORK_KEYS)}.")
    if set(network_config) & {"EnableNetworkIsolation", "EnableInterContainerTrafficEncryption", "VpcConfig"}:
        return dict(network_config)  # already the API's shape
    unknown = set(network_config) - set(NETWORK_KEYS)
    if unknown:
        import difflib

        bad = sorted(unknown)[0]
        close = difflib.get_close_matches(bad, NETWORK_KEYS, n=1)
        raise SpecError(f"network_config.{bad}", "is not a NetworkConfig setting.",
                        f"did you mean '{close[0]}'?" if close else f"use {', '.join(NETWORK_KEYS)}.")
    isolation = network_config.get("enable_network_isolation")
    out: dict[str, Any] = {"EnableNetworkIsolation": False if isolation is None else
                           _as_bool(isolation, "network_config.enable_network_isolation")}
    if network_config.get("encrypt_inter_container_traffic") is not None:
        out["EnableInterContainerTrafficEncryption"] = _as_bool(
            network_config["encrypt_inter_container_traffic"], "network_config.encrypt_inter_container_traffic")
    sgs, subnets = network_config.get("security_group_ids"), network_config.get("subnets")
    if sgs is not None or subnets is not None:
        if not (sgs and subnets):
            raise SpecError("network_config.subnets" if not subnets else "network_config.security_group_ids",
                            "VPC mode needs both subnets and security_group_ids.", "give both, or neither.")
        out["VpcConfig"] = {"SecurityGroupIds": _str_list(sgs, "network_config.security_group_ids"),
                            "Subnets": _str_list(subnets, "network_config.subnets")}
    return out


# -- configuration (EMR-style classifications) -------------------------------------------------------------
def validate_configuration(configuration: Any, field_name: str = "configuration") -> list[dict[str, Any]]:
    """Check an EMR-style configuration (a classification dict or a list of them) and return it as a list.

    Each entry is ``{"Classification": <one of SPARK_CLASSIFICATIONS>, "Properties": {str: str},
    "Configurations": [entries]}``. Property values that are numbers or booleans (as Jinja renders them)
    become strings, as EMR takes them; ``Properties`` may be left out next to ``Configurations`` (it is then
    ``{}``). ``export`` (environment variables) is only meaningful nested inside a ``*-env`` classification.
    """
    if isinstance(configuration, dict):
        entries, listed = [configuration], False
    elif isinstance(configuration, list):
        entries, listed = configuration, True
    else:
        raise SpecError(field_name, f"{configuration!r} is neither a classification dict nor a list of them.",
                        "give [{'Classification': 'spark-defaults', 'Properties': {'spark.executor.memory': '2g'}}] "
                        f"(see {EMR_CONFIGURE_APPS_URL}).")
    return [_classification(e, f"{field_name}[{i}]" if listed else field_name, None) for i, e in enumerate(entries)]


def _properties(props: Any, where: str) -> dict[str, str]:
    """A classification's ``Properties`` with numbers and booleans as strings (as EMR takes them)."""
    if not isinstance(props, dict):
        raise SpecError(f"{where}.Properties", f"{props!r} is not a mapping of property names to values.",
                        "give {'spark.executor.memory': '2g'}.")
    clean_props: dict[str, str] = {}
    for k, v in props.items():
        if not isinstance(k, str) or not k:
            raise SpecError(f"{where}.Properties", f"property name {k!r} is not a non-empty string.",
                            "name properties with strings.")
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (int, float)):
            v = str(v)
        elif not isinstance(v, str):
            raise SpecError(f"{where}.Properties[{k!r}]", f"{v!r} is not a string.",
                            "EMR-style property values are strings (numbers and booleans are converted).")
        clean_props[k] = v
    return clean_props


def _check_nesting(entry: dict[str, Any], name: str, parent: str | None, where: str) -> None:
    """``export`` only inside a ``*-env`` classification, and a ``*-env`` one only with ``export`` entries."""
    if name == "export" and not (parent or "").endswith("-env"):
        raise SpecError(f"{where}.Classification", "'export' sets environment variables and only means something "
                        "nested inside a *-env classification.",
                        "put it under {'Classification': 'spark-env', 'Configurations': [{'Classification': "
                        "'export', 'Properties': {...}}]}.")
    if name.endswith("-env"):
        nested = entry.get("Configurations")
        if not nested or not all(isinstance(c, dict) and c.get("Classification") == "export" for c in nested):
            raise SpecError(f"{where}.Configurations", f"{name!r} sets environment variables through nested 'export' "
                            "classifications, and has none (the Spark container rejects it).",
                            f"give {{'Classification': '{name}', 'Properties': {{}}, 'Configurations': "
                            "[{'Classification': 'export', 'Properties': {'NAME': 'value'}}]}.")


def _classification(entry: Any, where: str, parent: str | None) -> dict[str, Any]:
    import difflib

    if not isinstance(entry, dict):
        raise SpecError(where, f"{entry!r} is not a classification dict.",
                        "give {'Classification': ..., 'Properties': {...}}.")
    for key in entry:
        if key not in CONFIGURATION_KEYS:
            close = difflib.get_close_matches(str(key), CONFIGURATION_KEYS, n=1)
            raise SpecError(f"{where}.{key}", "is not a member of a classification.",
                            f"did you mean '{close[0]}'?" if close else f"use {', '.join(CONFIGURATION_KEYS)}.")
    name = entry.get("Classification")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}.Classification", "is required.", "name the classification, e.g. 'spark-defaults'.")
    if name not in SPARK_CLASSIFICATIONS:
        close = difflib.get_close_matches(name, SPARK_CLASSIFICATIONS, n=1)
        raise SpecError(f"{where}.Classification", f"{name!r} is not a classification the SageMaker Spark "
                        "container accepts.", f"did you mean '{close[0]}'?" if close else
                        f"use one of {', '.join(SPARK_CLASSIFICATIONS)}.")
    _check_nesting(entry, name, parent, where)
    if "Properties" not in entry and "Configurations" not in entry:
        raise SpecError(f"{where}.Properties", "is required.",
                        "give the classification's properties, e.g. {'spark.executor.memory': '2g'}.")
    clean_props = _properties(entry.get("Properties", {}), where)
    out: dict[str, Any] = {"Classification": name, "Properties": clean_props}
    if "Configurations" in entry:
        nested = entry["Configurations"]
        if not isinstance(nested, list):
            raise SpecError(f"{where}.Configurations", f"{nested!r} is not a list.", "give a list of classifications.")
        out["Configurations"] = [_classification(c, f"{where}.Configurations[{i}]", name)
                                 for i, c in enumerate(nested)]
    return out


def spark_defaults(configuration: list[dict[str, Any]] | None) -> dict[str, str]:
    """The ``spark-defaults`` properties of a (validated) configuration, later ones winning."""
    out: dict[str, str] = {}
    for entry in configuration or []:
        if entry["Classification"] == "spark-defaults":
            out.update(entry.get("Properties", {}))
    return out


# -- inputs and outputs ---------------------------------------------------------------------------------------
def _entries(spec: Any, name: str, name_key: str) -> list[tuple[str | None, Any]]:
    """``{name: spec}`` or ``[spec, ...]`` (names in the specs, else input-N / output-N) -> [(name, spec)]."""
    if spec is None:
        return []
    if isinstance(spec, dict):
        return [(str(k), v) for k, v in spec.items()]
    if isinstance(spec, list):
        out = []
        for i, item in enumerate(spec):
            if not isinstance(item, dict):
                raise SpecError(f"{name}[{i}]", f"{item!r} is not a dict.",
                                f"give {{'{name_key}': ..., 'source': ..., 'destination': ...}}.")
            api = item.get("InputName") or item.get("OutputName")
            out.append((item.get(name_key) or api or None, item))
        return out
    raise SpecError(name, f"{spec!r} is neither a dict of name -> spec nor a list of specs.",
                    f"give {name}={{'raw': 's3://bucket/raw/'}}.")


def _settings(spec: dict[str, Any], keys: dict[str, str], where: str) -> dict[str, Any]:
    import difflib

    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key not in keys:
            close = difflib.get_close_matches(key, list(keys), n=1)
            raise SpecError(f"{where}.{key}", "is not a setting here.",
                            f"did you mean '{close[0]}'?" if close else f"use one of {sorted(set(keys))}.")
        api = keys[key]
        if api in out and out[api] != value:
            raise SpecError(f"{where}.{key}", "is given twice under two names.", "give it once.")
        out[api] = value
    return out


def _inputs(spec: Any, job_name: str, code_location: str | None, allow_local: bool,
            uploads: list[Upload]) -> list[dict[str, Any]]:
    out = []
    for i, (name, item) in enumerate(_entries(spec, "inputs", "input_name"), 1):
        where = f"inputs[{name!r}]" if name else f"inputs[{i - 1}]"
        name = name or f"input-{i}"  # the SDK's _normalize_inputs
        if isinstance(item, dict) and ("S3Input" in item or "DatasetDefinition" in item):
            entry = {"InputName": name, **{k: v for k, v in item.items() if k != "InputName"}}
            if "S3Input" in entry:
                _check_local_path(entry["S3Input"].get("LocalPath"), f"{where}.S3Input.LocalPath")
            out.append(entry)
            continue
        s = _settings({"source": item} if isinstance(item, str) else item, INPUT_KEYS, where) \
            if isinstance(item, (str, dict)) else None
        if s is None:
            raise SpecError(where, f"{item!r} is neither a URI nor a dict.",
                            "give 's3://bucket/prefix' or {'source': ..., 'destination': ..., "
                            "'distribution': 'ShardedByS3Key'}.")
        s.pop("InputName", None)
        source = s.get("S3Uri")
        if not source or not isinstance(source, str):
            raise SpecError(f"{where}.source", "is required.", "give the input's s3:// prefix (or a local path).")
        if _is_uri(source):
            _check_uri(source, f"{where}.source", allow_local)
        else:  # a local file or directory: the SDK uploads it to s3://<bucket>/<job>/input/<name>
            prefix = _join(_prefix("code_location", code_location, job_name, f"local input {source!r}", allow_local),
                           name) + "/"
            uploads.append(Upload(uri=prefix, what=f"input {name!r}", path=source, field=f"{where}.source",
                                  allow_dir=True))
            source = prefix
        local = _check_local_path(s.get("LocalPath") or INPUT_BASE + name, f"{where}.destination")
        s3 = {"S3Uri": source, "LocalPath": local,
              "S3DataType": s.get("S3DataType", "S3Prefix"),
              "S3InputMode": s.get("S3InputMode", "File"),
              "S3DataDistributionType": s.get("S3DataDistributionType", "FullyReplicated"),
              "S3CompressionType": s.get("S3CompressionType", "None")}
        entry = {"InputName": name, "AppManaged": _as_bool(s.get("AppManaged", False), f"{where}.app_managed"),
                 "S3Input": s3}
        out.append(entry)
    return out


def _outputs(spec: Any, allow_local: bool) -> list[dict[str, Any]]:
    out = []
    for i, (name, item) in enumerate(_entries(spec, "outputs", "output_name"), 1):
        where = f"outputs[{name!r}]" if name else f"outputs[{i - 1}]"
        name = name or f"output-{i}"
        if isinstance(item, dict) and ("S3Output" in item or "FeatureStoreOutput" in item):
            entry = {"OutputName": name, **{k: v for k, v in item.items() if k != "OutputName"}}
            if "S3Output" in entry:
                _check_local_path(entry["S3Output"].get("LocalPath"), f"{where}.S3Output.LocalPath")
            out.append(entry)
            continue
        if not isinstance(item, (str, dict)):
            raise SpecError(where, f"{item!r} is neither a URI nor a dict.",
                            "give 's3://bucket/out/' or {'source': '/opt/ml/processing/output/x', "
                            "'destination': 's3://...'}.")
        s = _settings({"destination": item} if isinstance(item, str) else item, OUTPUT_KEYS, where)
        s.pop("OutputName", None)
        dest = s.get("S3Uri")
        if not dest or not isinstance(dest, str):
            raise SpecError(f"{where}.destination", "is required.", "give the s3:// prefix the output is uploaded to.")
        _check_uri(dest, f"{where}.destination", allow_local)
        local = _check_local_path(s.get("LocalPath") or OUTPUT_BASE + name, f"{where}.source")
        entry = {"OutputName": name, "AppManaged": _as_bool(s.get("AppManaged", False), f"{where}.app_managed"),
                 "S3Output": {"S3Uri": dest, "LocalPath": local, "S3UploadMode": s.get("S3UploadMode", "EndOfJob")}}
        out.append(entry)
    return out


def _check_unique(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], reserved_inputs: tuple[str, ...],
                  reserved_outputs: tuple[str, ...]) -> None:
    seen: dict[str, str] = {}
    paths: dict[str, str] = {}
    for entry in inputs:
        name = entry["InputName"]
        if name in reserved_inputs:
            raise SpecError(f"inputs[{name!r}]", "is a name the processor gives its own input.",
                            f"rename it (reserved: {', '.join(reserved_inputs)}).")
        if name in seen:
            raise SpecError(f"inputs[{name!r}]", "is given twice.", "input names must be unique.")
        seen[name] = name
        local = (entry.get("S3Input") or {}).get("LocalPath")
        if local:
            key = local.rstrip("/")
            if key in paths:
                raise SpecError(f"inputs[{name!r}].destination", f"{local!r} is also the destination of input "
                                f"{paths[key]!r}.", "give every input its own directory.")
            paths[key] = name
    out_seen = set()
    for entry in outputs:
        name = entry["OutputName"]
        if name in reserved_outputs:
            raise SpecError(f"outputs[{name!r}]", "is a name the processor gives its own output.",
                            f"rename it (reserved: {', '.join(reserved_outputs)}).")
        if name in out_seen:
            raise SpecError(f"outputs[{name!r}]", "is given twice.", "output names must be unique.")
        out_seen.add(name)


def _code_input(code: str, job_name: str, code_location: str | None, allow_local: bool, what: str,
                uploads: list[Upload]) -> tuple[dict[str, Any], str]:
    """The ``code`` input (ScriptProcessor._include_code_in_inputs) and the script's base name."""
    if not isinstance(code, str) or not code:
        raise SpecError(what, "is required.", "give the script: a local file or an s3:// URI.")
    if _is_uri(code) and not code.startswith("file://"):
        _check_uri(code, what, allow_local)
        uri = code
        basename = posixpath.basename(code.split("://", 1)[1].rstrip("/"))
    else:
        path = code[len("file://"):] if code.startswith("file://") else code
        basename = os.path.basename(path.rstrip("/"))
        prefix = _join(_prefix("code_location", code_location, job_name, f"{what} {code!r}", allow_local), CODE_INPUT)
        uploads.append(Upload(uri=prefix, what=what, path=path, field=what))
        uri = f"{prefix}/{basename}"
    if not basename:
        raise SpecError(what, f"{code!r} names no file.", "give the path of the script file.")
    entry = {"InputName": CODE_INPUT,
             "S3Input": {"S3Uri": uri, "LocalPath": INPUT_BASE + CODE_INPUT, "S3DataType": "S3Prefix",
                         "S3InputMode": "File", "S3DataDistributionType": "FullyReplicated",
                         "S3CompressionType": "None"}}
    return entry, basename


def _request(a: ProcessingArguments, *, job_name: str, image: str, entrypoint: list[str] | None,
             inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The request in the order and shape of the SDK's ``_get_process_request``."""
    from airflow_smdist.specs import instances

    instances.check_instance_type(a.instance_type, "instance_type", "processing")
    cluster = {"InstanceType": a.instance_type, "InstanceCount": _as_int(a.instance_count, "instance_count"),
               "VolumeSizeInGB": _as_int(a.volume_size_in_gb, "volume_size_in_gb")}
    if a.volume_kms_key:
        cluster["VolumeKmsKeyId"] = a.volume_kms_key
    app: dict[str, Any] = {"ImageUri": image}
    arguments = _str_list(a.arguments, "arguments")
    if arguments:
        app["ContainerArguments"] = arguments
    if entrypoint:
        app["ContainerEntrypoint"] = entrypoint
    request: dict[str, Any] = {"ProcessingJobName": job_name, "ProcessingResources": {"ClusterConfig": cluster},
                               "AppSpecification": app, "RoleArn": a.role}
    # AppManaged on every input and output, false unless set: what SDK 2's ProcessingInput/ProcessingOutput
    # always send (the API's default; SDK 3 leaves it out)
    inputs = [{"InputName": entry["InputName"], "AppManaged": False, **entry} for entry in inputs]
    outputs = [{"OutputName": entry["OutputName"], "AppManaged": False, **entry} for entry in outputs]
    if inputs:
        request["ProcessingInputs"] = inputs
    if outputs:
        request["ProcessingOutputConfig"] = {"Outputs": outputs}
        if a.output_kms_key:
            request["ProcessingOutputConfig"]["KmsKeyId"] = a.output_kms_key
    if a.env:
        if not isinstance(a.env, dict):
            raise SpecError("env", f"{a.env!r} is not a dict.", "give env={'NAME': 'value'}.")
        request["Environment"] = {str(k): str(v) for k, v in a.env.items()}
    network = network_config_request(a.network_config)
    if network is not None:
        request["NetworkConfig"] = network
    if a.max_runtime_in_seconds is not None:
        request["StoppingCondition"] = {
            "MaxRuntimeInSeconds": _as_int(a.max_runtime_in_seconds, "max_runtime_in_seconds")}
    formatted = _tags(a.tags)
    if formatted is not None:
        request["Tags"] = formatted
    if a.experiment_config:
        request["ExperimentConfig"] = dict(a.experiment_config)
    return request


def _region(region: str | None) -> str:
    return region or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


# -- PySpark ----------------------------------------------------------------------------------------------------
def spark_image_uri(framework_version: str, region: str, instance_type: str, py_version: str | None = None,
                    container_version: str | None = None) -> str:
    """The SageMaker Spark processing image (``sagemaker-spark-processing``) for a Spark version and region,
    from the SDK's bundled data: ``spark_image_uri("3.5", "us-east-1", "ml.m5.xlarge")`` ->
    ``173754725891.dkr.ecr.us-east-1.amazonaws.com/sagemaker-spark-processing:3.5-cpu``. ``py_version`` and
    ``container_version`` (e.g. "py312", "1.0") go together, as in PySparkProcessor."""
    if (py_version is None) != (container_version is None):
        raise SpecError("py_version" if py_version is None else "container_version",
                        "py_version and container_version are given both or neither (the image tag is "
                        "<version>-cpu-<py_version>-v<container_version>).",
                        "give both, e.g. py_version='py312', container_version='1.0', or neither.")
    from airflow_smdist.specs.images import retrieve_image_uri

    cv = None
    if container_version is not None:
        cv = str(container_version)
        cv = cv if cv.startswith("v") else f"v{cv}"
    return retrieve_image_uri("spark", region, version=str(framework_version), instance_type=instance_type,
                              py_version=py_version, container_version=cv,
                              fields={"other": "framework_version"})


def _dependency(arg: str, channel: str, value: Any, location: str | None, job_name: str, allow_local: bool,
                uploads: list[Upload], extra_inputs: list[dict[str, Any]]) -> list[str]:
    """One of spark-submit's --py-files / --jars / --files: its URIs as the container sees them. Local files
    are uploaded to ``<location>/<job>/input/<channel>`` and given as that channel's directory (an input)."""
    paths = _str_list(value, arg)
    if not paths:
        raise SpecError(arg, "is an empty list.", "give one or more s3:// URIs or local files, or leave it out.")
    uris, local = [], []
    for i, p in enumerate(paths):
        scheme = p.split("://", 1)[0] if "://" in p else ""
        if scheme in ("s3", "s3a"):
            uris.append(p)
        elif scheme in ("", "file"):
            local.append(p.removeprefix("file://"))
        else:
            raise SpecError(f"{arg}[{i}]", f"{p!r} uses the scheme {scheme!r}.", "give s3:// URIs or local file paths.")
    if local:
        names = [os.path.basename(p) for p in local]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise SpecError(arg, f"two local files are named {dup!r}; they would overwrite each other in "
                            f"/opt/ml/processing/input/{channel}.", "rename one of them.")
        prefix = _join(_prefix("dependency_location", location, job_name, f"local {arg}", allow_local), channel)
        uploads.extend(Upload(uri=prefix, what=f"{arg} {p!r}", path=p, field=arg) for p in local)
        extra_inputs.append(_s3_input(channel, prefix, INPUT_BASE + channel))
        uris.append(INPUT_BASE + channel)
    return uris


def build_pyspark_processing(*, job_name: str, region: str | None = None, allow_local_uris: bool = True,
                             **arguments: Any) -> ProcessingPlan:
    """Build the CreateProcessingJob request of ``PySparkProcessor(...).run(submit_app, ...)``.

    ``submit_app`` is the PySpark application (a local file, uploaded to ``<code_location>/<job>/input/code/``,
    or an s3:// URI). ``submit_py_files`` / ``submit_jars`` / ``submit_files`` are lists of s3:// URIs and
    local files (local ones uploaded to ``<dependency_location>/<job>/input/{py-files,jars,files}`` and
    passed as that channel's container directory). ``configuration`` is the EMR-style classification list
    (validated: names and property shapes), uploaded as ``<configuration_location>/<job>/input/conf/
    configuration.json``. ``spark_event_logs_s3_uri`` keeps the Spark event logs (the history server's
    input) there. ``framework_version`` (with ``py_version`` + ``container_version``, or neither) picks the
    Spark image for the region; or give ``image_uri``.

    ``inputs``: ``{name: 's3://...'}`` or ``{name: {'source': uri-or-local-path, 'destination':
    '/opt/ml/processing/input/<name>', 'distribution': 'FullyReplicated'|'ShardedByS3Key', 's3_data_type',
    's3_input_mode', 's3_compression_type'}}`` (or a list of such dicts with ``input_name``).
    ``outputs``: ``{name: 's3://...'}`` or ``{name: {'source': '/opt/ml/processing/output/<name>',
    'destination': 's3://...', 's3_upload_mode': 'EndOfJob'|'Continuous'}}``.
    """
    a = _arguments(PySparkArguments, arguments, "build_pyspark_processing")
    region = _region(region)
    uploads: list[Upload] = []
    if a.framework_version is not None:
        a.framework_version = str(a.framework_version)
    if a.image_uri:
        if a.framework_version or a.py_version or a.container_version:
            raise SpecError("image_uri", "is given together with framework_version/py_version/container_version.",
                            "give image_uri, or the versions that pick the SageMaker Spark image, not both.")
        image = a.image_uri
    else:
        if not a.framework_version:
            raise SpecError("framework_version", "is required to pick the SageMaker Spark image.",
                            "give framework_version='3.5' (Spark version), or image_uri.")
        from airflow_smdist.specs import instances

        instances.check_instance_type(a.instance_type, "instance_type", "processing")
        image = spark_image_uri(a.framework_version, region, a.instance_type, a.py_version, a.container_version)

    user_inputs = _inputs(a.inputs, job_name, a.code_location, allow_local_uris, uploads)
    user_outputs = _outputs(a.outputs, allow_local_uris)
    reserved_in = (CODE_INPUT, CONF_INPUT) + tuple(ch for _arg, ch in DEPENDENCY_CHANNELS)
    _check_unique(user_inputs, user_outputs, reserved_in, (SPARK_EVENT_LOGS_OUTPUT,))

    # -- smspark-submit options, in PySparkProcessor._extend_processing_args' order ------------------------
    command = [SPARK_COMMAND]
    extra_inputs: list[dict[str, Any]] = []
    deps = {"submit_py_files": a.submit_py_files, "submit_jars": a.submit_jars, "submit_files": a.submit_files}
    for arg, channel in DEPENDENCY_CHANNELS:
        if deps[arg] is None:
            continue
        uris = _dependency(arg, channel, deps[arg], a.dependency_location or a.code_location, job_name,
                           allow_local_uris, uploads, extra_inputs)
        command += [f"--{channel}", ",".join(uris)]

    spark_outputs: list[dict[str, Any]] = []
    if a.spark_event_logs_s3_uri:
        _check_uri(a.spark_event_logs_s3_uri, "spark_event_logs_s3_uri", allow_local_uris)
        command += ["--local-spark-event-logs-dir", SPARK_EVENT_LOGS_DIR]
        spark_outputs.append({"OutputName": SPARK_EVENT_LOGS_OUTPUT,
                              "S3Output": {"S3Uri": a.spark_event_logs_s3_uri, "LocalPath": SPARK_EVENT_LOGS_DIR,
                                           "S3UploadMode": "Continuous"}})

    conf = None
    if a.configuration:
        conf = validate_configuration(a.configuration)
        prefix = _prefix("configuration_location", a.configuration_location or a.code_location, job_name,
                         "the Spark configuration", allow_local_uris)
        uri = _join(prefix, CONF_INPUT, CONF_FILE)
        uploads.append(Upload(uri=uri, what="configuration", data=json.dumps(conf).encode("utf-8"),
                              field="configuration"))
        extra_inputs.append({"InputName": CONF_INPUT,
                             "S3Input": {"S3Uri": uri, "LocalPath": INPUT_BASE + CONF_INPUT,
                                         "S3DataType": "S3Prefix", "S3InputMode": "File",
                                         "S3DataDistributionType": "FullyReplicated",
                                         "S3CompressionType": "None"}})

    code_entry, script = _code_input(a.submit_app, job_name, a.code_location, allow_local_uris, "submit_app", uploads)
    entrypoint = command + [INPUT_BASE + CODE_INPUT + "/" + script]

    request = _request(a, job_name=job_name, image=image, entrypoint=entrypoint,
                       inputs=user_inputs + extra_inputs + [code_entry],
                       outputs=user_outputs + spark_outputs)
    validate_request(OPERATION, request, allow_local_uris=allow_local_uris)
    return ProcessingPlan(request=request, uploads=uploads, spark=True, configuration=conf)


def pyspark_processing_request(**kwargs: Any) -> dict[str, Any]:
    """The CreateProcessingJob request for these arguments (see :func:`build_pyspark_processing`)."""
    return build_pyspark_processing(**kwargs).request


# -- plain script / container processing ---------------------------------------------------------------------------
def script_image_uri(framework: str, framework_version: str, region: str, instance_type: str,
                     py_version: str | None = None) -> str:
    """The image a framework processor runs scripts in: ``sklearn`` (SKLearnProcessor: py3), ``xgboost``,
    ``pytorch``, ``tensorflow`` (FrameworkProcessor: the training image)."""
    fw = (framework or "").lower()
    if fw not in SCRIPT_FRAMEWORKS:
        raise SpecError("framework", f"{framework!r} has no processing image lookup here.",
                        f"use one of {', '.join(SCRIPT_FRAMEWORKS)}, or pass image_uri explicitly.")
    from airflow_smdist.specs.images import retrieve_image_uri

    return retrieve_image_uri(fw, region, version=str(framework_version),
                              py_version=py_version or SCRIPT_FRAMEWORKS[fw], instance_type=instance_type,
                              image_scope="training")


def _s3_input(name: str, uri: str, local_path: str) -> dict[str, Any]:
    return {"InputName": name, "S3Input": {"S3Uri": uri, "LocalPath": local_path, "S3DataType": "S3Prefix",
                                           "S3InputMode": "File", "S3DataDistributionType": "FullyReplicated",
                                           "S3CompressionType": "None"}}


def _source_bundle(source_dir: str, code: str | None, command: list[str] | None, job_name: str,
                   code_location: str | None, allow_local: bool,
                   uploads: list[Upload]) -> tuple[list[dict[str, Any]], list[str]]:
    """FrameworkProcessor's ``code`` + ``entrypoint`` inputs and entry point for a source bundle (SDK 2.x
    ``_pack_and_upload_code``, ``_patch_inputs_with_payload``, ``_create_and_upload_runproc``)."""
    if not isinstance(code, str) or not code:
        raise SpecError("code", "is required with source_dir: it names the script in the directory.",
                        "give code='process.py' (relative to source_dir).")
    if _is_uri(code) or os.path.isabs(code) or "/" in code.strip("./"):
        raise SpecError("code", f"{code!r} is not a script name at the top of source_dir.",
                        "give the file name, e.g. code='process.py' (runproc.sh runs it from the unpacked "
                        "source_dir, as the SDK's FrameworkProcessor does).")
    cmd = _str_list(command, "command") if command is not None else ["python"]
    if not cmd:
        raise SpecError("command", "is empty.", "give the interpreter, e.g. ['python'].")
    if not isinstance(source_dir, str) or not source_dir:
        raise SpecError("source_dir", f"{source_dir!r} is not a directory or an S3 URI.",
                        "give the local directory holding the script (or an s3:// sourcedir.tar.gz).")
    source = _join(_prefix("code_location", code_location, job_name, f"source_dir {source_dir!r}", allow_local)
                   .rsplit("/", 1)[0], "source")
    if _is_uri(source_dir) and not source_dir.startswith("file://"):
        _check_uri(source_dir, "source_dir", allow_local)
        if not source_dir.endswith(".tar.gz"):
            raise SpecError("source_dir", f"{source_dir!r} is an S3 URI but not a .tar.gz.",
                            "point it at a sourcedir.tar.gz, or give a local directory.")
        bundle = source_dir
    else:
        bundle = f"{source}/sourcedir.tar.gz"
        path = source_dir.removeprefix("file://")
        uploads.append(Upload(uri=bundle, what="source_dir", path=path, field="source_dir", pack=True,
                              allow_dir=True, entry_point=code.lstrip("./") or code))
    runproc = f"{source}/runproc.sh"
    script = os.path.basename(code)
    uploads.append(Upload(uri=runproc, what="runproc.sh", field="source_dir",
                          data=RUNPROC_TEMPLATE.format(command=" ".join(cmd), script=script).encode("utf-8")))
    inputs = [_s3_input(CODE_INPUT, bundle, SOURCE_CODE_DIR),
              _s3_input(ENTRYPOINT_INPUT, runproc, INPUT_BASE + ENTRYPOINT_INPUT)]
    return inputs, list(RUNPROC_COMMAND)


def build_processing(*, job_name: str, region: str | None = None, allow_local_uris: bool = True,
                     **arguments: Any) -> ProcessingPlan:
    """Build the CreateProcessingJob request of a plain processing job.

    With ``code`` (a local script, uploaded to ``<code_location>/<job>/input/code/``, or an s3:// URI): what
    ``ScriptProcessor(command=command, ...).run(code=code, ...)`` sends: the ``code`` input last and
    ``ContainerEntrypoint = command + ['/opt/ml/processing/input/code/<script>']`` (``command`` defaults to
    ``['python3']``). Without it: ``Processor(entrypoint=entrypoint)`` (the image's own command when None).
    The image is ``image_uri``, or ``framework`` (sklearn, xgboost, pytorch, tensorflow) +
    ``framework_version`` looked up in the SDK's data. ``inputs`` / ``outputs`` as for
    :func:`build_pyspark_processing`.

    With ``source_dir`` (a local directory, or an s3:// ``sourcedir.tar.gz``) and ``code`` (the script's name
    in it): what SDK 2's ``FrameworkProcessor(...).run(code=code, source_dir=source_dir)`` sends. The
    directory is packed as ``<code_location>/<job>/source/sourcedir.tar.gz`` (the ``code`` input, at
    ``/opt/ml/processing/input/code/``) and a ``runproc.sh`` beside it (the ``entrypoint`` input) changes
    into the code directory, unpacks the bundle, installs its ``requirements.txt`` and runs
    ``command`` (default ``["python"]``) ``<code> <arguments>``; the entry point is
    ``["/bin/bash", "/opt/ml/processing/input/entrypoint/runproc.sh"]``.
    """
    a = _arguments(ScriptArguments, arguments, "build_processing")
    region = _region(region)
    uploads: list[Upload] = []
    if bool(a.image_uri) == bool(a.framework):
        raise SpecError("image_uri", f"{'both' if a.image_uri else 'neither'} of image_uri and framework given.",
                        "give image_uri='<ecr uri>', or framework='sklearn' with framework_version='1.2-1'.")
    if a.framework:
        if not a.framework_version:
            raise SpecError("framework_version", f"is required with framework={a.framework!r}.",
                            "give framework_version='1.2-1' (sklearn), '2.5' (pytorch), ...")
        from airflow_smdist.specs import instances

        instances.check_instance_type(a.instance_type, "instance_type", "processing")
        image = script_image_uri(a.framework, a.framework_version, region, a.instance_type, a.py_version)
    else:
        image = cast(str, a.image_uri)
    if a.code and a.entrypoint:
        raise SpecError("entrypoint", "is built from command + code when code is given.",
                        "give code (and command), or entrypoint, not both.")
    if a.command is not None and not a.code:
        raise SpecError("command", "only applies with code (it runs the code script).",
                        "give code='preprocess.py', or put the whole command in entrypoint.")
    user_inputs = _inputs(a.inputs, job_name, a.code_location, allow_local_uris, uploads)
    user_outputs = _outputs(a.outputs, allow_local_uris)
    reserved = (CODE_INPUT, ENTRYPOINT_INPUT) if a.source_dir else (CODE_INPUT,) if a.code else ()
    _check_unique(user_inputs, user_outputs, reserved, ())
    all_inputs = list(user_inputs)
    final_entrypoint: list[str] | None
    if a.source_dir:
        bundle_inputs, final_entrypoint = _source_bundle(a.source_dir, a.code, a.command, job_name, a.code_location,
                                                         allow_local_uris, uploads)
        all_inputs += bundle_inputs
    elif a.code:
        cmd = _str_list(a.command, "command") if a.command is not None else ["python3"]
        if not cmd:
            raise SpecError("command", "is empty.", "give the interpreter, e.g. ['python3'] or ['bash'].")
        code_entry, script = _code_input(a.code, job_name, a.code_location, allow_local_uris, "code", uploads)
        all_inputs.append(code_entry)
        final_entrypoint = cmd + [INPUT_BASE + CODE_INPUT + "/" + script]
    else:
        final_entrypoint = _str_list(a.entrypoint, "entrypoint") if a.entrypoint is not None else None
    request = _request(a, job_name=job_name, image=image, entrypoint=final_entrypoint, inputs=all_inputs,
                       outputs=user_outputs)
    validate_request(OPERATION, request, allow_local_uris=allow_local_uris)
    return ProcessingPlan(request=request, uploads=uploads, spark=False)


def processing_request(**kwargs: Any) -> dict[str, Any]:
    """The CreateProcessingJob request for these arguments (see :func:`build_processing`)."""
    return build_processing(**kwargs).request


# -- the one function with I/O --------------------------------------------------------------------------------------
def upload_plan(plan: ProcessingPlan, storage: Any = None) -> list[str]:
    """Upload what ``plan.uploads`` lists (the caller runs this before submitting). Returns the URIs written.

    Raises SpecError naming the argument when a local file is missing (the SDK's "code ... wasn't found")."""
    from airflow_smdist.storage import Storage

    storage = storage or Storage()
    written: list[str] = []
    for up in plan.uploads:
        if up.data is not None:
            storage.write_bytes(up.data, up.uri)
            written.append(up.uri)
            continue
        path = up.path or ""
        if up.pack and os.path.isdir(path):
            from airflow_smdist.sourcedir import upload_source

            try:
                upload_source(path, up.entry_point, up.uri, storage)
            except SpecError as exc:  # the bundle lacks the script: it is the code argument that is wrong
                raise SpecError("code" if exc.field == "entry_point" else exc.field, exc.problem, exc.fix) from None
            written.append(up.uri)
        elif os.path.isfile(path):
            uri = _join(up.uri, os.path.basename(path))
            storage.upload(path, uri)
            written.append(uri)
        elif os.path.isdir(path) and up.allow_dir:
            for dirpath, dirs, files in os.walk(path):
                dirs.sort()
                for f in sorted(files):
                    full = os.path.join(dirpath, f)
                    uri = _join(up.uri, os.path.relpath(full, path).replace(os.sep, "/"))
                    storage.upload(full, uri)
                    written.append(uri)
        else:
            kind = "a directory, not a file" if os.path.isdir(path) else "not found"
            raise SpecError(up.field or up.what, f"{path!r} is {kind}.",
                            "give the path of an existing local file (or an s3:// URI).")
    return written


_PY_RE = re.compile(r"^python(\d+(\.\d+)?)?$")


def is_python_command(token: str) -> bool:
    """``python3``, ``python``, ``/usr/bin/python3.10``: the container's Python interpreter."""
    return bool(_PY_RE.match(posixpath.basename(token or "")))
