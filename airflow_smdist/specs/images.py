"""Image URIs, looked up in the SageMaker Python SDK's bundled image tables, read as data (no network).

The SDK ships the ECR account, repository and tag of every first-party image as JSON files
(``sagemaker/core/image_uri_config/<framework>.json`` in the ``sagemaker-core`` distribution; SDK 2.x:
``sagemaker/image_uri_config/``) and resolves them with ``image_uris.retrieve``. Importing that module costs
about two seconds (much more on a loaded worker), in every task that looks an image up. So
:func:`lookup_image_uri` reads the same JSON files directly (cached per process) and follows
``retrieve``'s rules for the cases this provider's builders meet: CPU/GPU training and processing images of
the frameworks, built-in algorithms and Spark, in every region and version the tables hold. The rarer
branches of ``retrieve`` (Neuron/Trainium and Graviton instance families, p2/p4d special cases, a missing
version) are handed to the SDK itself, so the answer is always ``retrieve``'s; a test compares the two for
every framework, version and Python version the builders accept. The ECR hostname of a region comes from
botocore's endpoint data, as in the SDK.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from functools import cache, lru_cache
from typing import Any, Callable, cast

from airflow_smdist.specs.errors import SpecError

#: Frameworks :func:`framework_image_uri` resolves: the Deep Learning Containers, and the SageMaker
#: scikit-learn and XGBoost framework containers (script mode, e.g. framework_version "1.2-1").
FRAMEWORKS = ("pytorch", "tensorflow", "huggingface", "sklearn", "xgboost")

#: ``retrieve``'s constants (sagemaker.core.image_uris / sagemaker.core.fw_utils) that decide its branches.
_GRAVITON_FAMILIES = frozenset({"m6g", "m6gd", "c6g", "c6gd", "c6gn", "c7g", "r6g", "r6gd"})
_CONTAINER_VERSION_SUFFIX = frozenset({"huggingface", "pytorch-smp", "spark"})
_FAMILY = re.compile(r"^ml[\._]([a-z\d\-]+)\.?\w*$")


class _NeedsSDK(Exception):
    """A branch of ``image_uris.retrieve`` this module does not reproduce: ask the SDK."""


def _sdk_retrieve() -> Callable[..., str]:
    try:
        from sagemaker.core import image_uris  # SDK 3.x (sagemaker-core)
    except ImportError:
        try:
            from sagemaker import image_uris  # SDK 2.x
        except ImportError:
            raise SpecError(
                "image_uri",
                "cannot be looked up: the sagemaker SDK (which carries the image tables) is not installed.",
                "pip install sagemaker-core, or pass image_uri explicitly.",
            ) from None
    return cast("Callable[..., str]", image_uris.retrieve)


@lru_cache(maxsize=1)
def config_dir() -> str | None:
    """The SDK's ``image_uri_config`` folder, found without importing the SDK (None: not installed)."""
    spec = importlib.util.find_spec("sagemaker")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for sub in (("core", "image_uri_config"), ("image_uri_config",)):
            path = os.path.join(base, *sub)
            if os.path.isdir(path):
                return path
    return None


@cache
def _config(framework: str) -> dict[str, Any]:
    folder = config_dir()
    if folder is None:
        raise _NeedsSDK(framework)  # the SDK's own error says what to install
    try:
        with open(os.path.join(folder, f"{framework}.json")) as f:
            return cast("dict[str, Any]", json.load(f))
    except FileNotFoundError:
        raise _NeedsSDK(framework) from None


@cache
def _ecr_hostname(region: str) -> str:
    import botocore.loaders
    import botocore.regions

    resolver = botocore.regions.EndpointResolver(botocore.loaders.create_loader().load_data("endpoints"))
    data = resolver.construct_endpoint("ecr", region)
    if region == "il-central-1" and not data:
        data = {"hostname": f"ecr.{region}.amazonaws.com"}
    if not data:
        raise _NeedsSDK(region)
    return str(data["hostname"])


def _check(arg: Any, options: Any, name: str) -> None:
    if arg not in options:
        raise ValueError(
            f"Unsupported {name}: {arg}. You may need to upgrade your SDK version (pip install -U sagemaker) "
            f"for newer {name}s. Supported {name}(s): {', '.join(options)}.")


def _family(instance_type: str | None) -> str:
    match = _FAMILY.match(instance_type) if isinstance(instance_type, str) else None
    return match[1] if match else ""


def _scope_config(framework: str, image_scope: str | None) -> dict[str, Any]:
    config = _config(framework)
    scopes = config.get("scope", list(config.keys()))
    if len(scopes) == 1:
        image_scope = scopes[0]
    if not image_scope and "scope" in config and set(scopes) == {"training", "inference"}:
        image_scope = scopes[0]
    _check(image_scope, scopes, "image scope")
    return config if "scope" in config else cast("dict[str, Any]", config[str(image_scope)])


