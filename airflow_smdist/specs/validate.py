"""Validate a request against botocore's SageMaker service model, with errors that name field and fix.

botocore's own ParamValidator checks required members, unknown members, types and minimums. The service
model also carries enums, maximums and patterns that botocore leaves to the server; we check those too,
so a mistake is reported here, before any file is written or API call is made, not by the service later.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from airflow_smdist.specs.errors import SpecError, SpecErrors, close_matches

#: URI schemes the local backend reads and writes besides s3:// (SageMaker itself only takes s3/https).
LOCAL_URI_PREFIXES = ("file://",)


@lru_cache(maxsize=1)
def service_model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


def operation_model(operation_name: str) -> Any:
    return service_model().operation_model(operation_name)


def shape_for(operation_name: str, path: str) -> Any:
    """The botocore shape of member ``path`` ("ResourceConfig.InstanceType") of an operation's input."""
    shape = operation_model(operation_name).input_shape
    for part in path.split("."):
        if shape.type_name == "list":
            shape = shape.member
        shape = shape.members[part]
    return shape


def enum_values(operation_name: str, path: str) -> list[str]:
    return list(shape_for(operation_name, path).enum)


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error:  # a Java-only construct (\p{..}); leave that pattern to the service
        return None


def validate_request(
    operation_name: str, request: dict[str, Any], *, allow_local_uris: bool = True
) -> dict[str, Any]:
    """Check ``request`` for ``operation_name`` ("CreateTrainingJob"). Returns it unchanged, else raises
    SpecErrors listing every problem. ``allow_local_uris`` lets file:// stand where the model asks for an
    S3 URI (the local backend's own storage); the sagemaker backend validates with it off."""
    from botocore.validate import ParamValidator

    op = operation_model(operation_name)
    errors: list[SpecError] = []
    report = ParamValidator().validate(request, op.input_shape)
    for error_type, name, info in report._errors:  # botocore keeps them as (type, name, info) tuples
        errors.append(_botocore_error(operation_name, error_type, name, info))
    _walk(op.input_shape, request, operation_name, errors, allow_local_uris)
    if errors:
        # de-duplicate (botocore and our walk may both see one mistake) keeping order
        seen, unique = set(), []
        for e in errors:
            if str(e) not in seen:
                seen.add(str(e))
                unique.append(e)
        raise SpecErrors(unique)
    return request


def _field(operation_name: str, name: str) -> str:
    name = name.lstrip(".")  # botocore names nested members ".Outer.Inner"
    return f"{operation_name}.{name}" if name else operation_name


def _botocore_error(operation_name: str, error_type: str, name: str, info: dict[str, Any]) -> SpecError:
    name = name.lstrip(".")
    where = _field(operation_name, name)
    if error_type == "missing required field":
        req = info.get("required_name")
        return SpecError(f"{where}.{req}" if name else _field(operation_name, str(req)),
                         "is required but missing.", f"add '{req}' to the request.")
    if error_type == "unknown field":
        unknown = info.get("unknown_param")
        names = list(info.get("valid_names") or [])
        close = close_matches(str(unknown), names, n=1)
        fix = f"did you mean '{close[0]}'?" if close else f"use one of {sorted(names)}."
        return SpecError(f"{where}.{unknown}" if name else _field(operation_name, str(unknown)),
                         "is not a member of this request.", fix)
    if error_type == "invalid type":
        valid = ", ".join(getattr(t, "__name__", str(t)) for t in info.get("valid_types", ()))
        param = info.get("param")
        return SpecError(where, f"has type {type(param).__name__} (value {param!r}).",
                         f"give a value of type {valid}.")
    if error_type in ("invalid range", "invalid length"):
        what = "length" if error_type == "invalid length" else "value"
        return SpecError(where, f"{what} of {info.get('param')!r} is below the minimum {info.get('min_allowed')}.",
                         f"use a {what} of at least {info.get('min_allowed')}.")
    return SpecError(where, f"{error_type}: {info}", "")


def _check_string(shape: Any, value: str, path: str, errors: list[SpecError], allow_local: bool) -> None:
    """A string member against its enum, length and pattern (local URIs pass where allowed)."""
    meta = shape.metadata
    if shape.enum and value not in shape.enum:
        close = close_matches(value, shape.enum, n=1)
        fix = f"did you mean '{close[0]}'?" if close else ""
        allowed = list(shape.enum)
        listing = ", ".join(allowed[:12]) + (", ..." if len(allowed) > 12 else "")
        errors.append(SpecError(path, f"{value!r} is not one of: {listing}.",
                                fix or f"use one of the {len(allowed)} allowed values."))
        return
    if "max" in meta and len(value) > meta["max"]:
        errors.append(SpecError(path, f"is {len(value)} characters long; at most {meta['max']} are allowed.",
                                f"shorten it to {meta['max']} characters."))
    pattern = meta.get("pattern")
    if pattern and value:
        if allow_local and value.startswith(LOCAL_URI_PREFIXES) and "://" in pattern:
            return
        rx = _compiled(pattern)
        if rx is not None and not rx.fullmatch(value):  # the service matches whole values (Java matches())
            hint = ("give an s3:// URI." if "s3" in pattern and "://" in pattern
                    else f"make it match the pattern {pattern}.")
            errors.append(SpecError(path, f"{value!r} is not allowed here.", hint))


def _walk(shape: Any, value: Any, path: str, errors: list[SpecError], allow_local: bool) -> None:
    if value is None:
        return
    t = shape.type_name
    meta = shape.metadata
    if t == "structure" and isinstance(value, dict):
        for key, v in value.items():
            if key in shape.members:
                _walk(shape.members[key], v, f"{path}.{key}", errors, allow_local)
    elif t == "list" and isinstance(value, list):
        if "max" in meta and len(value) > meta["max"]:
            errors.append(SpecError(path, f"has {len(value)} entries; at most {meta['max']} are allowed.",
                                    f"give at most {meta['max']}."))
        for i, v in enumerate(value):
            _walk(shape.member, v, f"{path}[{i}]", errors, allow_local)
    elif t == "map" and isinstance(value, dict):
        if "max" in meta and len(value) > meta["max"]:
            errors.append(SpecError(path, f"has {len(value)} entries; at most {meta['max']} are allowed.",
                                    f"give at most {meta['max']}."))
        for k, v in value.items():
            _walk(shape.key, k, f"{path}[{k!r}] (key)", errors, allow_local)
            _walk(shape.value, v, f"{path}[{k!r}]", errors, allow_local)
    elif t == "string" and isinstance(value, str):
        _check_string(shape, value, path, errors, allow_local)
    elif (t in ("integer", "long", "float", "double") and isinstance(value, (int, float))
          and not isinstance(value, bool)):
        if "max" in meta and value > meta["max"]:
            errors.append(SpecError(path, f"{value} is above the maximum {meta['max']}.",
                                    f"use at most {meta['max']}."))
