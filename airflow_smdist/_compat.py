"""Every difference between the Airflow versions MWAA runs (2.10.3 .. 3.3.x) lives here, nowhere else."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow import __version__ as AIRFLOW_VERSION
from airflow.exceptions import AirflowException

AIRFLOW_V_3_0_PLUS = int(AIRFLOW_VERSION.split(".")[0]) >= 3

if AIRFLOW_V_3_0_PLUS:
    from airflow.sdk import BaseOperator, BaseOperatorLink, Param
else:  # Airflow 2.10 / 2.11
    from airflow.models.param import Param  # type: ignore[no-redef]
    from airflow.models import BaseOperator  # type: ignore[no-redef]
    from airflow.models.baseoperatorlink import BaseOperatorLink  # type: ignore[no-redef]

if TYPE_CHECKING:
    from airflow.sdk import BaseHook, BaseSensorOperator, PokeReturnValue


def _sensor_names() -> dict[str, Any]:
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk import BaseSensorOperator, PokeReturnValue
    else:  # Airflow 2.10 / 2.11
        from airflow.sensors.base import BaseSensorOperator, PokeReturnValue  # type: ignore[no-redef]
    return {"BaseSensorOperator": BaseSensorOperator, "PokeReturnValue": PokeReturnValue}


def _hook_names() -> dict[str, Any]:
    try:  # Airflow >= 3.1
        from airflow.sdk import BaseHook
    except ImportError:  # pragma: no cover - older lines
        from airflow.hooks.base import BaseHook  # type: ignore[no-redef]
    return {"BaseHook": BaseHook}


#: Names imported on first use (PEP 562), not when a DAG file imports an operator: sensors and hooks are not
#: needed to parse a DAG, and importing their Airflow modules is a measurable part of a DAG file's parse time.
_LAZY = {"BaseSensorOperator": _sensor_names, "PokeReturnValue": _sensor_names, "BaseHook": _hook_names}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        names = _LAZY[name]()
        globals().update(names)
        return names[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "AIRFLOW_VERSION",
    "AIRFLOW_V_3_0_PLUS",
    "AirflowException",
    "BaseHook",
    "BaseOperator",
    "BaseOperatorLink",
    "BaseSensorOperator",
    "ConnectionLookupError",
    "Param",
    "PokeReturnValue",
    "default_deferrable",
    "get_connection_extra",
    "mask_hyperparameter",
    "mask_secret",
    "taskflow_base",
]


def mask_secret(value) -> None:
    """Register ``value`` with Airflow's secrets masker so task logs show *** instead."""
    try:
        from airflow.sdk.log import mask_secret as _mask
    except ImportError:
        try:
            from airflow.sdk.execution_time.secrets_masker import mask_secret as _mask
        except ImportError:  # Airflow 2
            from airflow.utils.log.secrets_masker import mask_secret as _mask
    _mask(value)


def mask_hyperparameter(value: object) -> None:
    """Register a secret hyperparameter's value with Airflow's secrets masker, in every form it takes: as
    given, JSON-encoded as the request carries it, and decoded from that (a description's string)."""
    import json

    if value in (None, ""):
        return
    forms = {str(value), json.dumps(value)}
    if isinstance(value, str):
        try:
            forms.add(str(json.loads(value)))
        except ValueError:
            pass
    for form in forms:
        if form.strip('"'):
            mask_secret(form)


def default_deferrable() -> bool:
    """``[operators] default_deferrable``, as Airflow's own deferrable operators read it."""
    from airflow.configuration import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


class ConnectionLookupError(AirflowException):
    """The connection exists, or may exist, but cannot be used: never a reason to fall back to a default."""


def _secrets_backends() -> list:
    """The secrets backends Airflow searches for connections in this process, in order."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.execution_time.supervisor import ensure_secrets_backend_loaded

        return list(ensure_secrets_backend_loaded())
    from airflow.configuration import ensure_secrets_loaded  # Airflow 2

    return list(ensure_secrets_loaded())


def _backend_error(conn_id: str) -> BaseException | None:
    """Airflow turns a secrets backend's error into "not defined" (it logs it and tries the next backend):
    ask each backend again, and return the first error, if any."""
    try:
        backends = _secrets_backends()
    except Exception as exc:  # noqa: BLE001 - a backend that cannot even be built is an error too
        return exc
    for backend in backends:
        try:
            if backend.get_connection(conn_id=conn_id):
                return None
        except Exception as exc:  # noqa: BLE001 - any backend's own error
            return exc
    return None


def get_connection_extra(conn_id: str | None) -> dict:
    """The extra of connection ``conn_id`` as a dict, or {} when no such connection is defined.

    Only "not defined" gives {}: an extra that is not a JSON object, or a secrets backend that failed,
    raises :class:`ConnectionLookupError`, so a job meant for SageMaker never quietly runs elsewhere."""
    if not conn_id:
        return {}
    try:
        from airflow.sdk.exceptions import AirflowNotFoundException
    except ImportError:  # Airflow 2
        from airflow.exceptions import AirflowNotFoundException  # type: ignore[no-redef]
    try:
        conn = _hook_names()["BaseHook"].get_connection(conn_id)
    except AirflowNotFoundException:
        error = _backend_error(conn_id)
        if error is None:
            return {}
        raise ConnectionLookupError(
            f"connection {conn_id!r}: a secrets backend failed while looking it up ({type(error).__name__}: {error}); "
            "not falling back to the default backend. Fix the secrets backend, or set backend= on the operator."
        ) from error
    raw = conn.extra
    if not raw:
        return {}
    import json

    try:
        extra = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        raise ConnectionLookupError(
            f"connection {conn_id!r}: its extra is not valid JSON ({exc}); write it as a JSON object, e.g. "
            '{"backend": "sagemaker", "region_name": "us-east-1"}.') from None
    if not isinstance(extra, dict):
        raise ConnectionLookupError(
            f"connection {conn_id!r}: its extra must be a JSON object, got {type(extra).__name__}; e.g. "
            '{"backend": "sagemaker", "region_name": "us-east-1"}.')
    conn.extra_dejson  # noqa: B018 - Airflow masks the extra's sensitive values when it parses it
    return extra


def taskflow_base():
    """(DecoratedOperator, task_decorator_factory) of this Airflow line, for the provider's @task.* decorators."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.bases.decorator import DecoratedOperator, task_decorator_factory
    else:  # Airflow 2.10 / 2.11
        from airflow.decorators.base import DecoratedOperator, task_decorator_factory  # type: ignore[no-redef]
    return DecoratedOperator, task_decorator_factory
