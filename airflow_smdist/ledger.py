"""The sharded-inference ledger: what the storage under a batch inference's ``output_uri`` says has been made.

The batch inference operators, the shard planner, the merge step and the batch sensors all read and write it
through these functions; none of them needs Airflow beyond :class:`AirflowException` for the task's error:

* the inputs: an S3Prefix listing or a ManifestFile (:func:`list_inputs`);
* completeness: which input objects have a complete, current output (:func:`completeness`, the record counts and
  staleness rules of :mod:`airflow_smdist.specs.sharding`);
* provenance: what made each output, from the last manifest (:func:`read_provenance`), from the records each job
  is started with (:func:`record_job`, :func:`made_by_jobs`) and from the outputs made now (:func:`made_now`);
  the model's fingerprint (:func:`model_fingerprint_of`);
* the manifest ``<output_uri>/_smdist/manifest.json`` (:func:`write_manifest`) and the task's error
  (:func:`outcome_error`);
* shard planning: the objects still to do, balanced by size into ManifestFiles (:func:`plan_shards_step`).

The pure rules (listing to objects, counting records, fingerprints, the manifest's shape) are in
:mod:`airflow_smdist.specs.sharding`; here they meet a :class:`~airflow_smdist.storage.Storage`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from airflow_smdist._compat import AirflowException

if TYPE_CHECKING:
    from airflow_smdist.backends.base import Backend
    from airflow_smdist.specs.sharding import CompletenessReport, InputObject
    from airflow_smdist.specs.transform import ModelPlan
    from airflow_smdist.storage import Storage


def model_fingerprint_of(storage: Storage, planned: tuple[str, dict[str, Any] | None, ModelPlan | None]) -> str:
    """The fingerprint of a planned model (``plan_model`` of the operators): its container (the existing model's, else
    the plan's), its artifact's version, and its inference code: the hash of the local source when the plan
    packs it, else the version of the code the model names."""
    from airflow_smdist.sourcedir import source_digest
    from airflow_smdist.specs import sharding

    _, existing, plan = planned
    container = (existing or (plan.request if plan is not None else {})).get("PrimaryContainer") or {}
    url = container.get("ModelDataUrl")
    code: str = (container.get("Environment") or {}).get("SAGEMAKER_SUBMIT_DIRECTORY", "")
    code_version: str | None
    if plan is not None and plan.source_dir:
        code_version = source_digest(plan.source_dir)
    else:
        code_version = storage.version(code) if "://" in code else None
    return sharding.model_fingerprint(container, storage.version(url) if url else None, code_version)


def storage_for(backend: Backend) -> Storage:
    """Storage that reaches the backend's objects: the ``aws`` connection's S3 client for sagemaker, the
    local backend's endpoint (or boto3's defaults) otherwise."""
    from airflow_smdist.storage import Storage

    return Storage.for_backend(backend)


# -- the steps, usable on their own ----------------------------------------------------------------------------
def list_inputs(storage: Storage, input_uri: str, output_uri: str, s3_data_type: str = "S3Prefix"
                ) -> list[InputObject]:
    """The input objects (S3Prefix listing or ManifestFile) with their output names."""
    from airflow_smdist.specs import sharding

    if s3_data_type == "ManifestFile":
        entries = json.loads(storage.read_bytes(input_uri))
        prefix, _rels = sharding.parse_input_manifest(entries)
        listing = storage.list(prefix)
        return sharding.objects_of_manifest(entries, output_uri, {o.uri: o for o in listing})
    return sharding.input_objects(input_uri, storage.list(input_uri), output_uri)


def completeness(storage: Storage, objects: Iterable[InputObject], output_uri: str, settings: dict[str, Any],
                 check_records: bool | None = None, *, provenance: dict[str, dict[str, str]] | None = None,
                 model: str | None = None) -> CompletenessReport:
    """The completeness check of ``objects`` against what is under ``output_uri`` (record counts where
    countable, or as ``check_records`` says; outputs of another model or of a changed input are stale, from
    ``provenance``: see :func:`read_provenance`)."""
    from airflow_smdist.specs import sharding

    count = check_records
    if count is None:
        joins = settings.get("join_source") == "Input" or bool(settings.get("output_filter"))
        count = sharding.records_countable(settings.get("split_type"), settings.get("assemble_with"),
                                           settings.get("batch_strategy"), settings.get("accept"), joins)
    listing = storage.list(output_uri) if objects else []
    return sharding.check_completeness(list(objects), listing, count=count, read=storage.read_bytes,
                                       compression=settings.get("compression") or "None",
                                       split_type=settings.get("split_type") or "None",
                                       provenance=provenance, model=model)


def read_provenance(storage: Storage, output_uri: str) -> dict[str, dict[str, str]]:
    """What the last manifest under ``output_uri`` recorded of each output: the model that made it and the
    version of the input it was made from ({} without a readable manifest)."""
    from airflow_smdist.specs import sharding

    try:
        return sharding.provenance_of(json.loads(storage.read_bytes(sharding.manifest_uri(output_uri))))
    except Exception:  # noqa: BLE001 - no (readable) manifest: no record, every present output counts
        return {}


def made_now(objects: Iterable[InputObject], processed: Iterable[str], model: str | None) -> dict[str, dict[str, str]]:
    """The provenance of the outputs of ``processed`` (input URIs): ``model``, from the inputs as listed."""
    from airflow_smdist.specs.sharding import made_record

    done = set(processed)
    return {o.uri: made_record(model, o.version) for o in objects if o.uri in done}


def job_record_uri(output_uri: str, job: str) -> str:
    from airflow_smdist.specs import sharding

    return sharding.work_uri(output_uri, "jobs", f"{job}.json")


def record_job(storage: Storage, output_uri: str, job: str, model: str | None, objects: Iterable[InputObject]
               ) -> None:
    """Before a job starts: the model it runs (a fingerprint) and the version of each input it is given, at
    ``<output_uri>/_smdist/jobs/<job>.json``, so that whoever sees the job complete (a sensor, a later try)
    can record what made its outputs."""
    from airflow_smdist.specs import sharding

    record = {"job": job, "model": model, "inputs": {o.uri: o.version for o in objects}}
    storage.write_bytes(sharding.dumps(record), job_record_uri(output_uri, job))


def made_by_jobs(storage: Storage, output_uri: str, jobs: Iterable[str]) -> dict[str, dict[str, str]]:
    """The provenance of what ``jobs`` (completed ones) made, from their records (see :func:`record_job`);
    a job without a readable record adds nothing."""
    from airflow_smdist.specs.sharding import made_record

    out: dict[str, dict[str, str]] = {}
    for job in jobs:
        try:
            record = json.loads(storage.read_bytes(job_record_uri(output_uri, job)))
        except Exception:  # noqa: BLE001 - started elsewhere, or before records were kept
            continue
        for uri, version in (record.get("inputs") or {}).items():
            out[uri] = made_record(record.get("model"), version)
    return out


def write_manifest(storage: Storage, report: CompletenessReport, *, input_uri: str, output_uri: str, fan_out: str,
                   jobs: list[dict[str, Any]], settings: dict[str, Any], processed: Sequence[str] = ()
                   ) -> dict[str, Any]:
    """Write ``<output_uri>/_smdist/manifest.json``; return its XCom summary."""
    from airflow_smdist.specs import sharding

    manifest = sharding.batch_manifest(report, input_uri=input_uri, output_path=output_uri, fan_out=fan_out,
                                       jobs=jobs, settings=settings, processed=processed,
                                       created=datetime.now(timezone.utc).isoformat())
    uri = sharding.manifest_uri(output_uri)
    try:
        storage.write_bytes(sharding.dumps(manifest), uri)
    except Exception as exc:  # noqa: BLE001 - reported beside the jobs' outcome (outcome_error), never instead
        summary = sharding.manifest_summary(manifest, None)  # not written: no location
        summary["manifest_error"] = f"the manifest {uri} could not be written: {type(exc).__name__}: {exc}"
        return summary
    return sharding.manifest_summary(manifest, uri)


def outcome_error(report: CompletenessReport, summary: dict[str, Any], failed_jobs: Sequence[str] = (),
                  tail: str = "") -> AirflowException | None:
    """The task's error when jobs failed, objects are incomplete or the manifest could not be written: all of
    them, the jobs' failure reasons first (None when all is well)."""
    manifest_error = summary.get("manifest_error")
    if not failed_jobs and report.complete and not manifest_error:
        return None
    lines = ["; ".join(failed_jobs)] if failed_jobs else []
    lines.append(report.describe())
    if manifest_error:
        lines.append(manifest_error[0].upper() + manifest_error[1:])
    elif summary.get("manifest_uri"):
        lines.append(f"Manifest: {summary['manifest_uri']}")
    if tail and failed_jobs:
        lines.append(f"Last log lines:\n{tail}")
    return AirflowException("\n".join(lines))


