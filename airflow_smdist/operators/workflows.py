"""Many jobs (seed Option 4): fan-out, a sequence whose configuration changes, a chain past 28 days.

- :func:`fan_out_training`: sub-tasks with their own channels, hyperparameters, metadata and instance
  types, through dynamic task mapping. Each mapped task instance has its own stable job name (the map
  index is part of it), so a retry reattaches to its still-running job instead of starting a duplicate.
- :func:`growing_batch_training`: a sequence of training jobs whose batch size grows stage by stage; each
  stage resumes from the previous stage's checkpoint (one checkpoint S3 URI: SageMaker copies it in at
  start) and has its learning rate rescaled for its global batch by the linear scaling rule.
- :class:`SageMakerTrainingChainOperator`: one long training as links of jobs, each limited to
  ``max_run`` (SageMaker's ceiling is 28 days) and resuming from the checkpoint, until the script says it
  is finished (a marker file in its checkpoint directory, or a metric), with a bound on the links.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow_smdist._compat import AirflowException
from airflow_smdist.operators.base import NAME_LIMIT, require_role, stable_job_name
from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator


def fan_out_training(task_id: str, *, subtasks: Sequence[dict[str, Any]] | Any, **common: Any) -> Any:
    """One training job per sub-task, via ``expand_kwargs``: every key of a sub-task dict (``inputs``,
    ``hyperparameters``, ``instance_type``, ``tags``, ...) overrides ``common`` for that job. ``subtasks``
    may be a list or an XComArg (a task returning the list), so the split can be decided at run time."""
    return SageMakerDistributedTrainingOperator.partial(task_id=task_id, **common).expand_kwargs(subtasks)


def growing_batch_training(group_id: str, *, stages: Sequence[dict[str, Any]], lr_scaling: dict[str, Any],
                           checkpoint_s3_uri: str, hyperparameters: dict[str, Any] | None = None,
                           batch_size_hyperparameter: str = "batch_size",
                           epochs_hyperparameter: str = "epochs", **common: Any) -> Any:
    """A TaskGroup of chained training jobs, one per stage ``{"batch_size": 64, "epochs": 2, ...}`` (other
    keys, e.g. ``instance_count``, override ``common`` for that stage). Epochs accumulate: stage *k* trains
    until the sum of the epochs of stages 1..k, resuming from the checkpoint the previous stage left."""
    from airflow_smdist.specs.errors import SpecError

    try:
        from airflow.sdk import TaskGroup
    except ImportError:  # Airflow 2
        from airflow.utils.task_group import TaskGroup  # type: ignore[no-redef]
    if not stages:
        raise SpecError("stages", "is empty.", "give at least one {'batch_size': ..., 'epochs': ...}.")
    total = 0
    previous = None
    with TaskGroup(group_id=group_id) as group:
        for i, stage in enumerate(stages, 1):
            stage = dict(stage)
            if "batch_size" not in stage or "epochs" not in stage:
                raise SpecError(f"stages[{i - 1}]", "needs batch_size and epochs.",
                                "give {'batch_size': 64, 'epochs': 2}.")
            batch, epochs = stage.pop("batch_size"), stage.pop("epochs")
            total += int(epochs)
            hps = {**(hyperparameters or {}), batch_size_hyperparameter: batch, epochs_hyperparameter: total}
            scaling = {**lr_scaling, "per_device_batch_size": batch}
            op = SageMakerDistributedTrainingOperator(
                task_id=f"stage_{i}_batch_{batch}", hyperparameters=hps, lr_scaling=scaling,
                checkpoint_s3_uri=checkpoint_s3_uri, **{**common, **stage})
            if previous is not None:
                previous >> op
            previous = op
    return group


class SageMakerTrainingChainOperator(SageMakerDistributedTrainingOperator):
    """Train past one job's maximum runtime: links of jobs, each with ``max_run`` and the same
    ``checkpoint_s3_uri``, until the script writes ``finished_marker`` into its checkpoint directory
    (synced to ``<checkpoint_s3_uri>/<finished_marker>``) or reports ``finished_metric`` >= 1, or raises
    after ``max_links`` links. A link that hits its runtime limit (Stopped / MaxRuntimeExceeded) is a link
    that did its share; any other failure fails the task. Links are named ``<stable name>-l<N>``, so a
    retry reattaches to the running link. Deferrable: the task defers once per link."""

    template_fields: Sequence[str] = (*SageMakerDistributedTrainingOperator.template_fields, "finished_marker")
    #: training builder arguments (set by SageMakerDistributedTrainingOperator, one attribute each)
    checkpoint_s3_uri: Any
    max_run: Any

    def __init__(self, *, max_links: int = 10, finished_marker: str = "FINISHED", finished_metric: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not kwargs.get("checkpoint_s3_uri"):
            from airflow_smdist.specs.errors import SpecError

            raise SpecError("checkpoint_s3_uri", "is required: each link resumes from the previous link's checkpoint.",
                            "pass checkpoint_s3_uri='s3://bucket/checkpoints/<run>'.")
        self.max_links = int(max_links)
        if self.max_links < 1:
            from airflow_smdist.specs.errors import SpecError

            raise SpecError("max_links", f"{max_links!r}: a chain needs at least one link.",
                            "give max_links >= 1 (each link is one job of at most max_run seconds).")
        self.name_reserve = len(f"-l{self.max_links}-r30")  # links and their attempts
        self.finished_marker = finished_marker
        self.finished_metric = finished_metric

    def finished(self, last: dict[str, Any] | None) -> bool:
        from airflow_smdist.storage import Storage

        if self.finished_metric and last and last.get("final_metrics", {}).get(self.finished_metric, 0) >= 1:
            return True
        storage = Storage.for_backend(self.get_backend())
        return storage.exists(f"{str(self.checkpoint_s3_uri).rstrip('/')}/{self.finished_marker}")

    def link_base(self, context: Any, link: int) -> str:
        ti = context["ti"]
        base = self.job_name or stable_job_name(self.name_prefix, ti.dag_id, ti.task_id, context["run_id"],
                                                getattr(ti, "map_index", -1), limit=NAME_LIMIT - 4)
        return f"{base}-l{link}"

    def execute(self, context: Any) -> dict[str, Any]:
        self.store_no_links(context)
        self.mask_secrets()
        links = self.ended_links(context)  # a retry goes on after the links its earlier tries ran
        return self.run_links(context, len(links) + 1, links)

    def ended_links(self, context: Any) -> list[dict[str, Any]]:
        """The links earlier tries of this task instance ran to their end (Completed, or stopped at their
        runtime limit), in order, up to the first that is missing, still running or failed: without them a
        retry after the chain finished would find the finished marker and return no link at all."""
        from airflow_smdist.backends.base import JobNotFound
        from airflow_smdist.kinds import MAX_ATTEMPT_NAMES

        self.own(context)
        lifecycle = self.lifecycle
        links: list[dict[str, Any]] = []
        for link in range(1, self.max_links + 1):
            base, last = self.link_base(context, link), None
            for attempt in range(1, MAX_ATTEMPT_NAMES + 1):  # a link's names: base, base-r2, ... (lifecycle.choose)
                try:
                    last = lifecycle.describe(base if attempt == 1 else f"{base}-r{attempt}")
                except JobNotFound:
                    break
            ended = last is not None and (last["TrainingJobStatus"] == "Completed" or (
                last["TrainingJobStatus"] == "Stopped" and last.get("SecondaryStatus") == "MaxRuntimeExceeded"))
            if not ended:
                return links
            assert last is not None  # ended
            lifecycle.accept_reattach(last["TrainingJobName"], last)  # this task instance's own links only
            links.append(self.link_result(last))
        return links

    def run_links(self, context: Any, start: int, links: list[dict[str, Any]]) -> dict[str, Any]:
        require_role(self, self.get_backend().name)
        for link in range(start, self.max_links + 1):
            if self.finished(links[-1] if links else None):
                break
            name = self.start_job(context, self.link_base(context, link))
            self.persist_links(context, name)  # the links (and their XComs) follow the running link
            self.log.info("Chain link %d/%d: %s.", link, self.max_links, name)
            description = self.wait_or_defer(name, method_name="link_complete", kwargs={"link": link, "links": links})
            links.append(self.link_result(description))
        finished = self.finished(links[-1] if links else None)
        if not finished:
            raise AirflowException(f"training not finished after {self.max_links} links of at most "
                                   f"{self.max_run} s each (no {self.finished_marker} under {self.checkpoint_s3_uri})")
        result = dict(links[-1]) if links else {}
        result.update(links=[{k: r[k] for k in ("job_name", "status", "secondary_status", "model_artifacts")}
                             for r in links], finished=True)
        return result

    def link_complete(self, context: Any, event: dict[str, Any], link: int,
                      links: list[dict[str, Any]]) -> dict[str, Any]:
        self.mask_secrets()
        description = self.describe_after_trigger(event)
        links = list(links) + [self.link_result(description)]
        return self.run_links(context, link + 1, links)

    def link_result(self, description: dict[str, Any]) -> dict[str, Any]:
        status, secondary = description["TrainingJobStatus"], description.get("SecondaryStatus")
        if status == "Stopped" and secondary == "MaxRuntimeExceeded":
            self.log.info("Link %s reached its MaxRuntimeInSeconds; the next link resumes from the checkpoint.",
                          description["TrainingJobName"])
            return self.result(description)
        return self.check_and_result(description)
