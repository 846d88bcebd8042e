"""``@task.smdist_processing``: an embarrassingly parallel Python function, one call per host over its shard.

    @task.smdist_processing(framework="sklearn", framework_version="1.2-1", instance_count=4,
                            inputs={"records": {"source": "s3://b/records/", "distribution": "ShardedByS3Key"}},
                            code_location="s3://b/smdist")
    def count(min_value: float) -> dict:
        import glob
        from airflow_smdist.runtime import cluster
        shard = cluster().channels["records"]     # this host's share of the objects
        ...
        return {"n": n}                          # the task's XCom: every host's value, in host order

Every argument of :class:`~airflow_smdist.operators.processing.SmdistProcessingOperator` (it derives from it:
stable names, reattach, deferral, logs, ``on_kill``), except ``code``, ``command``, ``entrypoint`` and
``arguments``, which the decorator sets; ``requirements`` (installed with pip before the call, as the SDK's
FrameworkProcessor does), ``serializer`` and ``max_result_bytes`` (per host) as for ``@task.smdist``, and
``results_location`` (default ``code_location``, else the SDK's default bucket): each host's return value is
uploaded under ``<results_location>/<job>/output/smdist-results/``. Returns the list of every host's value,
in host order; a failing host fails the task with its exception type and traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_smdist._compat import taskflow_base
from airflow_smdist.decorators.base import SmdistFunctionMixin
from airflow_smdist.decorators.payload import DEFAULT_MAX_RESULT_BYTES, ENTRY_POINT, RESULTS_OUTPUT
from airflow_smdist.operators.processing import SmdistProcessingOperator

if TYPE_CHECKING:
    # the type checker sees Airflow 3's; at run time they are the running Airflow line's (2.10+ or 3)
    from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory
else:
    DecoratedOperator, task_decorator_factory = taskflow_base()

PAYLOAD_INPUT = "smdist-function"
PAYLOAD_PATH = "/opt/ml/processing/input/" + PAYLOAD_INPUT
RESULTS_PATH = "/opt/ml/processing/output/" + RESULTS_OUTPUT


def _with_entry(spec: Any, name: str, name_key: str, entry: dict[str, Any]) -> Any:
    """``inputs`` / ``outputs`` (a dict by name or a list) with one more entry."""
    if spec is None:
        return {name: entry}
    if isinstance(spec, dict):
        if name in spec:
            raise ValueError(f"{name!r} is the name @task.smdist_processing gives its own entry: rename yours.")
        return {**spec, name: entry}
    return [*spec, {name_key: name, **entry}]


class SmdistProcessingDecoratedOperator(SmdistFunctionMixin, DecoratedOperator, SmdistProcessingOperator):
    """The operator behind ``@task.smdist_processing`` (see the module's docstring)."""

    custom_operator_name = "@task.smdist_processing"
    function_kind = "processing"
    reserved_arguments = ("code", "command", "entrypoint", "arguments")
    template_fields: Sequence[str] = tuple(dict.fromkeys(
        ("op_args", "op_kwargs", "results_location", *SmdistProcessingOperator.template_fields)))
    template_fields_renderers: ClassVar[dict[str, str]] = {**SmdistProcessingOperator.template_fields_renderers,
                                 "op_args": "py", "op_kwargs": "py"}
    if TYPE_CHECKING:
        #: processing arguments (the operator's __init__ sets them, one attribute each): the DAG author's
        #: (rendered) values, checked by the request builder
        code: str | None
        command: Any
        arguments: Any
        inputs: Any
        outputs: Any

    def __init__(self, *, python_callable: Callable[..., Any], op_args: Any = None, op_kwargs: Any = None,
                 requirements: Any = None, serializer: str = "json",
                 max_result_bytes: int | str = DEFAULT_MAX_RESULT_BYTES, results_location: str | None = None,
                 **kwargs: Any) -> None:
        self._init_function(kwargs, requirements, serializer, max_result_bytes)
        self.results_location = results_location
        super().__init__(python_callable=python_callable, op_args=op_args, op_kwargs=op_kwargs, **kwargs)

    def execute(self, context: Any) -> Any:
        self.before_execute(context)
        return super().execute(context)

    def build_request(self, job_name: str, backend_name: str, context: Any) -> dict[str, Any]:
        location = (self.results_location or self.code_location or self.default_code_location()).rstrip("/")
        saved = self.code, self.command, self.arguments, self.inputs, self.outputs
        with self.payload_directory() as directory:
            files = self.write_function_payload(directory)
            self.log.info("Payload of %s(): %s", self.python_callable.__name__, ", ".join(files))
            self.code = os.path.join(directory, ENTRY_POINT)
            self.command = ["python3"]
            self.arguments = ["--smdist-kind", "processing", "--smdist-payload", PAYLOAD_PATH,
                              "--smdist-results", RESULTS_PATH]
            self.inputs = _with_entry(self.inputs, PAYLOAD_INPUT, "input_name",
                                      {"source": directory, "destination": PAYLOAD_PATH})
            self.outputs = _with_entry(self.outputs, RESULTS_OUTPUT, "output_name",
                                       {"source": RESULTS_PATH,
                                        "destination": f"{location}/{job_name}/output/{RESULTS_OUTPUT}"})
            try:
                return super().build_request(job_name, backend_name, context)
            finally:
                self.code, self.command, self.arguments, self.inputs, self.outputs = saved

    def result(self, description: dict[str, Any]) -> Any:
        if description["ProcessingJobStatus"] != "Completed":  # wait_for_completion=False
            return super().result(description)
        from airflow_smdist.decorators.results import read_processing_results
        from airflow_smdist.storage import Storage

        info = super().result(description)
        result = read_processing_results(Storage.for_backend(self.get_backend()), description,
                                         int(self.max_result_bytes))
        self.log.info("%d host(s) returned (%s).", len(result.value), result.uri)
        self.push_job_info(info)
        return result.value


def smdist_processing_task(python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None,
                           **kwargs: Any) -> TaskDecorator:
    """``@task.smdist_processing``: one call of the decorated function per host of a processing job (see
    :mod:`airflow_smdist.decorators.processing`)."""
    return task_decorator_factory(python_callable=python_callable, multiple_outputs=multiple_outputs,
                                  decorated_operator_class=SmdistProcessingDecoratedOperator, **kwargs)
