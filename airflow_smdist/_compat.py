"""Every difference between the Airflow versions MWAA runs (2.10.3 .. 3.3.x) lives here, nowhere else."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow import __version__ as AIRFLOW_VERSION
# Airflow 3 re-exports it from airflow.sdk.exceptions without an `as` alias, so mypy's no-implicit-reexport check
# (strict) does not see it there; it is airflow.exceptions' public name on every line
from airflow.exceptions import AirflowException  # type: ignore[attr-defined]

AIRFLOW_V_3_0_PLUS = int(AIRFLOW_VERSION.split(".")[0]) >= 3

if AIRFLOW_V_3_0_PLUS:
    from airflow.sdk import BaseOperator, BaseOperatorLink, Param
else:  # Airflow 2.10 / 2.11
    from airflow.models.param import Param  # type: ignore[no-redef]
    from airflow.models import BaseOperator
    from airflow.models.baseoperatorlink import BaseOperatorLink  # type: ignore[no-redef]

if TYPE_CHECKING:
    from airflow.plugins_manager import AirflowPlugin
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
        from airflow.hooks.base import BaseHook  # type: ignore[no-redef,attr-defined]  # gone from 3.x's module
    return {"BaseHook": BaseHook}


#: Names imported on first use (PEP 562), not when a DAG file imports an operator: sensors and hooks are not
#: needed to parse a DAG, and importing their Airflow modules is a measurable part of a DAG file's parse time.
def _plugin_names() -> dict[str, Any]:
    from airflow.plugins_manager import AirflowPlugin  # core's on every line (Airflow 3 validates by name)

    return {"AirflowPlugin": AirflowPlugin}


_LAZY = {"BaseSensorOperator": _sensor_names, "PokeReturnValue": _sensor_names, "BaseHook": _hook_names,
         "AirflowPlugin": _plugin_names}


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
    "AirflowPlugin",
    "BaseHook",
    "BaseOperator",
    "BaseOperatorLink",
    "BaseSensorOperator",
    "ConnectionLookupError",
    "console_supported",
    "FINISHED_TI_STATES",
    "Param",
    "PokeReturnValue",
    "TaskStateUnknown",
    "default_deferrable",
    "get_connection_extra",
    "mask_hyperparameter",
    "mask_secret",
    "provider_cli_supported",
    "sensitive_name",
    "task_instance_state",
    "taskflow_base",
    "task_xcom_delete",
    "trigger_xcom_get",
    "trigger_xcom_set",
]


def mask_secret(value: str) -> None:
    """Register ``value`` with Airflow's secrets masker so task logs show *** instead."""
    try:
        from airflow.sdk.log import mask_secret as _mask
    except ImportError:
        try:
            from airflow.sdk.execution_time.secrets_masker import mask_secret as _mask  # type: ignore[no-redef]
        except ImportError:  # Airflow 2
            from airflow.utils.log.secrets_masker import mask_secret as _mask  # type: ignore[no-redef]
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


def _secrets_backends() -> list[Any]:
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


def get_connection_extra(conn_id: str | None) -> dict[str, Any]:
    """The extra of connection ``conn_id`` as a dict, or {} when no such connection is defined.

    Only "not defined" gives {}: an extra that is not a JSON object, or a secrets backend that failed,
    raises :class:`ConnectionLookupError`, so a job meant for SageMaker never quietly runs elsewhere."""
    if not conn_id:
        return {}
    try:
        from airflow.sdk.exceptions import AirflowNotFoundException
    except ImportError:  # Airflow 2
        # (Airflow 3 re-exports it without an `as` alias: see AirflowException above)
        from airflow.exceptions import AirflowNotFoundException  # type: ignore[attr-defined]
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


def taskflow_base() -> tuple[Any, Any]:
    """(DecoratedOperator, task_decorator_factory) of this Airflow line, for the provider's @task.* decorators."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.bases.decorator import DecoratedOperator, task_decorator_factory
    else:  # Airflow 2.10 / 2.11
        from airflow.decorators.base import DecoratedOperator, task_decorator_factory  # type: ignore[no-redef]
    return DecoratedOperator, task_decorator_factory


# -- the `smdist` commands (airflow_smdist.cli) ---------------------------------------------------------------
#: Airflow >= 3.2 adds the commands a provider lists under its provider info's ``cli`` key to its own CLI
#: (``airflow smdist ...``); 2.10, 2.11, 3.0 and 3.1 only take commands from executors and auth managers, so
#: there the same commands are the ``smdist`` console script (``[project.scripts]``).
def provider_cli_supported() -> bool:
    from airflow.providers_manager import ProvidersManager

    return hasattr(ProvidersManager, "cli_command_functions")


# -- the job page of local jobs (airflow_smdist.plugins) -------------------------------------------------------
#: Airflow 3 serves a plugin's FastAPI apps in its api-server (``fastapi_apps``, 3.0+) and shows its external
#: views in the UI's navigation (``external_views``, 3.1+); Airflow 2's Flask webserver takes neither, so there
#: the plugin registers nothing and local jobs keep no link (the ``smdist jobs`` commands remain).
def console_supported() -> bool:
    return AIRFLOW_V_3_0_PLUS


#: a task instance in one of these states no longer uses its jobs (Airflow's ``State.finished``)
FINISHED_TI_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


class TaskStateUnknown(Exception):
    """Neither the Task SDK (in a task on Airflow 3) nor the metadata database can tell a task instance's state."""


