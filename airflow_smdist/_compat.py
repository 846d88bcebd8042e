"""Every difference between the Airflow versions MWAA runs (2.10.3 .. 3.3.x) lives here, nowhere else."""

from __future__ import annotations

from airflow import __version__ as AIRFLOW_VERSION

AIRFLOW_V_3_0_PLUS = int(AIRFLOW_VERSION.split(".")[0]) >= 3

if AIRFLOW_V_3_0_PLUS:
    from airflow.sdk import BaseOperator, BaseOperatorLink, BaseSensorOperator, Param, PokeReturnValue
else:  # Airflow 2.10 / 2.11
    from airflow.models.param import Param  # type: ignore[no-redef]
    from airflow.models import BaseOperator  # type: ignore[no-redef]
    from airflow.models.baseoperatorlink import BaseOperatorLink  # type: ignore[no-redef]
    from airflow.sensors.base import BaseSensorOperator, PokeReturnValue  # type: ignore[no-redef]

try:  # Airflow >= 3.1
    from airflow.sdk import BaseHook
except ImportError:  # pragma: no cover - older lines
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef]

from airflow.exceptions import AirflowException

__all__ = [
    "AIRFLOW_VERSION",
    "AIRFLOW_V_3_0_PLUS",
    "AirflowException",
    "BaseHook",
    "BaseOperator",
    "BaseOperatorLink",
    "BaseSensorOperator",
    "Param",
    "PokeReturnValue",
    "default_deferrable",
    "get_connection_extra",
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


def default_deferrable() -> bool:
    """``[operators] default_deferrable``, as Airflow's own deferrable operators read it."""
    from airflow.configuration import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


def get_connection_extra(conn_id: str | None) -> dict:
    """The extra of connection ``conn_id`` as a dict, or {} when no such connection is defined."""
    if not conn_id:
        return {}
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - AirflowNotFoundException differs across versions
        return {}
    return dict(conn.extra_dejson or {})


def taskflow_base():
    """(DecoratedOperator, task_decorator_factory) of this Airflow line, for the provider's @task.* decorators."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.bases.decorator import DecoratedOperator, task_decorator_factory
    else:  # Airflow 2.10 / 2.11
        from airflow.decorators.base import DecoratedOperator, task_decorator_factory  # type: ignore[no-redef]
    return DecoratedOperator, task_decorator_factory
