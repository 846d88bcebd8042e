"""Training image URIs, looked up in the SageMaker Python SDK's bundled image data (no network).

The SDK ships the ECR account, repository and tag of every first-party image as JSON
(``image_uri_config/*.json``) and resolves them with ``image_uris.retrieve``. Importing that module takes
about two seconds, so it is imported here only inside the functions, never at DAG-parse time. SDK 3.x keeps
it at ``sagemaker.core.image_uris``; SDK 2.x at ``sagemaker.image_uris`` (same ``retrieve`` signature for the
arguments used here). Both are tried, in that order.
"""

from __future__ import annotations

from typing import Any

from airflow_smdist.specs.errors import SpecError

#: Deep Learning Container frameworks :func:`framework_image_uri` resolves.
FRAMEWORKS = ("pytorch", "tensorflow", "huggingface")


def _sdk_retrieve():
    try:
        from sagemaker.core import image_uris  # SDK 3.x
    except ImportError:
        try:
            from sagemaker import image_uris  # SDK 2.x
        except ImportError:
            raise SpecError(
                "image_uri",
                "cannot be looked up: the sagemaker SDK (which carries the image tables) is not installed.",
                "pip install sagemaker, or pass image_uri explicitly.",
            ) from None
    return image_uris.retrieve


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
    retrieve = _sdk_retrieve()
    try:
        return retrieve(framework, region, **kwargs)
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
) -> str:
    """The AWS Deep Learning Container training image for a framework, e.g.
    ``framework_image_uri("pytorch", "2.5.1", "py311", "ml.g5.xlarge", "us-east-1")`` ->
    ``763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311``.

    ``instance_type`` picks the CPU or GPU (or Neuron) variant, as in the SDK. For ``huggingface``,
    ``framework_version`` is the transformers version and ``base_framework_version`` the PyTorch (or
    TensorFlow) one, written ``"pytorch2.5.1"`` as the SDK does; a bare ``"2.5.1"`` is read as PyTorch.
    ``py_version`` None lets the SDK pick its default. Raises SpecError, with the SDK's message, for a
    version, Python version, region or base framework it has no image for.
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
    return retrieve_image_uri(fw, region, **kwargs)