def _processor(instance_type: str | None, available: list[str] | None) -> str | None:
    if not available:
        return None
    if len(available) == 1 and not instance_type:
        return str(available[0])
    if not instance_type or instance_type.startswith(("local", "neuron")):
        raise _NeedsSDK(instance_type)
    family = _family(instance_type)
    if not family:
        raise _NeedsSDK(instance_type)  # the SDK's "Invalid SageMaker instance type" message
    if family in available:
        processor = family
    elif family[0] in ("g", "p"):
        processor = "gpu"
    else:
        processor = "cpu"
    _check(processor, available, "processor")
    return processor


def _py_version(py_version: str | None, version_config: dict[str, Any], framework: str) -> str | None:
    available = version_config.get("py_versions") if "repository" in version_config else list(version_config)
    if not available:
        return None
    if py_version is None and framework == "spark":
        return None
    if py_version is None and len(available) == 1:
        return str(available[0])
    _check(py_version, available, "Python version")
    return py_version


def _huggingface(version_config: dict[str, Any], base_framework_version: str | None) -> dict[str, Any]:
    aliases = version_config.get("version_aliases")
    if not aliases:
        raise _NeedsSDK("huggingface without version_aliases")
    full = aliases.get(base_framework_version, base_framework_version)
    _check(full, list(version_config.keys()), "base framework")
    return cast("dict[str, Any]", version_config.get(full))


def _tag_prefix(framework: str, version: str | None, config: dict[str, Any], version_config: dict[str, Any],
                base_framework_version: str | None) -> str:
    if framework != "huggingface":
        return str(version_config.get("tag_prefix", version))
    match = re.match("^(pytorch|tensorflow)(.*)$", base_framework_version or "")
    if match is None:
        raise _NeedsSDK(base_framework_version)
    return f"{match.group(2)}-transformers{config.get('version_aliases', {}).get(version, version)}"


def _check_route(framework: str, instance_type: str | None, version: str | None, image_scope: str | None,
                 kwargs: dict[str, Any]) -> None:
    """Raise _NeedsSDK for the branches of ``retrieve`` not reproduced here."""
    family = _family(instance_type)
    if (kwargs or not version or family.startswith(("inf", "trn")) or family in ("p2", "p4d")
            or (instance_type and "trn" in instance_type) or family in _GRAVITON_FAMILIES):
        raise _NeedsSDK(framework)
    if image_scope is None and framework in ("xgboost", "sklearn"):
        raise _NeedsSDK(framework)  # retrieve defaults these to "training"; callers here always say


def lookup_image_uri(framework: str, region: str, version: str | None = None, py_version: str | None = None,
                     instance_type: str | None = None, image_scope: str | None = None,
                     container_version: str | None = None, base_framework_version: str | None = None,
                     **kwargs: Any) -> str:
    """``image_uris.retrieve(framework, region, ...)`` read from the SDK's JSON tables (cached); falls back
    to the SDK for branches not reproduced here. Raises ValueError with ``retrieve``'s own messages."""
    args = (framework, region, version, py_version, instance_type, image_scope, container_version,
            base_framework_version)
    try:
        _check_route(framework, instance_type, version, image_scope, kwargs)
        return _lookup(*args)
    except _NeedsSDK:
        return _sdk_retrieve()(framework, region, version=version, py_version=py_version,
                               instance_type=instance_type, image_scope=image_scope,
                               container_version=container_version, base_framework_version=base_framework_version,
                               **kwargs)


@lru_cache(maxsize=1024)
def _lookup(framework: str, region: str, version: str | None, py_version: str | None, instance_type: str | None,
            image_scope: str | None, container_version: str | None, base_framework_version: str | None) -> str:
    config = _scope_config(framework, image_scope)
    versions = list(config["versions"])
    aliases = config.get("version_aliases", {})
    if len(versions) == 1 and version not in aliases:
        version = versions[0]
    _check(version, versions + list(aliases), f"{framework} version")
    version_config = config["versions"][aliases.get(version, version)]
    if framework == "huggingface":
        version_config = _huggingface(version_config, base_framework_version)
    py_version = _py_version(py_version, version_config, framework)
    version_config = version_config.get(py_version) or version_config
    registries = version_config["registries"]
    _check(region, list(registries.keys()), "region")
    hostname = _ecr_hostname(region)
    repo = version_config["repository"]
    if "neuron" in repo or repo.endswith(("-inference-graviton", "-inference-arm64")):
        raise _NeedsSDK(repo)
    processor = _processor(instance_type, config.get("processors") or version_config.get("processors"))
    requested = container_version
    if version_config.get("container_version"):
        container_version = version_config["container_version"][processor]
    tag_prefix = _tag_prefix(framework, version, config, version_config, base_framework_version)
    if not version_config.get("processor_in_tag", True):
        processor = None
    if requested is not None and not version_config.get("container_version") \
            and framework not in _CONTAINER_VERSION_SUFFIX:
        raise _NeedsSDK(framework)  # the SDK's "container_version ... is not supported" error
    if framework == "sagemaker-tritonserver":
        raise _NeedsSDK(framework)
    tag = "-".join(x for x in (tag_prefix, processor, py_version, container_version) if x)
    return f"{registries[region]}.dkr.{hostname}/{repo}" + (f":{tag}" if tag else "")