def _ti_state_from_task_sdk(dag_id: str, task_id: str, run_id: str, map_index: int) -> tuple[bool, str | None] | None:
    """Inside a running task on Airflow 3 (no database access there): ask the API server through the task
    runner's channel. None outside a task."""
    if not AIRFLOW_V_3_0_PLUS:
        return None
    from airflow.sdk.execution_time import task_runner

    if getattr(task_runner, "SUPERVISOR_COMMS", None) is None:
        return None
    states = task_runner.RuntimeTaskInstance.get_task_states(dag_id=dag_id, map_index=map_index,
                                                             task_ids=[task_id], run_ids=[run_id])
    key = task_id if map_index < 0 else f"{task_id}_{map_index}"  # as the execution API keys them
    run = states.get(run_id) or {}
    return (True, run[key]) if key in run else (False, None)


def _ti_state_from_db(dag_id: str, task_id: str, run_id: str, map_index: int) -> tuple[bool, str | None]:
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.execute(select(TaskInstance.state).where(
            TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id, TaskInstance.run_id == run_id,
            TaskInstance.map_index == map_index)).first()
    return (False, None) if row is None else (True, None if row[0] is None else str(row[0]))


def task_instance_state(dag_id: str, task_id: str, run_id: str, map_index: int) -> tuple[bool, str | None]:
    """(whether the task instance exists, its state) from the Task SDK inside a task on Airflow 3, else from the
    metadata database (the CLI; Airflow 2's workers). Raises :class:`TaskStateUnknown` when neither answers."""
    try:
        answer = _ti_state_from_task_sdk(dag_id, task_id, run_id, map_index)
        return answer if answer is not None else _ti_state_from_db(dag_id, task_id, run_id, map_index)
    except Exception as exc:  # no database configured, unreachable, not migrated, no API server
        raise TaskStateUnknown(f"{type(exc).__name__}: {exc}") from exc


def sensitive_name(name: str) -> bool:
    """Whether a value named ``name`` (a hyperparameter, an environment variable) looks secret, as Airflow's
    secrets masker decides for connection extras and variables (``[core] sensitive_var_conn_names`` too)."""
    for module in ("airflow.sdk._shared.secrets_masker", "airflow._shared.secrets_masker",
                   "airflow.sdk.execution_time.secrets_masker", "airflow.utils.log.secrets_masker"):
        try:
            should_hide = __import__(module, fromlist=["should_hide_value_for_key"]).should_hide_value_for_key
            return bool(should_hide(name))
        except (ImportError, AttributeError):
            continue
    lowered = name.lower()  # pragma: no cover - every supported line has one of the above
    return any(s in lowered for s in ("password", "secret", "token", "api_key", "apikey", "private_key"))


# -- a trigger's log cursor in its task instance's XCom (airflow_smdist.triggers.cursor) --------------------------
#: Airflow 3 (3.0.6 .. 3.3): a trigger has no database; it sends GetXCom/SetXCom to its triggerer's supervisor,
#: which calls the execution API (``SUPERVISOR_COMMS.asend``, awaited in the triggerer's event loop: the message
#: classes and ``asend`` are the same on every 3.x line MWAA runs). Airflow 2.10 / 2.11: the triggerer has the
#: database, and ``XCom.get_one``/``XCom.set`` run in a thread. Values are plain JSON (a dict of numbers, strings
#: and lists), stored as they are.
async def trigger_xcom_get(ti: Any, key: str) -> Any:
    """From a running trigger: the XCom ``key`` of its task instance ``ti`` (None when there is none)."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.execution_time.comms import GetXCom, XComResult
        from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

        answer = await SUPERVISOR_COMMS.asend(GetXCom(key=key, dag_id=ti.dag_id, run_id=ti.run_id,
                                                      task_id=ti.task_id, map_index=ti.map_index))
        return answer.value if isinstance(answer, XComResult) else None
    import asyncio

    from airflow.models.xcom import XCom

    return await asyncio.to_thread(XCom.get_one, key=key, dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id,
                                   map_index=ti.map_index)


async def trigger_xcom_set(ti: Any, key: str, value: Any) -> None:
    """From a running trigger: set its task instance's XCom ``key`` to ``value`` (JSON). Raises on failure."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.execution_time.comms import ErrorResponse, SetXCom
        from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

        answer = await SUPERVISOR_COMMS.asend(SetXCom(key=key, value=value, dag_id=ti.dag_id, run_id=ti.run_id,
                                                      task_id=ti.task_id, map_index=ti.map_index))
        if isinstance(answer, ErrorResponse):
            raise AirflowException(f"SetXCom {key!r} failed: {answer.error} {answer.detail}")
        return
    import asyncio

    from airflow.models.xcom import XCom

    await asyncio.to_thread(XCom.set, key, value, dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id,
                            map_index=ti.map_index)


def task_xcom_delete(ti: Any, key: str) -> None:
    """From a running task (``context["ti"]``): delete its XCom ``key``, if any. Airflow 3: one DeleteXCom to the
    task's supervisor; Airflow 2: one DELETE in the metadata database."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.execution_time.comms import DeleteXCom
        from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

        SUPERVISOR_COMMS.send(DeleteXCom(key=key, dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id,
                                         map_index=ti.map_index))
        return
    from sqlalchemy import delete

    from airflow.models.xcom import XCom
    from airflow.utils.session import create_session

    with create_session() as session:
        session.execute(delete(XCom).where(XCom.key == key, XCom.dag_id == ti.dag_id, XCom.task_id == ti.task_id,
                                           XCom.run_id == ti.run_id, XCom.map_index == ti.map_index))
