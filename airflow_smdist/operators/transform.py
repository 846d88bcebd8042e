"""SageMakerShardedBatchInferenceOperator: batch inference over a prefix of objects, spread three ways, none lost.

``fan_out`` picks the way; every other argument stays the same:

* ``"transform"``: one Batch Transform job (CreateTransformJob) with ``instance_count`` instances; SageMaker
  maps whole objects to instances.
* ``"processing"``: one processing job whose data input is ``ShardedByS3Key`` (each of ``instance_count``
  instances gets about 1/n of the objects) running the model's inference code over its shard with the
  batch runner, in the model's own image.
* ``"jobs"``: ``shards`` separate transform jobs over a split of the prefix planned by object size; each
  shard job is retried on its own (``shard_retries``). As a DAG shape, :func:`sharded_batch_inference` makes
  the TaskGroup :class:`SageMakerBatchShardPlanOperator` -> this operator ``.partial(fan_out="jobs",
  ...).expand(shard=plan.output)`` -> :class:`SageMakerBatchInferenceMergeOperator`, so Airflow retries,
  defers and shows each shard's task.

Whatever the way, the outputs are ``<output_uri>/<key below input_uri>.out`` (byte-identical across ways:
the local backend and the processing runner run one engine). Before a job, a completeness check lists
every input object; only objects without a complete, current output (missing, a record count that does not
match where records are countable, or stale: made by another model or from an input that changed since, as
the last manifest records) are processed, through a ManifestFile naming just them, so a re-run
processes only what is missing. After it, the check runs again: the task fails naming every object still
incomplete, and ``<output_uri>/_smdist/manifest.json`` maps inputs to outputs (returned via XCom, with the
jobs that ran).

The model: ``model_data`` (a model.tar.gz, e.g. ``train.output['model_artifacts']``) + ``image_uri`` or
``framework``/``framework_version`` creates it (CreateModel; reused on retries; the inference code is
``code/inference.py`` inside the archive, or ``entry_point`` + ``source_dir`` uploaded beside the outputs),
or ``model_name`` alone names an existing model.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import TYPE_CHECKING, Any, Sequence, cast

from airflow_smdist._compat import AirflowException, BaseOperator
from airflow_smdist.operators._arguments import take_arguments, with_arguments
from airflow_smdist.operators.base import (
    LOCAL_ROLE,
    NAME_LIMIT,
    SmdistJobOperator,
    isoformat,
    require_role,
    stable_job_name,
)
from airflow_smdist.operators.links import (
    BASE_AWS_CONSOLE_LINK,
    LocalJobPageLink,
    SmdistConsoleLink,
    persist_console_links,
)
from airflow_smdist.specs.arguments import Argument, arguments_of

if TYPE_CHECKING:  # imported where a job runs, not where a DAG file is parsed
    from typing import TypeAlias

    from airflow_smdist.backends.base import Backend
    from airflow_smdist.hooks.smdist import SmdistHook
    from airflow_smdist.kinds import JobKind
    from airflow_smdist.specs.sharding import InputObject
    from airflow_smdist.specs.transform import ModelPlan, TransformSettings
    from airflow_smdist.storage import Storage

    #: a model as :func:`plan_model` plans it: (name, the existing model's description or None, its CreateModel
    #: plan or None)
    PlannedModel: TypeAlias = tuple[str, dict[str, Any] | None, ModelPlan | None]

FAN_OUTS = ("transform", "processing", "jobs")
MAX_GENERATIONS = 99
#: room kept in generated job names for "-gNN" (re-run generations), "-sNNN" (shards) and "-rNN" (attempts)
NAME_RESERVE = 9

class RecordSettings:
    """The settings that shape records, shared by the operator, the planner and the merge step, all templated;
    None is the SageMaker SDK's default (see :meth:`settings`). Declared once here: the operators inherit the
    attributes (typed), and their signatures and template fields come from :data:`RECORD_SETTINGS`."""

    content_type: str | None = None
    accept: str | None = None
    split_type: str | None = None
    compression: str | None = None
    batch_strategy: str | None = None
    max_payload_mb: int | str | None = None
    max_concurrent_transforms: int | str | None = None
    assemble_with: str | None = None
    input_filter: str | None = None
    join_source: str | None = None
    output_filter: str | None = None
    invocations_timeout: int | str | None = None
    invocations_max_retries: int | str | None = None

    def settings(self) -> dict[str, Any]:
        """The record settings as given, else the SDK's defaults (None: whole objects, no batch strategy, no
        assembly); only with ``split_type="Line"`` do ``batch_strategy`` and ``assemble_with`` default to
        MultiRecord and Line (one output line per input line, so record counts can be checked)."""
        values = _record_settings(self)
        if values.get("split_type") == "Line":
            values.setdefault("batch_strategy", "MultiRecord")
            values.setdefault("assemble_with", "Line")
        return values


RECORD_SETTINGS: tuple[Argument, ...] = arguments_of(RecordSettings)
RECORD_ARGS: tuple[str, ...] = tuple(a.name for a in RECORD_SETTINGS)


class BatchArguments:
    """The batch inference operator's arguments besides the record settings, templated (in template-field
    order); declared once here, as :class:`RecordSettings`."""

    input_uri: str
    output_uri: str
    fan_out: str = "transform"
    model_name: str | None = None
    model_data: str | None = None
    image_uri: str | None = None
    framework: str | None = None
    framework_version: str | None = None
    py_version: str | None = None
    entry_point: str | None = None
    source_dir: str | None = None
    model_environment: dict[str, str] | None = None
    role: str | None = None
    instance_type: str = "ml.m5.xlarge"
    instance_count: int | str = 1
    shards: int | str = 2
    shard: dict[str, Any] | None = None
    environment: dict[str, str] | None = None
    s3_data_type: str = "S3Prefix"
    tags: dict[str, str] | list[dict[str, str]] | None = None


class BatchOptions:
    """... and those that are not templated."""

    program: str = "inference.py"
    shard_retries: int = 2
    check_records: bool | None = None
    max_runtime: int | str = 86400


BATCH_ARGS: tuple[Argument, ...] = arguments_of(BatchArguments)
BATCH_OPTIONS: tuple[Argument, ...] = arguments_of(BatchOptions)
#: Every argument of :class:`SageMakerShardedBatchInferenceOperator` (besides SmdistJobOperator's), one attribute
#: each.
BATCH_OPERATOR_ARGS: tuple[Argument, ...] = (*BATCH_ARGS, *RECORD_SETTINGS, *BATCH_OPTIONS)

class SageMakerBatchInferenceJobLink(SmdistConsoleLink):
    name = "SageMaker batch inference job"
    key = "smdist_batch_inference_job"
    format_str = BASE_AWS_CONSOLE_LINK + "/sagemaker/home?region={region_name}#/{jobs_path}/{job_name}"


# -- models on either backend --------------------------------------------------------------------------------
def create_model(backend: Backend, request: dict[str, Any]) -> str:
    """CreateModel on ``backend`` (local: its models store; sagemaker: the API). Returns the model ARN.
    Raises ResourceExists when a model of that name exists."""
    return backend.create_model(request)


def describe_model(backend: Backend, name: str) -> dict[str, Any] | None:
    """DescribeModel on ``backend``; None when there is no such model."""
    from airflow_smdist.backends.base import ModelNotFound

    try:
        return backend.describe_model(name)
    except ModelNotFound:
        return None


#: the arguments of :class:`SageMakerShardedBatchInferenceOperator` that make its model (the planner and
#: the merge step of :func:`sharded_batch_inference` take them as ``model=`` to know which model must have
#: made the outputs)
MODEL_ARGS = ("model_name", "model_data", "role", "image_uri", "framework", "framework_version", "py_version",
              "instance_type", "entry_point", "source_dir", "program", "model_environment", "tags")


def plan_model(backend: Backend, name: str, args: dict[str, Any], *, output_uri: str, region: str | None,
               existing: bool = True) -> PlannedModel:
    """(name, the existing model's description or None, a CreateModel plan or None) for the model ``args``
    (:data:`MODEL_ARGS`) describe: built and validated, nothing created. ``existing=False`` skips looking
    the model up (a name the caller only made up)."""
    found = describe_model(backend, name) if existing else None
    if not args.get("model_data"):
        if found is None:
            raise AirflowException(f"model {name!r} does not exist on the {backend.name} backend; give "
                                   "model_data (and image_uri or framework) to create it.")
        return name, found, None
    from airflow_smdist.specs import sharding
    from airflow_smdist.specs.transform import build_model

    plan = build_model(model_name=name, model_data=args["model_data"], role=cast(str, args.get("role")),
                       image_uri=args.get("image_uri"), framework=args.get("framework"),
                       framework_version=args.get("framework_version"), py_version=args.get("py_version"),
                       instance_type=args.get("instance_type") or "ml.m5.xlarge",
                       entry_point=args.get("entry_point"), source_dir=args.get("source_dir"),
                       code_location=sharding.work_uri(output_uri, "code"),
                       program=args.get("program") or "inference.py",
                       environment=args.get("model_environment"), region=region,
                       tags=args.get("tags"),  # the SDK tags the model it creates for the transform job too
                       allow_local_uris=backend.capabilities.local_uris)
    return name, found, plan


def _record_settings(op: RecordSettings) -> dict[str, Any]:
    return {k: getattr(op, k) for k in RECORD_ARGS if getattr(op, k, None) is not None}


def _checked_settings(values: dict[str, Any]) -> TransformSettings:
    from airflow_smdist.specs.transform import check_settings

    return check_settings(**{k: values.get(k) for k in RECORD_ARGS})


class SageMakerShardedBatchInferenceOperator(BatchArguments, RecordSettings, BatchOptions, SmdistJobOperator):
    """Score every object under ``input_uri`` into ``output_uri/<key>.out``, completely.

    :param fan_out: ``transform`` (one Batch Transform job over ``instance_count`` instances), ``processing``
        (one ShardedByS3Key processing job over ``instance_count`` instances) or ``jobs`` (``shards`` transform
        jobs, each of ``instance_count`` instances, over a size-balanced split; or the one shard given by
        ``shard`` when mapped over :class:`SageMakerBatchShardPlanOperator`'s output).
    :param model_data: model.tar.gz to create the model from (with ``image_uri`` or ``framework`` +
        ``framework_version``); or give ``model_name`` of an existing model.
    :param split_type: None (default, whole objects, as the SDK's ``Transformer.transform``) | Line | RecordIO |
        TFRecord; ``batch_strategy`` SingleRecord | MultiRecord (default with Line), ``max_payload_mb``,
        ``max_concurrent_transforms``, ``assemble_with`` (default Line with Line: one output line per input
        line, so record counts can be checked; the one deliberate difference from the SDK's defaults),
        ``content_type`` / ``accept`` (default None, as the SDK's), ``input_filter`` / ``join_source`` /
        ``output_filter`` (DataProcessing), ``invocations_timeout`` / ``invocations_max_retries``.
    :param check_records: compare record counts (None: wherever the settings make records countable).

    Returns (XCom) the manifest summary: ``manifest_uri``, ``complete``, ``objects``, ``records``,
    ``processed`` (objects this run processed), ``jobs``, ``pending`` and ``outputs`` (input -> output).
    """

    kind = "transform"
    name_prefix = "smdist-batch"
    template_fields: Sequence[str] = ("job_name", "backend", "deferrable", *(a.name for a in BATCH_ARGS),
                                      *RECORD_ARGS)
    template_fields_renderers = {"environment": "json", "model_environment": "json", "shard": "json"}
    operator_extra_links = (SageMakerBatchInferenceJobLink(), LocalJobPageLink())
    name_reserve = NAME_RESERVE

    @with_arguments(BATCH_OPERATOR_ARGS)
    def __init__(self, **kwargs: Any) -> None:
        arguments = take_arguments(kwargs, BATCH_OPERATOR_ARGS)
        super().__init__(**kwargs)
        for name, value in arguments.items():  # BATCH_OPERATOR_ARGS, one attribute each
            setattr(self, name, value)
        self._model: dict[str, Any] | None = None
        #: the fingerprint of the model this run uses, and what the last manifest recorded of each output
        self._fingerprint: str | None = None
        self._previous: dict[str, dict[str, str]] = {}
        if self.fan_out == "processing":
            self.kind = "processing"

    # -- arguments ---------------------------------------------------------------------------------
    def base_job_name(self, context: Any) -> str:
        if self.job_name:
            return str(self.job_name)
        ti = context["ti"]
        return stable_job_name(self.name_prefix, ti.dag_id, ti.task_id, context["run_id"],
                               getattr(ti, "map_index", -1), limit=NAME_LIMIT - NAME_RESERVE)

    def model_name_for(self, context: Any) -> str:
        if self.model_name:
            return str(self.model_name)
        ti = context["ti"]  # one model for every shard of a mapped task
        return stable_job_name("smdist-model", ti.dag_id, ti.task_id, context["run_id"], -1)

    def _check_arguments(self) -> None:
        from airflow_smdist.specs.errors import SpecError

        if self.fan_out not in FAN_OUTS:
            raise SpecError("fan_out", f"{self.fan_out!r} is not a way to fan out.", f"use one of {FAN_OUTS}.")
        if self.shard is not None and self.fan_out != "jobs":
            raise SpecError("shard", "is the one shard of a mapped fan_out='jobs' task.",
                            "use fan_out='jobs' with shard=..., or drop shard.")
        if not self.model_data and not self.model_name:
            raise SpecError("model_data", "no model: give model_data (a model.tar.gz) with image_uri or framework, "
                            "or model_name of an existing model.", "pass model_data=train.output['model_artifacts'].")
        self.kind = "processing" if self.fan_out == "processing" else "transform"

    # -- the model -------------------------------------------------------------------------------------
    def plan_model(self, backend: Backend, context: Any) -> PlannedModel:
        """(name, existing description or None, CreateModel plan or None): the model, built and validated,
        nothing created."""
        return plan_model(backend, self.model_name_for(context), {k: getattr(self, k) for k in MODEL_ARGS},
                          output_uri=self.output_uri, region=self.hook.region_name)

    def check_job_request(self, backend: Backend, storage: Storage, name: str, input_uri: str, data_type: str,
                          planned: PlannedModel) -> None:
        """Build and validate the job's request before anything is created or uploaded (a bad one would
        leave an orphan model), also as the backend that will run it checks it (the local backend's limits)."""
        _, existing, plan = planned
        model = existing if plan is None else plan.request
        backend.check(cast("JobKind", self.kind), self.make_request(backend, storage, name, input_uri, data_type,
                                                                    model=model, upload=False))

    def know_outputs(self, backend: Backend, storage: Storage, context: Any) -> PlannedModel:
        """Plan the model (nothing created) and learn what the outputs were made by: the fingerprint of the
        model this run uses (see :func:`model_fingerprint_of`) and the last manifest's record of each output.
        Returns the model's plan."""
        from airflow_smdist import ledger

        planned = self.plan_model(backend, context)
        self._fingerprint = ledger.model_fingerprint_of(storage, planned)
        self._previous = ledger.read_provenance(storage, self.output_uri)
        return planned

    def ensure_model(self, backend: Backend, context: Any, planned: PlannedModel | None = None) -> dict[str, Any]:
        """The model's description; created from ``model_data`` when it does not exist yet."""
        from airflow_smdist import ledger
        from airflow_smdist.backends.base import ResourceExists

        name, existing, plan = planned or self.plan_model(backend, context)
        if plan is None:
            assert existing is not None  # plan_model plans a model that does not exist, or fails
            return existing
        if existing is None:
            if plan.source_dir:
                assert plan.source_uri is not None  # the builder names the upload of every source_dir it packs
                from airflow_smdist.sourcedir import upload_source

                upload_source(plan.source_dir, plan.entry_point if self.source_dir else None, plan.source_uri,
                              ledger.storage_for(backend))
                self.log.info("Uploaded the inference code %s as %s", plan.source_dir, plan.source_uri)
            try:
                arn = create_model(backend, plan.request)
                self.log.info("Created model %s (%s) from %s", name, arn, self.model_data)
            except ResourceExists:
                pass
            existing = describe_model(backend, name) or plan.request  # a mapped sibling may have made it
        have = existing.get("PrimaryContainer") or {}
        want = plan.request["PrimaryContainer"]
        if (have.get("ModelDataUrl"), have.get("Image")) != (want["ModelDataUrl"], want["Image"]):
            raise AirflowException(f"model {name!r} already exists with another artifact or image "
                                   f"({have.get('ModelDataUrl')}, {have.get('Image')}); SageMaker models cannot "
                                   "change: give a new model_name.")
        return existing

    # -- requests --------------------------------------------------------------------------------------
    def _input_for(self, storage: Storage, name: str, objects: list[InputObject], pending: list[InputObject],
                   manifest: str | None) -> tuple[str, str]:
        """(S3Uri, S3DataType) of the job: the prefix itself when everything is pending, else a ManifestFile
        naming only the pending objects."""
        from airflow_smdist.specs import sharding

        if len(pending) == len(objects):
            if manifest:
                return manifest, "ManifestFile"
            return self.input_uri, self.s3_data_type
        uri = sharding.work_uri(self.output_uri, "inputs", f"{name}.json")
        storage.write_bytes(sharding.dumps(sharding.input_manifest(pending)), uri)
        self.log.info("%d of %d object(s) already have complete outputs; %s processes the other %d (%s).",
                      len(objects) - len(pending), len(objects), name, len(pending), uri)
        return uri, "ManifestFile"

    def make_request(self, backend: Backend, storage: Storage, name: str, input_uri: str, data_type: str, *,
                     model: dict[str, Any] | None = None, upload: bool = True) -> dict[str, Any]:
        """The job's request over ``input_uri`` with ``model`` (default: the model ensured); ``upload=False``
        only builds and validates it (the processing runner is not uploaded)."""
        model = model if model is not None else self._model
        assert model is not None, "the model is planned or ensured before its job's request is made"
        settings = self.settings()
        allow_local = backend.capabilities.local_uris
        if self.fan_out == "processing":
            from airflow_smdist.runtime import batch_runner
            from airflow_smdist.specs import sharding
            from airflow_smdist.specs.transform import RUNNER_NAME, build_processing_inference

            import shutil
            import tempfile

            from airflow_smdist.specs.processing import upload_plan

            with tempfile.TemporaryDirectory(prefix="smdist-runner-") as tmp:
                runner = shutil.copyfile(batch_runner.__file__, f"{tmp}/{RUNNER_NAME}")
                plan = build_processing_inference(
                    job_name=name, role=cast(str, self.role), model=model, input_uri=input_uri,
                    output_uri=self.output_uri, runner=runner, code_location=sharding.work_uri(self.output_uri, "code"),
                    instance_type=self.instance_type, instance_count=self.instance_count, s3_data_type=data_type,
                    settings=_checked_settings(settings), environment=self.environment,
                    max_runtime_in_seconds=self.max_runtime, tags=self.tags, region=self.hook.region_name,
                    allow_local_uris=allow_local)
                if upload:
                    upload_plan(plan, storage)
            request: dict[str, Any] = plan.request
            return request
        from airflow_smdist.specs.transform import build_transform

        return build_transform(job_name=name, model_name=model["ModelName"], input_uri=input_uri,
                               s3_data_type=data_type, output_uri=self.output_uri, instance_type=self.instance_type,
                               instance_count=self.instance_count, environment=self.environment, tags=self.tags,
                               allow_local_uris=allow_local, **settings)

    # -- running ---------------------------------------------------------------------------------------
    def pick_job(self, backend: Backend, base: str) -> tuple[str, str]:
        """The job of this task instance to reattach to (still running) or the free name for a new one.
        A completed job is a finished generation: a re-run that finds objects missing starts the next."""
        for generation in range(1, MAX_GENERATIONS + 1):
            name, action = self.choose_job(backend, base if generation == 1 else f"{base}-g{generation}")
            if action != "reattach-completed":
                return name, action
        raise AirflowException(f"{MAX_GENERATIONS} generations of {base} ran; give a new job_name.")

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_smdist import ledger
        from airflow_smdist.specs import sharding

        self.store_no_links(context)
        self._check_arguments()
        self.own(context)
        sharding.check_prefixes(self.input_uri, self.output_uri)
        _checked_settings(self.settings())
        backend = self.get_backend()
        require_role(self, backend.name)
        storage = ledger.storage_for(backend)
        if self.fan_out == "jobs" and self.shard is None:
            if self.deferrable:
                self.log.info("fan_out='jobs' in one task waits for its shard jobs in the worker; use the "
                              "sharded_batch_inference TaskGroup to defer each shard's wait.")
            return self.run_shards(context, backend, storage)
        manifest = self.shard["manifest_uri"] if self.shard is not None else None
        objects = self._objects(storage)
        if not objects:
            raise AirflowException(f"no input objects under {self.input_uri}")
        planned = self.know_outputs(backend, storage, context)
        name, action = self.pick_job(backend, self.base_job_name(context))
        jobs, processed = [], []
        if action == "reattach-running":
            self.log.info("Reattaching to %s job %s, still running from an earlier try.", self.kind, name)
            processed = self._processed_by(storage, self.lifecycle.describe(name), objects)
            jobs.append(self._finish(backend, name, context, objects=len(processed)))
            jobs[-1]["_objects"] = processed
        else:
            pending = self._pending(storage, objects)
            if pending:
                self.check_job_request(backend, storage, name, manifest or self.input_uri,
                                       "ManifestFile" if manifest else self.s3_data_type, planned)
                self._model = self.ensure_model(backend, context, planned)
                input_uri, data_type = self._input_for(storage, name, objects, pending, manifest)
                request = self.make_request(backend, storage, name, input_uri, data_type)
                ledger.record_job(storage, self.output_uri, name, self._fingerprint, pending)
                self.lifecycle.submit(request)  # the lifecycle tags the job with its owner
                self.log.info("Started %s job %s on the %s backend over %d object(s).", self.kind, name,
                              backend.name, len(pending))
                processed = [o.uri for o in pending]
                jobs.append(self._finish(backend, name, context, objects=len(pending)))
                jobs[-1]["_objects"] = processed
        return self._conclude(storage, objects, jobs, processed, write=self.shard is None)

    def _pending(self, storage: Storage, objects: list[InputObject]) -> list[InputObject]:
        """The objects without a complete, current output (missing, short of records, or stale)."""
        from airflow_smdist import ledger

        before = ledger.completeness(storage, objects, self.output_uri, self.settings(), self.check_records,
                              provenance=self._previous, model=self._fingerprint)
        stale = [e for e in before.pending if e.status == "stale"]
        if stale:
            self.log.info("%d output(s) are stale and run again, e.g. %s: %s", len(stale), stale[0].output,
                          stale[0].stale)
        pending_uris = {e.input for e in before.pending}
        if not pending_uris:
            self.log.info("All %d object(s) already have complete outputs: no job to run.", len(objects))
        return [o for o in objects if o.uri in pending_uris]

    def _finish(self, backend: Backend, name: str, context: Any, objects: int | None = None) -> dict[str, Any]:
        self.lifecycle.track(name)
        self.persist_links(context, name)
        if not self.wait_for_completion:
            return self._job_summary(self.lifecycle.describe(name), objects)
        return self._job_summary(self.wait_or_defer(name), objects)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Back from the trigger: the completeness check and the manifest, as the waiting path ends."""
        from airflow_smdist import ledger

        self._check_arguments()
        backend = self.get_backend()
        storage = ledger.storage_for(backend)
        description = self.describe_after_trigger(event)
        self.know_outputs(backend, storage, context)
        objects = self._objects(storage)
        processed = self._processed_by(storage, description, objects)
        job = self._job_summary(description, len(processed))
        job["_objects"] = processed
        return self._conclude(storage, objects, [job], processed, write=self.shard is None)

    def _objects(self, storage: Storage) -> list[InputObject]:
        from airflow_smdist import ledger

        if self.shard is not None:
            return ledger.list_inputs(storage, self.shard["manifest_uri"], self.output_uri, "ManifestFile")
        return ledger.list_inputs(storage, self.input_uri, self.output_uri, self.s3_data_type)

    def _processed_by(self, storage: Storage, description: dict[str, Any], objects: list[InputObject]) -> list[str]:
        """The input objects a job was given: its ManifestFile's entries, or every object of the prefix."""
        from airflow_smdist import ledger

        src: dict[str, Any]
        if self.kind == "processing":
            src = next((i["S3Input"] for i in description.get("ProcessingInputs") or [] if i["InputName"] == "data"),
                       {})
            uri, data_type = src.get("S3Uri"), src.get("S3DataType")
        else:
            src = description["TransformInput"]["DataSource"]["S3DataSource"]
            uri, data_type = src["S3Uri"], src["S3DataType"]
        if data_type != "ManifestFile" or not uri:
            return [o.uri for o in objects]
        return [o.uri for o in ledger.list_inputs(storage, uri, self.output_uri, "ManifestFile")]

    def _job_summary(self, description: dict[str, Any], objects: int | None = None) -> dict[str, Any]:
        lifecycle = self.lifecycle
        out: dict[str, Any] = {"job_name": lifecycle.info.job_name(description), "kind": self.kind,
               "status": lifecycle.status(description)}
        if objects is not None:
            out["objects"] = objects
        if out["status"] in ("Failed", "Stopped"):
            out["failure_reason"] = lifecycle.failure_reason(description)
        return out

    def _conclude(self, storage: Storage, objects: list[InputObject], jobs: list[dict[str, Any]], processed: list[str],
                  *, write: bool = True) -> dict[str, Any]:
        from airflow_smdist import ledger

        settings = self.settings()
        if not self.wait_for_completion:
            return {"jobs": jobs, "complete": None, "objects": len(objects), "processed": len(processed)}
        job_of, ran = {}, []
        for job in jobs:
            for uri in job.pop("_objects", []):
                job_of[uri] = job["job_name"]
                if job["status"] == "Completed":
                    ran.append(uri)
        made = ledger.made_now(objects, ran, self._fingerprint)  # what this run's completed jobs made
        report = ledger.completeness(storage, objects, self.output_uri, settings, self.check_records,
                              provenance={**self._previous, **made}, model=self._fingerprint)
        for e in report.entries:
            e.job = job_of.get(e.input)
        if write:
            summary = ledger.write_manifest(storage, report, input_uri=self.input_uri, output_uri=self.output_uri,
                                     fan_out=self.fan_out, jobs=jobs, settings=settings, processed=processed)
        else:  # a mapped shard: the merge step writes the manifest of the whole prefix
            from airflow_smdist.specs import sharding

            manifest = sharding.batch_manifest(report, input_uri=self.input_uri, output_path=self.output_uri,
                                               fan_out=self.fan_out, jobs=jobs, settings=settings,
                                               processed=processed)
            summary = sharding.manifest_summary(manifest, None)  # not written (the merge step writes it)
            summary["shard"] = (self.shard or {}).get("index")
            summary["processed_inputs"] = sorted(processed)
            summary["provenance"] = made  # for the merge step's manifest
        failed = [f"{j['kind']} job {j['job_name']} ended {j['status']}: {j.get('failure_reason')}"
                  for j in jobs if j["status"] != "Completed"]
        error = ledger.outcome_error(report, summary, failed, "\n".join(self._last_lines[-10:]))
        if error is not None:
            raise error
        self.log.info("Complete: %s", report.describe())
        return summary

    # -- fan_out="jobs" in one task ----------------------------------------------------------------------
    def run_shards(self, context: Any, backend: Backend, storage: Storage) -> dict[str, Any]:
        """Plan the pending objects over ``shards`` transform jobs, run them at once, retry each failed shard
        on its own up to ``shard_retries`` times, then check completeness. A retry of this task reattaches to
        the shard jobs still running."""
        from airflow_smdist import ledger
        from airflow_smdist.specs import sharding
        from airflow_smdist.specs.training import _as_int as as_int

        objects = ledger.list_inputs(storage, self.input_uri, self.output_uri, self.s3_data_type)
        if not objects:
            raise AirflowException(f"no input objects under {self.input_uri}")
        model_plan = self.know_outputs(backend, storage, context)
        base = self.base_job_name(context)
        plan, base_g = None, None
        for generation in range(1, MAX_GENERATIONS + 1):
            base_g = base if generation == 1 else f"{base}-g{generation}"
            plan_uri = sharding.work_uri(self.output_uri, "plans", f"{base_g}.json")
            if not storage.exists(plan_uri):
                break
            old = json.loads(storage.read_bytes(plan_uri))
            actions = [self.choose_job(backend, f"{base_g}-s{s['index']}")[1] for s in old["shards"]]
            if "reattach-running" in actions:
                plan = old
                self.log.info("Resuming generation %s: shard jobs of an earlier try are still running.", base_g)
                break
        else:
            raise AirflowException(f"{MAX_GENERATIONS} generations of {base} ran; give a new job_name.")
        self.check_job_request(backend, storage, f"{base_g}-s0",
                               sharding.work_uri(self.output_uri, "plans", base_g, "shard-0000.json"), "ManifestFile",
                               model_plan)
        processed: list[str] = []
        if plan is None:
            todo = self._pending(storage, objects)
            if not todo:
                return self._conclude(storage, objects, [], [])
            by_uri = {o.uri: o for o in todo}
            planned = sharding.plan_shards([o.as_stored() for o in todo], as_int(self.shards, "shards"))
            shards = []
            for sh in planned:
                uri = sharding.work_uri(self.output_uri, "plans", base_g, f"shard-{sh.index:04d}.json")
                storage.write_bytes(sharding.dumps(sharding.input_manifest([by_uri[o.uri] for o in sh.objects])), uri)
                shards.append({"index": sh.index, "manifest_uri": uri, "objects": len(sh.objects), "bytes": sh.bytes})
            plan = {"shards": shards, "objects": len(todo)}
            storage.write_bytes(sharding.dumps(plan), sharding.work_uri(self.output_uri, "plans", f"{base_g}.json"))
            self.log.info("Planned %d shard job(s) over %d of %d object(s) (balance max/mean %.3f).", len(shards),
                          len(todo), len(objects), sharding.balance(planned))
            processed = [o.uri for o in todo]
        self._model = self.ensure_model(backend, context, model_plan)
        jobs = self._run_shard_jobs(backend, storage, base_g, plan["shards"], context)
        return self._conclude(storage, objects, jobs, processed)

    def _run_shard_jobs(self, backend: Backend, storage: Storage, base_g: str, shards: list[dict[str, Any]],
                        context: Any) -> list[dict[str, Any]]:
        lifecycle = self.lifecycle
        attempts: dict[int, int] = {}
        done: dict[int, dict[str, Any]] = {}
        shard_of: dict[str, int] = {}

        def start(index: int) -> str | None:
            """The shard's job to watch (None when an earlier try's job already completed it)."""
            shard = shards[index]
            started = lifecycle.choose(f"{base_g}-s{shard['index']}")
            if started.action == "create":
                request = self.make_request(backend, storage, started.name, shard["manifest_uri"], "ManifestFile")
                started = lifecycle.submit_or_join(started.name, request)
            if started.action == "create":
                attempts[index] = attempts.get(index, 0) + 1
                self.log.info("Shard %d: started %s over %d object(s).", shard["index"], started.name,
                              shard["objects"])
            elif started.action == "reattach-completed":
                done[index] = self._job_summary(lifecycle.describe(started.name), shard["objects"])
                return None
            shard_of[started.name] = index
            return started.name

        def ended(name: str, description: dict[str, Any]) -> str | None:
            index = shard_of[name]
            number = shards[index]["index"]
            summary = self._job_summary(description, shards[index]["objects"])
            if summary["status"] == "Completed":
                done[index] = summary
                self.log.info("Shard %d: %s completed.", number, name)
                return None
            if attempts.get(index, 0) <= int(self.shard_retries):
                self.log.warning("Shard %d: %s ended %s (%s); retrying this shard alone.", number, name,
                                 summary["status"], summary["failure_reason"])
                return start(index)
            done[index] = summary
            self.log.error("Shard %d: %s ended %s after %d attempt(s): %s", number, name, summary["status"],
                           attempts.get(index, 0), summary["failure_reason"])
            return None

        watch = [name for name in (start(i) for i in range(len(shards))) if name]
        lifecycle.wait_all(watch, ended)
        out = []
        for i in sorted(done):
            from airflow_smdist.specs import sharding

            prefix, rels = sharding.parse_input_manifest(json.loads(storage.read_bytes(shards[i]["manifest_uri"])))
            base = prefix if prefix.endswith("/") else prefix + "/"
            done[i]["shard"] = shards[i]["index"]
            done[i]["_objects"] = [base + rel for rel in rels]
            out.append(done[i])
        return out

    # -- SmdistJobOperator hooks -------------------------------------------------------------------------
    def result(self, description: dict[str, Any]) -> dict[str, Any]:
        return self._job_summary(description)

    def lineage(self) -> tuple[list[str], list[str]]:
        """The whole input prefix in, the output prefix out, whichever way (and however many jobs) ran."""
        return [str(self.input_uri)], [str(self.output_uri)]

    def persist_links(self, context: Any, job_name: str) -> None:
        persist_console_links(self, context, job_name,
                              jobs_path="processing-jobs" if self.kind == "processing" else "transform-jobs")


def _materialize(values: Any) -> list[Any]:
    """A mapped task's XCom results as a list, read by index up to their count: iterating Airflow's lazy
    XCom sequence reads one past the end to find it, which Airflow 3 logs as an error ("XCom not found")."""
    if values is None:
        return []
    try:
        count = len(values)
    except TypeError:
        return list(values)
    return [values[i] for i in range(count)]


class StepArguments:
    """The arguments of the planner and the merge step besides the record settings (every record setting is
    accepted, so that one dict of them fits every step; those the steps do not read are kept but unused)."""

    input_uri: str
    output_uri: str
    backend: str | None = None
    #: the shard jobs' model (:data:`MODEL_ARGS`): outputs another model made are pending
    model: dict[str, Any] | None = None
    smdist_conn_id: str | None = "smdist_default"
    aws_conn_id: str | None = None
    region_name: str | None = None
    check_records: bool | None = None


STEP_ARGS: tuple[Argument, ...] = arguments_of(StepArguments)
STEP_OPERATOR_ARGS: tuple[Argument, ...] = (*STEP_ARGS, *RECORD_SETTINGS)


class _StepOperator(StepArguments, RecordSettings, BaseOperator):
    """The planner and the merge step: they only read and write storage (on the backend's endpoint)."""

    template_fields: Sequence[str] = ("input_uri", "output_uri", "backend", "model", *RECORD_ARGS)

    @with_arguments(STEP_OPERATOR_ARGS)
    def __init__(self, **kwargs: Any) -> None:
        arguments = take_arguments(kwargs, STEP_OPERATOR_ARGS)
        super().__init__(**kwargs)
        for name, value in arguments.items():  # STEP_OPERATOR_ARGS, one attribute each
            setattr(self, name, value)

    def storage(self) -> Storage:
        from airflow_smdist import ledger

        return ledger.storage_for(self.job_backend)

    @cached_property
    def job_backend(self) -> Backend:
        """The backend the shard jobs run on (after templates are rendered)."""
        return self.hook.get_backend(self.backend)

    @cached_property
    def hook(self) -> SmdistHook:
        from airflow_smdist.hooks.smdist import SmdistHook

        return SmdistHook(self.smdist_conn_id, aws_conn_id=self.aws_conn_id, region_name=self.region_name)

    def fingerprint(self, storage: Storage) -> str | None:
        """The fingerprint of the shard jobs' model (None without ``model``), as the shards compute it."""
        from airflow_smdist import ledger

        if not self.model:
            return None
        from airflow_smdist.specs.errors import SpecError

        if not isinstance(self.model, dict):
            raise SpecError("model", f"{type(self.model).__name__} is not a dict of the shard operator's model "
                            "arguments.", "give model={'model_data': ..., 'image_uri': ...} or leave it out.")
        name = self.model.get("model_name")
        args = {"role": LOCAL_ROLE, **{k: v for k, v in self.model.items() if v is not None}}  # never sent
        planned = plan_model(self.job_backend, str(name or "smdist-model-fingerprint"), args,
                             output_uri=self.output_uri, region=self.hook.region_name, existing=bool(name))
        return ledger.model_fingerprint_of(storage, planned)


class SageMakerBatchShardPlanOperator(_StepOperator):
    """The shard planner of ``fan_out='jobs'`` under dynamic task mapping: lists ``input_uri``, keeps the
    objects without a complete output, balances them by size over ``shards`` shards (a ManifestFile each)
    and returns the shard list for ``.expand(shard=...)`` ([] when nothing is missing)."""

    template_fields: Sequence[str] = (*_StepOperator.template_fields, "shards")
    ui_color = "#d9ead3"

    def __init__(self, *, shards: int | str = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.shards = shards

    def execute(self, context: Any) -> list[dict[str, Any]]:
        from airflow_smdist import ledger
        from airflow_smdist.specs.training import _as_int

        storage = self.storage()
        return ledger.plan_shards_step(storage, input_uri=self.input_uri, output_uri=self.output_uri,
                                shards=_as_int(self.shards, "shards"), settings=self.settings(),
                                check_records=self.check_records, log=self.log, model=self.fingerprint(storage))


class SageMakerBatchInferenceMergeOperator(_StepOperator):
    """The merge step after mapped shard jobs: the completeness check over the whole prefix, the manifest
    ``<output_uri>/_smdist/manifest.json`` (inputs -> outputs, with the shard jobs from ``shard_results``),
    returned via XCom; fails naming every object still without a complete output. Runs whatever the
    shards' states (trigger rule ``all_done``), so a failed shard's objects are named too."""

    template_fields: Sequence[str] = (*_StepOperator.template_fields, "shard_results")

    def __init__(self, *, shard_results: Any = None, fan_out: str = "jobs", **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.shard_results = shard_results
        self.fan_out = fan_out

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_smdist import ledger

        storage = self.storage()
        objects = ledger.list_inputs(storage, self.input_uri, self.output_uri)
        provenance = ledger.read_provenance(storage, self.output_uri)
        jobs: list[dict[str, Any]] = []
        processed: list[str] = []
        for result in [r for r in _materialize(self.shard_results) if r]:
            jobs += result.get("jobs") or []
            processed += result.get("processed_inputs") or []
            provenance.update(result.get("provenance") or {})
        report = ledger.completeness(storage, objects, self.output_uri, self.settings(), self.check_records,
                              provenance=provenance, model=self.fingerprint(storage))
        summary = ledger.write_manifest(storage, report, input_uri=self.input_uri, output_uri=self.output_uri,
                                 fan_out=self.fan_out, jobs=jobs, settings=self.settings(),
                                 processed=processed)
        error = ledger.outcome_error(report, summary)
        if error is not None:
            raise error
        self.log.info("Complete: %s; manifest %s", report.describe(), summary["manifest_uri"])
        return summary


#: the arguments the planner and the merge step take from the shards' common arguments, besides the record settings
_STEP_ARGS = tuple(a.name for a in STEP_ARGS if a.name not in ("input_uri", "output_uri", "model"))


def sharded_batch_inference(group_id: str, *, input_uri: str, output_uri: str, shards: int | str = 2,
                            shard_retries: int = 2, **common: Any) -> Any:
    """``fan_out="jobs"`` as a DAG shape: a TaskGroup ``plan`` -> ``shard`` (mapped: one transform job per
    planned shard) -> ``merge``, so Airflow itself retries (``shard_retries``), defers and shows each shard.

    ``common`` holds the arguments of :class:`SageMakerShardedBatchInferenceOperator` (the model, instances,
    record settings, ``deferrable``, ...); the planner and the merge step take the record settings and the
    connection from it. ``plan`` writes one ManifestFile per shard of the objects still without a complete
    output; ``merge`` (trigger rule ``all_done``) checks the whole prefix, writes the manifest and returns its
    summary (``group.get_child_by_label("merge").output``), failing with the objects still missing.
    """
    try:
        from airflow.sdk import TaskGroup
    except ImportError:  # Airflow 2
        from airflow.utils.task_group import TaskGroup  # type: ignore[no-redef]
    from airflow_smdist.specs.errors import SpecError

    for reserved in ("fan_out", "shard", "task_id"):
        if reserved in common:
            raise SpecError(reserved, "is set by sharded_batch_inference.", f"drop {reserved}=...")
    steps = {k: v for k, v in common.items() if k in RECORD_ARGS or k in _STEP_ARGS}
    steps["model"] = {k: v for k, v in common.items() if k in MODEL_ARGS}  # outputs of another model are pending
    with TaskGroup(group_id=group_id) as group:
        plan = SageMakerBatchShardPlanOperator(task_id="plan", input_uri=input_uri, output_uri=output_uri,
                                               shards=shards, **steps)
        shard = SageMakerShardedBatchInferenceOperator.partial(
            task_id="shard", fan_out="jobs", input_uri=input_uri, output_uri=output_uri, retries=shard_retries,
            **common).expand(shard=plan.output)
        SageMakerBatchInferenceMergeOperator(task_id="merge", input_uri=input_uri, output_uri=output_uri,
                                             shard_results=shard.output, **steps)
    return group


def transform_result(description: dict[str, Any], backend: Any) -> dict[str, Any]:
    """The small, JSON-safe result of one transform job (for sensors)."""
    backend_name = backend if isinstance(backend, str) else backend.name  # a Backend or its name
    res = description.get("TransformResources") or {}
    out = {"job_name": description["TransformJobName"], "job_arn": description.get("TransformJobArn"),
           "status": description["TransformJobStatus"], "backend": backend_name,
           "model_name": description.get("ModelName"),
           "output_uri": (description.get("TransformOutput") or {}).get("S3OutputPath"),
           "instance_type": res.get("InstanceType"), "instance_count": res.get("InstanceCount"),
           "start_time": isoformat(description.get("TransformStartTime")),
           "end_time": isoformat(description.get("TransformEndTime"))}
    if description.get("FailureReason"):
        out["failure_reason"] = description["FailureReason"]
    return out
