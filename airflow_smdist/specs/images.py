"""Image URIs, looked up in the SageMaker Python SDK's image tables, which ship inside this package as data.

The SDK resolves the ECR account, repository and tag of every first-party image from JSON files
(``sagemaker/core/image_uri_config/<framework>.json`` in the ``sagemaker-core`` distribution) with
``image_uris.retrieve``. Those files, for the frameworks this provider's builders look up, are copied into
``airflow_smdist/specs/image_tables/`` by ``scripts/refresh_image_tables.py`` (``SOURCE.json`` there names the
distribution and version copied from; docs/image-tables.md has the list), so the provider installs and looks
images up without the SDK, which cannot install beside Airflow 3 on Python 3.12+ (issue 30), and a task
never pays the SDK's import (about two seconds).

:func:`lookup_image_uri` follows ``retrieve``'s rules (``sagemaker/core/image_uris.py`` and ``fw_utils.py`` of
sagemaker-core 2.27) for everything the builders can reach: CPU/GPU images of the frameworks, built-in
algorithms and Spark in every region and version the tables hold; Trainium and Inferentia instance types
(the ``<framework>-neuron`` tables, the Neuron SDK version in the tag, the Trainium framework check);
Graviton families (``inference_graviton``, the arm64 tags); the P2 deprecation; the p4d/smdistributed
container versions; the latest version when none is given; ``retrieve``'s ValueError messages verbatim.
What the tables cannot answer raises SpecError asking for ``image_uri``: ``retrieve``'s JumpStart, Elastic
Inference, training-compiler, serverless and explicit Neuron SDK arguments, and frameworks whose table is not
packaged. tests/unit/test_images.py compares the answers with ``retrieve`` for every framework, version and
Python version the builders accept, and the tables with the SDK's files. The ECR hostname of a region comes
from botocore's endpoint data, as in the SDK.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache, lru_cache
from typing import Any, cast

from airflow_smdist.specs.errors import SpecError

#: Frameworks :func:`framework_image_uri` resolves: the Deep Learning Containers, and the SageMaker
#: scikit-learn and XGBoost framework containers (script mode, e.g. framework_version "1.2-1").
FRAMEWORKS = ("pytorch", "tensorflow", "huggingface", "sklearn", "xgboost")
#: Frameworks ``retrieve`` resolves from ``<framework>-neuron.json`` on inf*/trn* instance types.
NEURON_FRAMEWORKS = ("huggingface", "pytorch")

_TABLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "image_tables")
_SOURCE = "SOURCE.json"

# retrieve's constants (sagemaker.core.image_uris / sagemaker.core.fw_utils) that decide its branches.
_GRAVITON_FAMILIES = ("m6g", "m6gd", "c6g", "c6gd", "c6gn", "c7g", "r6g", "r6gd")  # the SDK's order (messages)
_GRAVITON_FRAMEWORKS = {"tensorflow", "pytorch", "xgboost", "sklearn"}  # a set, formatted as one in a message
_TRAINIUM_FRAMEWORKS = "pytorch"  # a string: retrieve tests ``framework in "pytorch"``
_INFERENCE_GRAVITON = "inference_graviton"
_CONTAINER_VERSION_SUFFIX = frozenset({"huggingface", "pytorch-smp", "spark"})
_NEURON_SDK_REPOS = ("pytorch-training-neuron", "pytorch-training-neuronx", "huggingface-vllm-inference-neuronx")
_HF_NEURON_REPOS = ("huggingface-pytorch-inference-neuron", "huggingface-pytorch-inference-neuronx")
_HF_TRCOMP_REPOS = ("huggingface-pytorch-trcomp-training", "huggingface-tensorflow-trcomp-training")
_ARM64_TAGS = {"xgboost": {"1.5-1": "1.5-1-arm64", "1.3-1": "1.3-1-arm64"},
               "sklearn": {"1.0-1": "1.0-1-arm64-cpu-py3"}}
#: ``_get_image_tag``'s CUDA suffixes, added on p4d or with ``smdistributed`` in the distribution.
_AUTO_CONTAINER_VERSIONS = {
    "tensorflow-2.3-gpu-py37": "cu110-ubuntu18.04-v3",
    "tensorflow-2.3.1-gpu-py37": "cu110-ubuntu18.04",
    "tensorflow-2.3.2-gpu-py37": "cu110-ubuntu18.04",
    "tensorflow-1.15-gpu-py37": "cu110-ubuntu18.04-v8",
    "tensorflow-1.15.4-gpu-py37": "cu110-ubuntu18.04",
    "tensorflow-1.15.5-gpu-py37": "cu110-ubuntu18.04",
    "mxnet-1.8-gpu-py37": "cu110-ubuntu16.04-v1",
    "mxnet-1.8.0-gpu-py37": "cu110-ubuntu16.04",
    "pytorch-1.6-gpu-py36": "cu110-ubuntu18.04-v3",
    "pytorch-1.6.0-gpu-py36": "cu110-ubuntu18.04",
    "pytorch-1.6-gpu-py3": "cu110-ubuntu18.04-v3",
    "pytorch-1.6.0-gpu-py3": "cu110-ubuntu18.04",
}
_FAMILY = re.compile(r"^ml[\._]([a-z\d\-]+)\.?\w*$")
_BASE = re.compile("^(pytorch|tensorflow)(.*)$")
_INSTANCE_TYPES_PAGE = "https://aws.amazon.com/sagemaker/pricing/instance-types"


def config_dir() -> str:
    """The folder of the packaged image tables (``<framework>.json``, as in the SDK's ``image_uri_config``)."""
    return _TABLES


@cache
def table_source() -> dict[str, Any]:
    """``SOURCE.json``: the distribution and version the tables were copied from, the folder, the frameworks
    and each original file's SHA-256 (written by ``scripts/refresh_image_tables.py``)."""
    with open(os.path.join(_TABLES, _SOURCE), encoding="utf-8") as f:
        return cast("dict[str, Any]", json.load(f))


def packaged_frameworks() -> list[str]:
    """The frameworks whose image table ships with the package."""
    return list(table_source()["frameworks"])


@cache
def _config(framework: str) -> dict[str, Any]:
    if framework not in packaged_frameworks():
        source = table_source()
        raise SpecError(
            "image_uri",
            f"airflow-smdist carries no image table for {framework!r}: it ships the SageMaker SDK's tables "
            f"({source['distribution']} {source['version']}) of the frameworks its builders look up only "
            f"({', '.join(packaged_frameworks())}).",
            "pass image_uri explicitly (the SageMaker SDK's image_uris.retrieve prints it).")
    with open(os.path.join(_TABLES, f"{framework}.json"), encoding="utf-8") as f:
        return cast("dict[str, Any]", json.load(f))


@cache
def _ecr_hostname(region: str) -> str:
    import botocore.loaders
    import botocore.regions

    resolver = botocore.regions.EndpointResolver(botocore.loaders.create_loader().load_data("endpoints"))
    data = resolver.construct_endpoint("ecr", region)
    if region == "il-central-1" and not data:
        data = {"hostname": f"ecr.{region}.amazonaws.com"}
    if not data:
        raise SpecError("region", f"botocore knows no ECR endpoint in {region!r}, for which the image tables list "
                        "an account.", "upgrade botocore, or pass image_uri explicitly.")
    return str(data["hostname"])


def _check(arg: Any, options: Any, name: str) -> None:
    if arg not in options:
        raise ValueError(
            f"Unsupported {name}: {arg}. You may need to upgrade your SDK version (pip install -U sagemaker) "
            f"for newer {name}s. Supported {name}(s): {', '.join(options)}.")


def _family(instance_type: str | None) -> str:
    match = _FAMILY.match(instance_type) if isinstance(instance_type, str) else None
    return match[1] if match else ""


def _inference_tool(framework: str, family: str) -> str | None:
    """``_get_inference_tool``: "neuron" for PyTorch and Hugging Face on inf*/trn* families."""
    if framework == "huggingface" or framework in _TRAINIUM_FRAMEWORKS:
        if family.startswith(("inf", "trn")):
            return "neuron"
    return None


def _final_scope(framework: str, family: str, image_scope: str | None) -> str | None:
    """``_get_final_image_scope``: Graviton families take the ``inference_graviton`` images; XGBoost and
    scikit-learn default to ``training``."""
    if framework in _GRAVITON_FRAMEWORKS and family in _GRAVITON_FAMILIES:
        return _INFERENCE_GRAVITON
    if image_scope is None and framework in ("xgboost", "sklearn"):
        return "training"
    return image_scope


def _check_instance_framework(framework: str, instance_type: str | None, family: str) -> None:
    """``_validate_for_suppported_frameworks_and_instance_type``: Trainium and Graviton frameworks."""
    if instance_type is not None and "trn" in instance_type and framework not in _TRAINIUM_FRAMEWORKS:
        raise ValueError(f"Unsupported framework: {framework}. "
                         f"Supported framework(s) for Trainium instances: {_TRAINIUM_FRAMEWORKS}.")
    if instance_type is not None and family in _GRAVITON_FAMILIES and framework not in _GRAVITON_FRAMEWORKS:
        raise ValueError(f"Unsupported framework: {framework}. "
                         f"Supported framework(s) for Graviton instances: {_GRAVITON_FRAMEWORKS}.")


def _scope_config(framework: str, image_scope: str | None) -> dict[str, Any]:
    config = _config(framework)
    scopes = config.get("scope", list(config.keys()))
    if len(scopes) == 1:
        image_scope = scopes[0]
    if not image_scope and "scope" in config and set(scopes) == {"training", "inference"}:
        image_scope = scopes[0]
    _check(image_scope, scopes, "image scope")
    return config if "scope" in config else cast("dict[str, Any]", config[str(image_scope)])


def _latest_version_in(config: dict[str, Any], image_scope: str | None) -> str | None:
    """``_fetch_latest_version_from_config``: the ``latest`` alias, else the newer of the first and last."""
    scoped = config[image_scope] if image_scope in config else None
    if scoped and "version_aliases" in scoped and "latest" in scoped["version_aliases"]:
        return str(scoped["version_aliases"]["latest"])
    versions: list[str]
    if "versions" in config:
        versions = list(config["versions"])
        if len(versions) == 1:
            return versions[0]
        if "latest" in (versions[0], versions[-1]):
            return None
    elif image_scope is not None and image_scope in config and "versions" in config[image_scope]:
        versions = list(config[image_scope]["versions"])
    elif "processing" in config and "versions" in config["processing"]:
        versions = list(config["processing"]["versions"])
    else:
        return None
    top, bottom = versions[0], versions[-1]
    if not (top and bottom):
        return None
    if top.endswith(".x") or bottom.endswith(".x"):
        return f"{max(int(top[:-2]), int(bottom[:-2]))}.x"
    from packaging.version import Version

    return top if Version(top) >= Version(bottom) else bottom


def _version(version: str | None, config: dict[str, Any], framework: str, image_scope: str | None) -> str | None:
    """``_validate_version_and_set_if_needed``: the only version, else the given (or latest) one, checked."""
    available: list[str] = list(config["versions"])
    aliased: list[str] = list(config.get("version_aliases", {}))
    if len(available) == 1 and version not in aliased:
        return available[0]
    if not version:
        framework_config = _config(framework)
        if not framework_config:
            raise ValueError(f"Invalid framework {framework}")
        version = _latest_version_in(framework_config, image_scope)
    _check(version, available + aliased, f"{framework} version")
    return version


def _huggingface(version_config: dict[str, Any], base_framework_version: str | None) -> dict[str, Any]:
    aliases = version_config.get("version_aliases")
    if not aliases:
        raise SpecError("base_framework_version", "the packaged huggingface table lists no base framework "
                        "versions for this transformers version.", "pass image_uri explicitly.")
    full = aliases.get(base_framework_version, base_framework_version)
    _check(full, list(version_config.keys()), "base framework")
    return cast("dict[str, Any]", version_config.get(full))


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


def _processor(instance_type: str | None, available: list[str] | None) -> str | None:
    """``_processor``: the family when the table names it, else inf/trn/gpu/cpu; checked against the table."""
    if not available:
        return None
    if len(available) == 1 and not instance_type:
        return str(available[0])
    if not instance_type:
        raise ValueError(f"Empty SageMaker instance type. For options, see: {_INSTANCE_TYPES_PAGE}")
    if instance_type.startswith("local"):
        processor = "cpu" if instance_type == "local" else "gpu"
    elif instance_type.startswith("neuron"):
        processor = "neuron"
    else:
        family = _family(instance_type)
        if not family:
            raise ValueError(f"Invalid SageMaker instance type: {instance_type}. For options, see: "
                             f"{_INSTANCE_TYPES_PAGE}")
        if family in available:
            processor = family
        elif family.startswith(("inf", "trn")):
            processor = family[:3]
        else:
            processor = "gpu" if family[0] in ("g", "p") else "cpu"
    _check(processor, available, "processor")
    return processor


def _base_version(base_framework_version: str | None) -> str:
    match = _BASE.match(base_framework_version) if isinstance(base_framework_version, str) else None
    if match is None:
        raise SpecError("base_framework_version", f"{base_framework_version!r} names neither PyTorch nor TensorFlow.",
                        "write it as the SDK does, e.g. 'pytorch2.5.1', or pass image_uri explicitly.")
    return match.group(2)


def _latest_sdk(version_config: dict[str, Any]) -> str:
    return str(sorted(version_config["sdk_versions"], reverse=True)[0])


def _prefix_and_container_version(framework: str, config: dict[str, Any], version_config: dict[str, Any],
                                  version: str | None, original_version: str | None, base: str | None,
                                  container_version: str | None) -> tuple[str | None, str | None]:
    """The tag's first part, and its container version with the Neuron SDK version put in front where
    ``retrieve`` does (Trainium training images; Hugging Face's Inferentia images)."""
    repo = version_config["repository"]
    if repo in _NEURON_SDK_REPOS:
        container_version = f"{_latest_sdk(version_config)}-{container_version}"
    if framework != "huggingface":
        return version_config.get("tag_prefix", version), container_version
    pt_or_tf = _base_version(base)
    transformers = config.get("version_aliases", {}).get(version, version)
    if repo in _HF_TRCOMP_REPOS:
        transformers = version
    if repo in _HF_NEURON_REPOS:
        container_version = f"{_latest_sdk(version_config)}-{container_version}"
        transformers = (config.get("version_aliases") or {}).get(original_version) or transformers
        inner = config.get("versions", {}).get(transformers, {}).get("version_aliases", {}).get(base, {})
        if inner:
            pt_or_tf = _base_version(inner)
    return f"{pt_or_tf}-transformers{transformers}", container_version


def _check_deprecated(framework: str, family: str, version: str | None) -> None:
    """``_validate_instance_deprecation``: no P2 images from PyTorch 1.13 and TensorFlow 2.12 on."""
    if family != "p2" or framework not in ("pytorch", "tensorflow"):
        return
    from packaging.version import Version

    if Version(str(version)) >= Version("1.13" if framework == "pytorch" else "2.12"):
        raise ValueError(
            "P2 instances have been deprecated for sagemaker jobs starting PyTorch 1.13 and TensorFlow 2.12"
            "For information about supported instance types please refer to https://aws.amazon.com/sagemaker/pricing/")


def _check_container_version(framework: str, version: str | None, requested: str | None,
                             version_config: dict[str, Any]) -> None:
    """A caller's container_version only where the tag carries one (retrieve's guard, SDK issue #3702)."""
    repo = version_config["repository"]
    if (requested is not None and not version_config.get("container_version")
            and framework not in _CONTAINER_VERSION_SUFFIX and repo != f"{framework}-inference-graviton"
            and "neuron" not in repo):
        raise ValueError(
            f"container_version '{requested}' is not supported for framework '{framework}' version '{version}'. "
            "The resulting image tag would not correspond to a published image. container_version is an image "
            "tag build component (for example a CUDA/OS suffix), not a Deep Learning Containers release "
            "version; omit it and pass the full framework version instead.")


def _image_tag(framework: str, version: str | None, final_scope: str | None, instance_type: str | None,
               parts: tuple[str | None, ...], smdistributed: bool) -> str:
    """``_get_image_tag``: ``parts`` (prefix, processor or inference tool, Python version, container version)
    joined by dashes; arm64 tags for XGBoost/scikit-learn on Graviton; CUDA suffixes on p4d/smdistributed."""
    family = _family(instance_type)
    tag = "-".join(x for x in parts if x)
    if framework in ("xgboost", "sklearn"):
        if family and final_scope == _INFERENCE_GRAVITON:
            _check(family, _GRAVITON_FAMILIES, "instance type")
        if family in _GRAVITON_FAMILIES or final_scope == _INFERENCE_GRAVITON:
            return _ARM64_TAGS[framework][str(version)]
    elif instance_type is not None and (family == "p4d" or smdistributed):
        suffix = _AUTO_CONTAINER_VERSIONS.get(f"{framework}-{tag}")
        tag = f"{tag}-{suffix}" if suffix else tag
    return tag


def _refuse_unsupported(kwargs: dict[str, Any]) -> None:
    given = sorted(k for k, v in kwargs.items() if v is not None and v is not False)
    if given:
        raise SpecError(given[0], f"is an image_uris.retrieve argument ({', '.join(given)}) that the packaged image "
                        "tables do not resolve (JumpStart models, Elastic Inference, the training compiler, "
                        "serverless inference, a chosen Neuron SDK or inference tool).",
                        "pass image_uri explicitly (the SageMaker SDK's image_uris.retrieve prints it).")


def lookup_image_uri(framework: str, region: str, version: str | None = None, py_version: str | None = None,
                     instance_type: str | None = None, image_scope: str | None = None,
                     container_version: str | None = None, base_framework_version: str | None = None,
                     **kwargs: Any) -> str:
    """``image_uris.retrieve(framework, region, ...)`` answered from the packaged tables (cached): the same
    URI, or the same ValueError with ``retrieve``'s own message. Of ``retrieve``'s other arguments only
    ``distribution`` is taken; the rest (JumpStart, Elastic Inference, ...) raise SpecError asking for
    ``image_uri``, as does a framework whose table is not packaged."""
    distribution = kwargs.pop("distribution", None)
    _refuse_unsupported(kwargs)
    smdistributed = bool(distribution) and "smdistributed" in distribution
    return _lookup(framework, region, version, py_version, instance_type, image_scope, container_version,
                   base_framework_version, smdistributed)


@lru_cache(maxsize=1024)
def _lookup(framework: str, region: str, version: str | None, py_version: str | None, instance_type: str | None,
            image_scope: str | None, container_version: str | None, base_framework_version: str | None,
            smdistributed: bool) -> str:
    """``retrieve``'s steps, in its order (so the first complaint is its first complaint)."""
    family = _family(instance_type)
    inference_tool = _inference_tool(framework, family)
    final_scope = _final_scope(framework, family, image_scope)
    _check_instance_framework(framework, instance_type, family)
    config = _scope_config(f"{framework}-{inference_tool}" if inference_tool else framework, final_scope)
    original_version = version
    version = _version(version, config, framework, image_scope)
    version_config = config["versions"][config.get("version_aliases", {}).get(version, version)]
    if framework == "huggingface":
        version_config = _huggingface(version_config, base_framework_version)
    py_version = _py_version(py_version, version_config, framework)
    version_config = version_config.get(py_version) or version_config
    registries = version_config["registries"]
    _check(region, list(registries.keys()), "region")
    hostname = _ecr_hostname(region)
    repo = version_config["repository"]
    processor = _processor(instance_type, config.get("processors") or version_config.get("processors"))
    requested = container_version
    if version_config.get("container_version"):
        container_version = version_config["container_version"][processor]
    tag_prefix, container_version = _prefix_and_container_version(
        framework, config, version_config, version, original_version, base_framework_version, container_version)
    if repo in (f"{framework}-inference-graviton", f"{framework}-inference-arm64"):
        container_version = f"{container_version}-sagemaker"
    if not version_config.get("processor_in_tag", True):
        processor = None
    _check_deprecated(framework, family, version)
    _check_container_version(framework, version, requested, version_config)
    tag = _image_tag(framework, version, final_scope, instance_type,
                     (tag_prefix, inference_tool or processor, py_version, container_version), smdistributed)
    return f"{registries[region]}.dkr.{hostname}/{repo}" + (f":{tag}" if tag else "")


def retrieve_image_uri(framework: str, region: str, *, fields: dict[str, str] | None = None, **kwargs: Any) -> str:
    """``image_uris.retrieve(framework, region, **kwargs)`` from the packaged tables (:func:`lookup_image_uri`);
    its ValueError becomes a SpecError (a SpecError passes unchanged).

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
    except SpecError:
        raise
    except (ValueError, KeyError) as exc:
        message = str(exc).strip() or repr(exc)
        if message.startswith("Unsupported Python version"):
            field = names["py"]
        elif message.startswith("Unsupported region"):
            field = names["region"]
        elif message.startswith("Unsupported base framework"):
            field = names["base"]
        elif "instance type" in message.lower() or message.startswith(("Unsupported processor", "P2 instances")) \
                or " instances: " in message:
            field = names["instance"]
        elif message.startswith("Unsupported") and "version" in message:
            field = names["version"]
        else:
            field = names["other"]
        source = table_source()
        raise SpecError(field, f"the SageMaker SDK has no {framework} image for this: {message}",
                        "use one of the values it lists, or pass image_uri explicitly (the image tables are the "
                        f"SDK's, copied from {source['distribution']} {source['version']}: a newer "
                        "airflow-smdist carries newer images).") from None


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
