"""The SageMaker training request's wire format, in one place for every side that reads or writes it.

The request builders (``specs/``) encode ``HyperParameters`` as the SDK does; the operators read a finished
job's hyperparameters back; the local backend's supervisor and its container contract decode and split them as
the training toolkit does, and count a ResourceConfig's hosts. None of these sides imports another for it: they
import this module, which is pure functions over the API's dicts and imports nothing heavy
(docs/contracts.md §1.2, §1.4 and §1.6: what the SDK and the toolkit do with each).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: hyperparameters the training toolkit keeps out of the user's (SAGEMAKER_HYPERPARAMETERS + _tuning_objective_metric)
TTK_FIXED_KEYS = ("sagemaker_program", "sagemaker_submit_directory", "sagemaker_enable_cloudwatch_metrics",
                  "sagemaker_region", "sagemaker_container_log_level", "sagemaker_job_name",
                  "default_user_module_name", "sagemaker_s3_output", "_tuning_objective_metric")

#: the distribution flags after which the toolkit counts the current instance group as a distribution group
DISTRIBUTION_FLAGS = ("sagemaker_mpi_enabled", "sagemaker_parameter_server_enabled",
                      "sagemaker_distributed_dataparallel_enabled", "sagemaker_pytorch_ddp_enabled",
                      "sagemaker_pytorch_xla_multi_worker_enabled", "sagemaker_multi_worker_mirrored_strategy_enabled",
                      "sagemaker_torch_distributed_enabled")


#: the tag a training or tuning job carries when its task declared ``secret_hyperparameters``: their names,
#: space-separated, so that the console and CLI mask their values whatever the names look like (the values are in
#: the request: SageMaker stores hyperparameters in clear). ``*``: every hyperparameter, where a name cannot be
#: written in a tag (SageMaker's tag value: at most 256 of letters, digits, spaces and ``_.:/=+-@``)
SECRET_HYPERPARAMETERS_TAG = "smdist:secret-hyperparameters"
_TAG_NAME = re.compile(r"^[\w.:/=+\-@]+$")


def secret_hyperparameters_tag(names: Iterable[str]) -> dict[str, str] | None:
    """The :data:`SECRET_HYPERPARAMETERS_TAG` tag for the declared ``names`` (None when there are none)."""
    names = list(dict.fromkeys(str(n) for n in names))
    if not names:
        return None
    value = " ".join(names)
    if len(value) > 256 or not all(_TAG_NAME.match(n) for n in names):
        value = "*"
    return {"Key": SECRET_HYPERPARAMETERS_TAG, "Value": value}


def declared_secret(request: dict[str, Any]) -> Callable[[str], bool]:
    """Whether a hyperparameter of the job that ``request`` (a Create* request, with its Tags) made was declared
    secret by its task (:data:`SECRET_HYPERPARAMETERS_TAG`)."""
    for tag in request.get("Tags") or []:
        if isinstance(tag, dict) and tag.get("Key") == SECRET_HYPERPARAMETERS_TAG:
            value = str(tag.get("Value") or "")
            if value.strip() == "*":
                return lambda name: True
            return set(value.split()).__contains__
    return lambda name: False


def encode_hyperparameters(hps: dict[str, Any], *, script_mode: bool) -> dict[str, str]:
    """HyperParameters are a str->str map. In script mode the SDK JSON-encodes every value (``0.1`` ->
    ``"0.1"``, ``"abc"`` -> ``"\\"abc\\""``, ``True`` -> ``"true"``) and the training toolkit decodes them;
    built-in algorithms take plain strings."""
    from airflow_smdist.specs.errors import SpecError

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


def decode_hyperparameters(raw: dict[str, str] | None) -> dict[str, Any]:
    """The training toolkit's read_hyperparameters(): json.loads each value, keeping the raw string when that
    fails."""
    out: dict[str, Any] = {}
    for k, v in (raw or {}).items():
        try:
            out[k] = json.loads(v)
        except (TypeError, ValueError):
            out[k] = v
    return out


def split_hyperparameters(hps: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(user hyperparameters, fixed sagemaker_* ones, additional framework parameters), as the toolkit splits
    them."""
    user: dict[str, Any] = {}
    fixed: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for k, v in hps.items():
        if k in TTK_FIXED_KEYS:
            fixed[k] = v
        elif k.startswith("sagemaker_"):
            extra[k] = v
        else:
            user[k] = v
    return user, fixed, extra


@dataclass(frozen=True)
class Hyperparameters:
    """A training request's hyperparameters, decoded and split once (see :func:`split_hyperparameters`)."""

    decoded: dict[str, Any]
    user: dict[str, Any]
    fixed: dict[str, Any]
    extra: dict[str, Any]

    @classmethod
    def of(cls, request: dict[str, Any]) -> Hyperparameters:
        decoded = decode_hyperparameters(request.get("HyperParameters"))
        return cls(decoded, *split_hyperparameters(decoded))


def to_cmd_args(hps: dict[str, Any]) -> list[str]:
    """The toolkit's mapping.to_cmd_args: sorted keys, ``--key`` (``-k`` for one letter), ``str`` of the value;
    dicts as ``k1=v1,k2=v2``."""
    args: list[str] = []
    for key in sorted(hps):
        value = hps[key]
        flag = f"-{key}" if len(key) == 1 else f"--{key}"
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in sorted(value.items()))
        args += [flag, "" if value is None else str(value)]
    return args


def host_count(resource_config: dict[str, Any]) -> int:
    """How many hosts a ResourceConfig asks for: its instance groups' counts, or its InstanceCount."""
    return (sum(int(g["InstanceCount"]) for g in resource_config.get("InstanceGroups") or [])
            or int(resource_config.get("InstanceCount", 1)))
