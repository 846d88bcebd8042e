"""SageMakerDistributedTrainingOperator: a distributed training job in a few lines of a DAG."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Sequence

from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS, mask_hyperparameter
from airflow_smdist.operators._arguments import take_arguments, with_arguments
from airflow_smdist.operators.base import SmdistJobOperator, isoformat, require_role
from airflow_smdist.operators.links import LocalJobPageLink, SageMakerTrainingJobLink, SageMakerTrainingLogsLink
from airflow_smdist.specs.arguments import TRAINING, Argument

if TYPE_CHECKING:  # imported where a job is built, not where a DAG file is parsed
    from airflow_smdist.backends.base import Backend
    from airflow_smdist.specs.training import TrainingPlan
    from airflow_smdist.specs.tuning import TuningPlan

#: The builder's arguments (:func:`airflow_smdist.specs.training.training_fields`), in section order.
TRAINING_ARGS: tuple[str, ...] = tuple(a.name for a in TRAINING)

#: The operator's defaults where they differ from the builder's: no role (the local backend uses a stand-in;
#: the sagemaker backend requires one, see operators.base.require_role).
OPERATOR_DEFAULTS: dict[str, Any] = {"role": None}

#: What an operator of training jobs takes besides the builder's arguments (see :class:`TrainingSpecOperator`).
SPEC_OPERATOR_ARGS: tuple[Argument, ...] = (
    Argument("secret_hyperparameters", None, "list[str] | None"),
    Argument("include_runtime", False, "bool"),
)
#: Every argument of :class:`TrainingSpecOperator`: its own, then the builder's.
TRAINING_OPERATOR_ARGS: tuple[Argument, ...] = (*SPEC_OPERATOR_ARGS, *TRAINING)


class TrainingSpecOperator(SmdistJobOperator):
    """Base of the operators whose jobs are built from a training job's arguments (the builder's,
    :data:`TRAINING_ARGS`, one attribute and template field each, and :data:`SPEC_OPERATOR_ARGS`): the training
    operator, and the tuning operator (its trials are training jobs). It holds the arguments, keeps the secret
    hyperparameters out of logs, rendered fields and XCom, builds the request (:meth:`build_plan`) with the
    builder's advice in the task log, and uploads the source directory the request names.

    ``role``: the IAM role SageMaker runs the job as; required on the sagemaker backend (the local backend
    needs none)."""

    trigger_class = "airflow_smdist.triggers.training.SageMakerDistributedTrainingTrigger"
    template_fields_renderers = {"hyperparameters": "json", "distribution": "json", "inputs": "json",
                                 "environment": "json", "lr_scaling": "json", "metric_definitions": "json"}
    # the types of the builder's arguments this class reads (set from TRAINING in __init__; the annotations are
    # the table's, as tests/unit/test_tuning_operator_args.py checks)
    hyperparameters: dict[str, Any] | None
    source_dir: str | None
    distribution: dict[str, Any] | None
    distributed: Any
    lr_scaling: dict[str, Any] | None

    @with_arguments(TRAINING_OPERATOR_ARGS, OPERATOR_DEFAULTS)
    def __init__(self, **kwargs: Any) -> None:
        own = take_arguments(kwargs, SPEC_OPERATOR_ARGS)
        arguments = take_arguments(kwargs, TRAINING, OPERATOR_DEFAULTS)
        super().__init__(**kwargs)
        self.include_runtime = own["include_runtime"]
        self.secret_hyperparameters = list(own["secret_hyperparameters"] or [])
        for name, value in arguments.items():  # the training arguments (TRAINING_ARGS), one attribute each
            setattr(self, name, value)
        self.distributed = _distributed_dict(self.distributed)
        #: the values of ``secret_hyperparameters``, kept out of the ``hyperparameters`` template field once
        #: rendered (see :meth:`hide_secrets`)
        self._secret_values: dict[str, Any] = {}
        self.check_secret_names()

    def training_arguments(self) -> dict[str, Any]:
        """The builder's training arguments (:data:`TRAINING_ARGS`) as this task renders them, the secret
        hyperparameters' values included."""
        out = {name: getattr(self, name) for name in TRAINING_ARGS}
        if self._secret_values and isinstance(out["hyperparameters"], dict):
            out["hyperparameters"] = {**out["hyperparameters"], **self._secret_values}
        return out

    def build_plan(self, job_name: str, local_uris: bool) -> TrainingPlan | TuningPlan:
        """The builder's plan of this task's job (its ``request``, and the source to upload)."""
        raise NotImplementedError

    def plan(self, job_name: str, backend_name: str) -> TrainingPlan | TuningPlan:
        require_role(self, backend_name)  # before anything is built or uploaded
        from airflow_smdist.backends.base import capabilities

        local_uris = capabilities(backend_name).local_uris

        # Airflow 3 task logs take every logger's records; Airflow 2 only "airflow.task"'s, so forward there
        spec_log = logging.getLogger("airflow_smdist.specs")
        handler = None if AIRFLOW_V_3_0_PLUS else _ForwardTo(self.log)
        if handler:
            spec_log.addHandler(handler)
        try:
            return self.tag_secret_names(self.build_plan(job_name, local_uris))
        finally:
            if handler:
                spec_log.removeHandler(handler)

    def tag_secret_names(self, plan: TrainingPlan | TuningPlan) -> TrainingPlan | TuningPlan:
        """The job records which hyperparameters its task declared secret (names only, in a tag), so that the
        job page and ``smdist jobs describe``/``logs`` mask their values whatever the names look like."""
        from airflow_smdist.wire import secret_hyperparameters_tag

        tag = secret_hyperparameters_tag(self.secret_hyperparameters)
        if tag:
            kept = [t for t in plan.request.get("Tags") or [] if t.get("Key") != tag["Key"]]
            plan.request["Tags"] = [*kept, tag]
        return plan

    def check_secret_names(self) -> None:
        """Every name in ``secret_hyperparameters`` must be a hyperparameter: a typo would leave the secret
        unmasked. Checked at construction when the hyperparameters are a dict, and again once rendered."""
        hps = self.hyperparameters
        if not self.secret_hyperparameters or hps is None or not isinstance(hps, dict):
            return
        unknown = [n for n in self.secret_hyperparameters if n not in hps]
        if unknown:
            from airflow_smdist.specs.errors import SpecError

            raise SpecError("secret_hyperparameters", f"{unknown} {'is' if len(unknown) == 1 else 'are'} not among "
                            f"the hyperparameters ({sorted(hps)}), so nothing would be masked.",
                            "name hyperparameters exactly as in hyperparameters=.")

    def mask_secrets(self) -> None:
        """Values of ``secret_hyperparameters`` never reach task logs, rendered fields (masked) or XCom
        (replaced by ***). SageMaker itself stores hyperparameters in the job's description: prefer passing
        secrets through Secrets Manager and an environment variable naming the secret."""
        self.check_secret_names()
        for name in self.secret_hyperparameters:
            value = (self.hyperparameters or {}).get(name) if isinstance(self.hyperparameters, dict) else None
            mask_hyperparameter(self._secret_values.get(name, value))

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Mask the secrets as soon as their values are known, and take them out of the rendered field: the
        task runner sends the rendered fields (the UI's Rendered Template) right after this, before
        execute()."""
        super().render_template_fields(context, jinja_env)
        self.mask_secrets()
        self.hide_secrets()

    def hide_secrets(self) -> None:
        """Move the secret hyperparameters' values out of the ``hyperparameters`` template field (they stay
        in ``_secret_values`` for the request, :meth:`training_arguments`), leaving ``***`` there. Masking
        alone is not enough: Airflow 3.0's task runner sends the rendered fields without redacting them
        (it redacts only a field it truncates), and the api-server does not know the worker's secrets."""
        hps = self.hyperparameters
        if not self.secret_hyperparameters or not isinstance(hps, dict):
            return
        hidden = {n: hps[n] for n in self.secret_hyperparameters if n in hps and hps[n] != "***"}
        if hidden:
            self._secret_values.update(hidden)
            self.hyperparameters = {**hps, **dict.fromkeys(hidden, "***")}

    def make_trigger(self, backend: Backend, name: str, description: dict[str, Any] | None = None,
                     as_of: float | None = None) -> Any:
        trigger = super().make_trigger(backend, name, description, as_of)
        trigger.secret_hyperparameters = list(self.secret_hyperparameters)  # names only: it masks the values
        return trigger

    def execute(self, context: Any) -> dict[str, Any]:
        self.mask_secrets()
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        self.mask_secrets()
        self.preload_insight()  # while the job is described once more
        return super().execute_complete(context, event)

    def wait_or_defer(self, name: str, method_name: str = "execute_complete",
                      kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        if not self.deferrable:  # a deferring task ends here: it draws nothing
            self.preload_insight()  # while the task waits for the job
        return super().wait_or_defer(name, method_name, kwargs)

    def draws_after_job(self) -> bool:
        """Whether the task draws a PNG with matplotlib once its job has ended."""
        return False

    def preload_insight(self) -> None:
        """matplotlib is imported in the background while the task waits (see
        :func:`airflow_smdist.insight.preload_plotting`), so the drawing after the job only draws."""
        if self.draws_after_job():
            from airflow_smdist.insight import preload_plotting

            preload_plotting()

    def build_request(self, job_name: str, backend_name: str, context: Any) -> dict[str, Any]:
        plan = self.plan(job_name, backend_name)
        if plan.source_dir:
            self.check_before_upload(plan.request)
            from airflow_smdist.sourcedir import upload_source
            from airflow_smdist.storage import Storage

            assert plan.source_uri is not None  # the builder names the upload of every source_dir it packs
            storage = Storage.for_backend(self.get_backend())
            upload_source(plan.source_dir, plan.entry_point if self.source_dir else None, plan.source_uri, storage,
                          include_runtime=self.include_runtime)
            self.log.info("Uploaded %s as %s", plan.source_dir, plan.source_uri)
        return plan.request


class SageMakerDistributedTrainingOperator(TrainingSpecOperator):
    """Run a SageMaker training job, distributed the way the SageMaker SDK distributes it.

    The arguments are the SDK estimator's, one per field of the spec sections of
    :mod:`airflow_smdist.specs.training` (see :func:`~airflow_smdist.specs.training.build_training`), all
    templated:
    ``entry_point`` + ``source_dir`` with ``framework``/``framework_version``/``py_version`` (script mode
    in a Deep Learning Container), or ``algorithm=`` (a built-in algorithm) or ``image_uri=``;
    ``instance_type`` x ``instance_count``; ``distribution`` ({"torch_distributed": {"enabled": True}},
    {"mpi": {...}}, {"smdistributed": {...}}, ...); ``inputs`` channels (FullyReplicated / ShardedByS3Key);
    ``checkpoint_s3_uri``; ``lr_scaling`` for the linear scaling rule; ``include_runtime=True`` ships
    :mod:`airflow_smdist.runtime` (stdlib only) inside sourcedir.tar.gz for scripts that import it.

    ``role``: the IAM role SageMaker runs the job as; required on the sagemaker backend (the local backend
    needs none). ``insight=True`` (default) reads the finished job's convergence, utilization and I/O
    (:mod:`airflow_smdist.insight`), failed or not.

    ``backend``: "local" (default; runs here, for real) or "sagemaker"; else the ``smdist`` connection's
    ``backend`` extra, else ``SMDIST_BACKEND``. The job name is stable across tries of one task instance:
    a retry reattaches to the job its earlier try started. Returns (XCom) ``job_name``, ``status``,
    ``model_artifacts``, ``final_metrics`` and a few more small fields.
    """

    kind = "training"
    name_prefix = "smdist"
    template_fields: Sequence[str] = ("job_name", "backend", "deferrable", *TRAINING_ARGS)
    operator_extra_links = (SageMakerTrainingJobLink(), SageMakerTrainingLogsLink(), LocalJobPageLink())

    @with_arguments(TRAINING_OPERATOR_ARGS, OPERATOR_DEFAULTS)
    def __init__(self, *, insight: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.insight = insight

    def build_plan(self, job_name: str, local_uris: bool) -> TrainingPlan:
        from airflow_smdist.specs.training import build_training

        return build_training(job_name=job_name, region=self.hook.region_name, allow_local_uris=local_uris,
                              **self.training_arguments())

    def draws_after_job(self) -> bool:
        """Here: insight.png."""
        return bool(self.insight)

    def result(self, description: dict[str, Any]) -> dict[str, Any]:
        from airflow_smdist.backends.base import TERMINAL_STATES
        from airflow_smdist.specs.distribution import resolve_distribution

        out = training_result(description, self.get_backend().name, lr_scaling=self.lr_scaling,
                              distribution=resolve_distribution(self.distribution, self.distributed))
        for name in self.secret_hyperparameters:
            if name in out["hyperparameters"]:
                out["hyperparameters"][name] = "***"
        if self.insight and out["status"] in TERMINAL_STATES:
            digest = self.job_insight(description, lr_scaled=bool(out.get("lr_scaling") or self.lr_scaling))
            if digest is not None:
                out["insight"] = digest
        return out

    def check_and_result(self, description: dict[str, Any]) -> dict[str, Any]:
        """A job that failed or was stopped gets its insight too (a diverging loss is often why it failed):
        built, logged with its key numbers and URIs (a failed task pushes no XCom: the log is where they are
        read), attached to the error (``insight``), and then the job's own failure is raised as it was."""
        from airflow_smdist.lifecycle import JobFailed

        try:
            return super().check_and_result(description)
        except JobFailed as failure:
            if self.insight and failure.status in ("Failed", "Stopped"):
                digest = self.job_insight(description, lr_scaled=bool(self.lr_scaling))
                if digest is not None:
                    from airflow_smdist.insight import digest_line

                    line = f"Insight of {failure.status.lower()} job {failure.name}: {digest_line(digest)}"
                    self.log.info("%s", line)
                    failure.insight = digest  # type: ignore[attr-defined]
                    failure.add_note(line)
            raise

    def job_insight(self, description: dict[str, Any], *, lr_scaled: bool) -> dict[str, Any] | None:
        """Convergence, per-host utilization and I/O of the finished job (see :mod:`airflow_smdist.insight`),
        logged as one paragraph and stored next to the job's output. Never fails the task."""
        from airflow_smdist.insight import job_insight

        try:
            summary, digest = job_insight(self.get_backend(), description, lr_scaled=lr_scaled)
        except Exception as exc:  # noqa: BLE001 - insight is advice; the job's own result stands
            self.log.warning("No insight for job %s: %s", description.get("TrainingJobName"), exc)
            return None
        self.log.info("Insight: %s", summary["reading"])
        self.log.info("Insight summary %s, plot %s", digest["summary_uri"], digest["plot_uri"])
        return digest


def training_result(description: dict[str, Any], backend: Any, *, lr_scaling: dict[str, Any] | None = None,
                    distribution: dict[str, Any] | None = None) -> dict[str, Any]:
    """The small, JSON-safe XCom result of a training job (the full description stays on the backend).

    Everything comes from the job's description, so the result is the same in whichever process builds it:
    the try that submitted the job, a retry that reattached, or ``execute_complete`` after a deferral.
    ``backend`` is a Backend or its name."""
    backend_name = backend if isinstance(backend, str) else backend.name
    from airflow_smdist.wire import decode_hyperparameters, split_hyperparameters

    all_hps = decode_hyperparameters(description.get("HyperParameters", {}))
    user_hps, _fixed, _extra = split_hyperparameters(all_hps)
    resources = description.get("ResourceConfig", {})
    out = {
        "job_name": description["TrainingJobName"],
        "job_arn": description.get("TrainingJobArn"),
        "status": description["TrainingJobStatus"],
        "secondary_status": description.get("SecondaryStatus"),
        "backend": backend_name,
        "model_artifacts": (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts"),
        "final_metrics": {m["MetricName"]: m["Value"] for m in description.get("FinalMetricDataList", [])},
        "hyperparameters": user_hps,
        "instance_type": resources.get("InstanceType"),
        "instance_count": resources.get("InstanceCount"),
        "instance_groups": [{"name": g["InstanceGroupName"], "instance_type": g["InstanceType"],
                             "instance_count": g["InstanceCount"]} for g in resources.get("InstanceGroups", [])],
        "training_time_seconds": description.get("TrainingTimeInSeconds"),
        "billable_time_seconds": description.get("BillableTimeInSeconds"),
        "start_time": isoformat(description.get("TrainingStartTime")),
        "end_time": isoformat(description.get("TrainingEndTime")),
    }
    if description.get("EnableManagedSpotTraining"):  # SageMaker's spot interruptions (or the local rehearsal's)
        out["interruptions"] = sum(t.get("Status") == "Interrupted"
                                   for t in description.get("SecondaryStatusTransitions") or [])
    if description.get("FailureReason"):
        out["failure_reason"] = description["FailureReason"]
    if lr_scaling:
        out["lr_scaling"] = lr_scaling_of_job(description, all_hps, lr_scaling, distribution)
    return out


def lr_scaling_of_job(description: dict[str, Any], hyperparameters: dict[str, Any], lr_scaling: dict[str, Any],
                      distribution: dict[str, Any] | None) -> dict[str, Any]:
    """What the linear scaling rule gave the job: the learning rate and warm-up it was started with (its
    hyperparameters, named as ``lr_scaling`` names them), and the world size and global batch of its
    resources (the same arithmetic as :func:`airflow_smdist.specs.training.build_training`)."""
    from airflow_smdist.specs import best_practices
    from airflow_smdist.specs.training import _as_int

    from airflow_smdist.wire import host_count

    resources = description.get("ResourceConfig", {})
    groups = resources.get("InstanceGroups") or []
    instance_type = groups[0]["InstanceType"] if groups else resources.get("InstanceType")
    world = best_practices.world_size(instance_type, host_count(resources), distribution)
    per_device = _as_int(lr_scaling.get("per_device_batch_size"), "lr_scaling.per_device_batch_size")
    return {"global_batch_size": per_device * world,
            "learning_rate": hyperparameters.get(lr_scaling.get("hyperparameter", "learning_rate")),
            "warmup_epochs": hyperparameters.get(lr_scaling.get("warmup_hyperparameter", "warmup_epochs")),
            "world_size": world}


def _distributed_dict(distributed: Any) -> Any:
    """An SDK v3 ``Torchrun``/``MPI``/``SMP`` object becomes its dict form (``{"torchrun": {...}}``) here, so
    the operator holds plain data (templated, serialized with the DAG) and never imports the SDK."""
    if distributed is None or isinstance(distributed, (dict, str)):  # the usual case: nothing to import
        return distributed
    from airflow_smdist.specs.distribution import V3_CONFIGS

    kind = type(distributed).__name__.lower()
    if kind in V3_CONFIGS and hasattr(distributed, "model_dump"):
        return {kind: distributed.model_dump(exclude_none=True)}
    return distributed


class _ForwardTo(logging.Handler):
    """Send the request builder's advice (best-practice warnings) to the task log."""

    def __init__(self, target: Any) -> None:  # the task's logger (Airflow 2: a logging.Logger)
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        self.target.log(record.levelno, "%s", record.getMessage())
