"""``@task.smdist``: run a Python function as a (multi-host) SageMaker training job, on either backend.

    @task.smdist(framework="pytorch", framework_version="2.5", py_version="py311",
                 instance_type="ml.g5.12xlarge", instance_count=2, output_path="s3://b/out",
                 distribution={"torch_distributed": {"enabled": True}},
                 inputs={"train": {"s3_uri": "s3://b/train/", "distribution": "ShardedByS3Key"}},
                 requirements=["scikit-learn==1.5.2"])
    def train(epochs: int, lr: float) -> dict:
        from airflow_smdist.runtime import cluster
        c = cluster()          # rank, world size, master address, this host's shard of each channel
        ...
        return {"loss": loss}  # global rank 0's return value becomes the task's XCom

Every argument of :class:`~airflow_smdist.operators.training.SageMakerDistributedTrainingOperator` (it
derives from it: stable job names and reattach on retry, deferrable waiting, logs of every host, ``on_kill``
stops the job, ``secret_hyperparameters``, best-practice warnings, ``lr_scaling``), except ``entry_point``,
``source_dir`` and ``include_runtime``, which the decorator sets. Plus:

* ``requirements``: the code's ``requirements.txt`` (installed by the training container, as for any script);
* ``serializer``: ``"json"`` (default: the function's source and JSON arguments travel) or ``"cloudpickle"``
  (opt-in: function and arguments pickled; refused before any job unless ``py_version`` names this Python);
* ``max_result_bytes``: the largest return value, as JSON (default 1 MiB).

The function runs in every process the job's launcher starts (one per host; torchrun / MPI: one per GPU,
else one). Only global rank 0's return value becomes the task's XCom; the training job's small result
(job name, model artifacts, metrics) is the XCom ``smdist_job``. A parameter the call leaves to its default
takes the hyperparameter of that name (e.g. ``learning_rate`` from ``lr_scaling``). The Airflow context is
not passed into the job: pass what you need as (templated) arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_smdist._compat import taskflow_base
from airflow_smdist.decorators.base import SmdistFunctionMixin
from airflow_smdist.decorators.payload import DEFAULT_MAX_RESULT_BYTES, ENTRY_POINT
from airflow_smdist.operators.training import (
    SageMakerDistributedTrainingOperator,
    training_result,
)

if TYPE_CHECKING:
    # the type checker sees Airflow 3's; at run time they are the running Airflow line's (2.10+ or 3)
    from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory
else:
    DecoratedOperator, task_decorator_factory = taskflow_base()


class SmdistTrainingDecoratedOperator(SmdistFunctionMixin, DecoratedOperator, SageMakerDistributedTrainingOperator):
    """The operator behind ``@task.smdist`` (see the module's docstring)."""

    custom_operator_name = "@task.smdist"
    function_kind = "training"
    reserved_arguments = ("entry_point", "source_dir", "include_runtime")
    template_fields: Sequence[str] = tuple(dict.fromkeys(
        ("op_args", "op_kwargs", *SageMakerDistributedTrainingOperator.template_fields)))
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **SageMakerDistributedTrainingOperator.template_fields_renderers, "op_args": "py", "op_kwargs": "py"}
    if TYPE_CHECKING:
        #: a training argument (the operator's __init__ sets them, one attribute each): a local directory or None
        source_dir: str | None

    def __init__(self, *, python_callable: Callable[..., Any], op_args: Any = None, op_kwargs: Any = None,
                 requirements: Any = None, serializer: str = "json",
                 max_result_bytes: int | str = DEFAULT_MAX_RESULT_BYTES, **kwargs: Any) -> None:
        self._init_function(kwargs, requirements, serializer, max_result_bytes)
        super().__init__(python_callable=python_callable, op_args=op_args, op_kwargs=op_kwargs,
                         entry_point=ENTRY_POINT, **kwargs)

    def execute(self, context: Any) -> Any:
        self.before_execute(context)
        return super().execute(context)

    def build_request(self, job_name: str, backend_name: str, context: Any) -> dict[str, Any]:
        with self.payload_directory() as directory:
            files = self.write_function_payload(directory)
            self.log.info("Payload of %s(): %s", self.python_callable.__name__, ", ".join(files))
            self.source_dir = directory
            try:
                return super().build_request(job_name, backend_name, context)
            finally:
                self.source_dir = None

    def result(self, description: dict[str, Any]) -> Any:
        if description["TrainingJobStatus"] != "Completed":  # wait_for_completion=False
            return super().result(description)
        from airflow_smdist.decorators.results import read_training_result
        from airflow_smdist.storage import Storage

        info = super().result(description)
        result = read_training_result(Storage.for_backend(self.get_backend()), description,
                                      int(self.max_result_bytes))
        self.log.info("Global rank 0 (on %s, world size %s) returned %d bytes of JSON (%s).",
                      result.done.get("host"), result.done.get("world_size"), result.done.get("bytes"), result.uri)
        self.push_job_info(info)
        return result.value


def smdist_task(python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None,
                **kwargs: Any) -> TaskDecorator:
    """``@task.smdist``: run the decorated function as a SageMaker training job (see
    :mod:`airflow_smdist.decorators.smdist`)."""
    return task_decorator_factory(python_callable=python_callable, multiple_outputs=multiple_outputs,
                                  decorated_operator_class=SmdistTrainingDecoratedOperator, **kwargs)


__all__ = ["SmdistTrainingDecoratedOperator", "smdist_task", "training_result"]