def plan_shards_step(storage: Storage, *, input_uri: str, output_uri: str, shards: int, settings: dict[str, Any],
                     check_records: bool | None = None, log: Any = None, model: str | None = None
                     ) -> list[dict[str, Any]]:
    """The planner: the objects still without a complete, current output (of ``model``, a fingerprint,
    where given), balanced by size over ``shards`` shards,
    each written as a ManifestFile under ``<output_uri>/_smdist/shards/<digest>/``. Returns one small dict
    per shard (for ``.expand(shard=...)``); [] when nothing is missing."""
    from airflow_smdist.specs import sharding

    sharding.check_prefixes(input_uri, output_uri)
    objects = list_inputs(storage, input_uri, output_uri)
    if not objects:
        raise AirflowException(f"no input objects under {input_uri}")
    report = completeness(storage, objects, output_uri, settings, check_records,
                          provenance=read_provenance(storage, output_uri), model=model)
    pending = {e.input for e in report.pending}
    todo = [o for o in objects if o.uri in pending]
    if not todo:
        if log:
            log.info("All %d object(s) under %s already have complete outputs: no shard to run.", len(objects),
                     input_uri)
        return []
    by_uri = {o.uri: o for o in todo}
    planned = sharding.plan_shards([o.as_stored() for o in todo], shards)
    plan_id = sharding.digest(todo)
    out = []
    for shard in planned:
        members = [by_uri[s.uri] for s in shard.objects]
        uri = sharding.work_uri(output_uri, "shards", plan_id, f"shard-{shard.index:04d}.json")
        storage.write_bytes(sharding.dumps(sharding.input_manifest(members)), uri)
        out.append({"index": shard.index, "manifest_uri": uri, "objects": len(members), "bytes": shard.bytes,
                    "plan": plan_id, "input_uri": input_uri})
    if log:
        log.info("Planned %d shard(s) over %d of %d object(s) (balance max/mean %.3f): %s", len(out), len(todo),
                 len(objects), sharding.balance(planned),
                 ", ".join(f"#{s['index']}: {s['objects']} obj / {s['bytes']} B" for s in out))
    return out
