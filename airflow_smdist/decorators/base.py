"""What ``@task.smdist`` and ``@task.smdist_processing`` share, on top of the job operators they derive from:
the payload (checked before any job), the function's result as the task's XCom, and the first failing
rank's error as the task's error."""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING, Any

from airflow_smdist.decorators.payload import (
    DEFAULT_MAX_RESULT_BYTES,
    check_serializer,
    function_source,
    json_arguments,
    write_payload,
)
from airflow_smdist.kinds import kind_info
from airflow_smdist.specs.errors import SpecError

if TYPE_CHECKING:
    from airflow.sdk.bases.decorator import DecoratedOperator

    from airflow_smdist.decorators.results import SmdistFunctionError
    from airflow_smdist.operators.base import SmdistJobOperator

    class _FunctionJobOperator(DecoratedOperator, SmdistJobOperator):
        """What the mixin is mixed into, for the type checker only (at run time the mixin derives from
        ``object``: ``DecoratedOperator`` is the running Airflow line's, from ``taskflow_base()``)."""

        #: set by each decorated operator class (``BaseOperator`` reads it without declaring it)
        custom_operator_name: str

    _MixinBase = _FunctionJobOperator
else:
    _MixinBase = object

JOB_XCOM_KEY = "smdist_job"


class SmdistFunctionMixin(_MixinBase):
    """Mixed in before ``DecoratedOperator`` and a job operator (training or processing)."""

    #: the operator arguments the decorator sets itself (a DAG author's value would be ignored)
    reserved_arguments: tuple[str, ...] = ()
    function_kind = "training"

    def _init_function(self, kwargs: dict[str, Any], requirements: Any, serializer: str,
                       max_result_bytes: int | str) -> None:
        given = sorted(set(kwargs) & set(self.reserved_arguments))
        if given:
            raise TypeError(f"{given[0]} is set by @task.{self.decorator_short()} (it runs the decorated function); "
                            "drop it. Other code the function needs can be imported inside it, and installed "
                            "with requirements=[...].")
        self.requirements = requirements
        self.serializer = serializer
        self.max_result_bytes = max_result_bytes
        #: the running task's context (set first by ``execute`` and ``execute_complete``): where the job's own
        #: result goes as the XCom ``smdist_job``
        self._smdist_context: Any = None

    def decorator_short(self) -> str:
        return self.custom_operator_name.split(".", 1)[-1]

    # -- before any job --------------------------------------------------------------------------------
    def image_py_version(self) -> Any:
        return getattr(self, "py_version", None)

    def check_function(self) -> None:
        """Everything about the function and its arguments that can fail, before a job is looked up or made."""
        check_serializer(self.serializer, self.image_py_version())
        try:
            self.max_result_bytes = int(self.max_result_bytes)
        except (TypeError, ValueError):
            raise SpecError("max_result_bytes", f"{self.max_result_bytes!r} is not an integer.",
                            f"give a number of bytes, e.g. {DEFAULT_MAX_RESULT_BYTES}.") from None
        if self.serializer == "json":
            function_source(self.python_callable)
            json_arguments(self.python_callable.__name__, list(self.op_args), dict(self.op_kwargs))

    def write_function_payload(self, directory: str) -> list[str]:
        return write_payload(directory, function=self.python_callable, args=list(self.op_args),
                             kwargs=dict(self.op_kwargs), serializer=self.serializer, requirements=self.requirements,
                             max_result_bytes=int(self.max_result_bytes), kind=self.function_kind)

    def payload_directory(self) -> tempfile.TemporaryDirectory[str]:
        return tempfile.TemporaryDirectory(prefix="smdist-function-")

    # -- after the job ---------------------------------------------------------------------------------
    def check_and_result(self, description: dict[str, Any]) -> Any:
        status = kind_info(self.kind).status(description)
        if status == "Failed":
            error = self.function_error(description)
            if error is not None:
                self.lifecycle.last_description = description
                self.log.error("%s", error)
                raise error
        return super().check_and_result(description)

    def function_error(self, description: dict[str, Any]) -> SmdistFunctionError | None:
        from airflow_smdist.decorators.results import error_records, first_failure

        name = kind_info(self.kind).job_name(description)
        try:
            events, _ = self.lifecycle.log_events(name)  # with the lifecycle's throttling backoff
        except Exception as exc:  # noqa: BLE001 - the job's own failure reason is still reported
            self.log.warning("could not read the job's logs for the function's error records: %s", exc)
            return None
        records = error_records(events)
        return first_failure(records, name, self.kind) if records else None

    def push_job_info(self, info: dict[str, Any]) -> None:
        """The training / processing job's own small result, as the XCom ``smdist_job`` (beside the function's)."""
        context = self._smdist_context
        ti = context.get("ti") if context is not None else None
        if ti is not None and hasattr(ti, "xcom_push"):
            ti.xcom_push(key=JOB_XCOM_KEY, value=info)

    def before_execute(self, context: Any) -> None:
        """Called first by the concrete operators' ``execute`` (defined there, not here: Airflow 2 wraps only an
        ``execute`` its operator metaclass sees in a class body)."""
        self._smdist_context = context
        self.check_function()

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        self._smdist_context = context
        return super().execute_complete(context, event)