def retrieve_image_uri(framework: str, region: str, *, fields: dict[str, str] | None = None, **kwargs: Any) -> str:
    """Call the SDK's ``image_uris.retrieve(framework, region, **kwargs)``; its ValueError becomes a SpecError.

    The SDK's message is kept verbatim ("Unsupported pytorch version: 9.9. ... Supported pytorch version(s):
    ..."); the field is picked from what it complains about, via ``fields`` (keys: ``version``, ``py``,
    ``region``, ``base``, ``instance``), defaulting to ``framework_version``, ``py_version``, ``region``,
    ``base_framework_version`` and ``instance_type``.
    """
    names = {"version": "framework_version", "py": "py_version", "region": "region",
             "base": "base_framework_version", "instance": "instance_type", "other": "image_uri"}
    names.update(fields or {})
    try:
        return lookup_image_uri(framework, region, **kwargs)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        message = str(exc).strip() or repr(exc)
        if message.startswith("Unsupported Python version"):
            field = names["py"]
        elif message.startswith("Unsupported region"):
            field = names["region"]
        elif message.startswith("Unsupported base framework"):
            field = names["base"]
        elif "instance type" in message.lower():
            field = names["instance"]
        elif message.startswith("Unsupported") and "version" in message:
            field = names["version"]
        else:
            field = names["other"]
        raise SpecError(field, f"the SageMaker SDK has no {framework} image for this: {message}",
                        "use one of the values it lists, upgrade the sagemaker package for newer images, or "
                        "pass image_uri explicitly.") from None


def framework_image_uri(
    framework: str,
    framework_version: str,
    py_version: str | None,
    instance_type: str,
    region: str,
    *,
    base_framework_version: str | None = None,
    distribution: dict[str, Any] | None = None,
) -> str:
    """The AWS Deep Learning Container training image for a framework, e.g.
    ``framework_image_uri("pytorch", "2.5.1", "py311", "ml.g5.xlarge", "us-east-1")`` ->
    ``763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311``.

    ``instance_type`` picks the CPU or GPU (or Neuron) variant, as in the SDK. For ``huggingface``,
    ``framework_version`` is the transformers version and ``base_framework_version`` the PyTorch (or
    TensorFlow) one, written ``"pytorch2.5.1"`` as the SDK does; a bare ``"2.5.1"`` is read as PyTorch.
    ``py_version`` None lets the SDK pick its default. ``distribution`` (the SDK v2 ``distribution=`` dict)
    picks the SageMaker model parallelism image for SMP v2 (``torch_distributed`` + enabled
    ``smdistributed.modelparallel``), as the SDK's ``image_uris.get_training_image_uri`` does: framework
    ``pytorch-smp`` (repository ``smdistributed-modelparallel``) with its CUDA container version. Raises
    SpecError, with the SDK's message, for a version, Python version, region or base framework it has no
    image for.
    """
    fw = (framework or "").lower()
    if fw not in FRAMEWORKS:
        raise SpecError("framework", f"{framework!r} has no training image lookup here.",
                        f"use one of {', '.join(FRAMEWORKS)}, or pass image_uri explicitly.")
    from airflow_smdist.specs.instances import check_instance_type

    check_instance_type(instance_type, "instance_type")
    kwargs: dict[str, Any] = {
        "version": framework_version,
        "py_version": py_version,
        "instance_type": instance_type,
        "image_scope": "training",
    }
    if fw == "huggingface":
        if not base_framework_version:
            raise SpecError("base_framework_version",
                            "is required for huggingface images: the image is chosen by the transformers "
                            "version and the PyTorch (or TensorFlow) version under it.",
                            "pass base_framework_version='pytorch2.5.1' (for example).")
        base = str(base_framework_version)
        kwargs["base_framework_version"] = f"pytorch{base}" if base[:1].isdigit() else base
    if fw == "pytorch" and is_smp_v2(distribution):
        fw = "pytorch-smp"
        kwargs["container_version"] = smp_container_version(framework_version, instance_type)
        kwargs["distribution"] = distribution
    return retrieve_image_uri(fw, region, **kwargs)


def is_smp_v2(distribution: dict[str, Any] | None) -> bool:
    """SMP v2: ``torch_distributed`` with ``smdistributed.modelparallel`` not disabled (the SDK's test in
    ``get_training_image_uri``: keys present, ``enabled`` defaulting to True)."""
    if not isinstance(distribution, dict) or "torch_distributed" not in distribution:
        return False
    smd = distribution.get("smdistributed")
    mp = smd.get("modelparallel") if isinstance(smd, dict) else None
    return isinstance(mp, dict) and mp.get("enabled", True) is not False


def smp_container_version(framework_version: str, instance_type: str) -> str:
    """The CUDA tag part of the SMP v2 image, by the SDK's rule (``get_training_image_uri``): cu124 for
    PyTorch 2.5, cu121 for 2.1-2.4 or p5 instances, cu118 otherwise."""
    if "2.5" in framework_version:
        return "cu124"
    if "p5" in instance_type or any(v in framework_version for v in ("2.1", "2.2", "2.3", "2.4")):
        return "cu121"
    return "cu118"
