"""Sharded batch inference bookkeeping: the shard planner, output names, the completeness check, manifests.

Pure: nothing here lists, reads or writes storage. Callers hand in listings (:class:`StoredObject`) and,
for record counts, a ``read`` callable (``Storage.read_bytes``); the operator does the I/O.

* :func:`plan_shards` balances objects by size over N shards (largest first onto the lightest shard), so N
  separate jobs finish at about the same time; objects are never split (SageMaker's unit is the object).
* :func:`output_uri` is batch transform's naming, ``S3OutputPath/<key below the input prefix>.out``
  (docs/contracts.md §4.3); the processing fan-out writes the same names.
* :func:`check_completeness` requires every input object's output, with the record count matched where the
  split type makes records countable, made by the current model from the input as it is now (the manifest
  records, per output, the model's fingerprint and the input's version: ETag, or size and mtime); what
  fails is *pending*, and a re-run processes only that. An output without a record counts as current unless
  its input was written after it.
* :func:`input_manifest` is SageMaker's ManifestFile (``[{"prefix": ...}, "rel/key", ...]``), the input of a
  shard job or a re-run; :func:`batch_manifest` the inputs-to-outputs manifest written beside the outputs
  (``<S3OutputPath>/_smdist/manifest.json``) and returned through XCom.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from airflow_smdist.specs.errors import SpecError
from airflow_smdist.storage import StoredObject, join_uri, relative_key

OUTPUT_SUFFIX = ".out"
#: where our own files go under the output prefix (manifests, shard plans, the processing runner)
WORK_DIR = "_smdist"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "smdist-batch-inference-manifest/1"
#: Accept types whose responses are one line per record (so output lines count records)
LINE_PER_RECORD_TYPES = ("text/csv", "application/jsonlines", "application/x-jsonlines")


@dataclass(frozen=True)
class Shard:
    index: int
    objects: tuple[StoredObject, ...]

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.objects)


def plan_shards(objects: Iterable[StoredObject], n_shards: int) -> list[Shard]:
    """Split ``objects`` into at most ``n_shards`` shards of about equal total size.

    Longest-processing-time first: objects by size, largest first (ties by key), each onto the shard with the
    fewest bytes so far (ties: fewer objects, then the lower index). No shard is empty: fewer objects than
    shards gives one shard per object. Deterministic for a given listing; keys are sorted within a shard."""
    objects = list(objects)
    if isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1:
        raise SpecError("shards", f"{n_shards!r} is not a positive number of shards.", "give an integer >= 1.")
    keys = [o.key for o in objects]
    if len(set(keys)) != len(keys):
        raise SpecError("objects", "the listing holds the same key twice.", "list each object once.")
    n = min(n_shards, len(objects))
    loads: list[list[Any]] = [[0, 0, i, []] for i in range(n)]  # bytes, count, index, members
    for obj in sorted(objects, key=lambda o: (-o.size, o.key)):
        target = min(loads, key=lambda s: (s[0], s[1], s[2]))
        target[0] += obj.size
        target[1] += 1
        target[3].append(obj)
    return [Shard(i, tuple(sorted(members, key=lambda o: o.key))) for _b, _c, i, members in loads]


def balance(shards: list[Shard]) -> float:
    """Largest shard's bytes over the mean (1.0 is perfect); 1.0 for no data."""
    sizes = [s.bytes for s in shards]
    mean = sum(sizes) / len(sizes) if sizes else 0
    return max(sizes) / mean if mean else 1.0


# -- names ---------------------------------------------------------------------------------------------------
def output_uri(output_path: str, rel: str, suffix: str = OUTPUT_SUFFIX) -> str:
    """``S3OutputPath`` + the object's key below the input prefix + ``.out``."""
    return join_uri(output_path, rel) + suffix


def work_uri(output_path: str, *parts: str) -> str:
    return join_uri(output_path, WORK_DIR, *parts)


def manifest_uri(output_path: str) -> str:
    return work_uri(output_path, MANIFEST_NAME)


def check_prefixes(input_uri: str, output_path: str) -> None:
    """Outputs under the input prefix would be read as inputs by the next run: refuse that."""
    a, b = input_uri.rstrip("/") + "/", output_path.rstrip("/") + "/"
    if b.startswith(a) or a == b:
        raise SpecError("output_uri", f"{output_path!r} lies under the input prefix {input_uri!r}: the outputs "
                        "(and the manifest) would become inputs of the next run.",
                        "write the outputs to a prefix outside the input prefix.")


@dataclass(frozen=True)
class InputObject:
    """One input object: where it is, its key below the prefix (``rel``), where its output goes."""

    uri: str
    rel: str
    size: int
    output: str
    #: the object's version when listed (ETag, or size:mtime_ns); "" when unknown
    version: str = ""
    #: when it was last written (seconds since the epoch); 0 when unknown
    modified: float = 0.0

    def as_stored(self) -> StoredObject:
        from airflow_smdist.storage import parse_uri

        return StoredObject(self.uri, parse_uri(self.uri)[2], self.size, self.version, self.modified)


def input_objects(prefix_uri: str, listing: Iterable[StoredObject], output_path: str) -> list[InputObject]:
    """The listing of an S3Prefix input as InputObjects (our own ``_smdist/`` files left out)."""
    out = []
    for obj in listing:
        rel = relative_key(prefix_uri, obj)
        if rel.split("/", 1)[0] == WORK_DIR:
            continue
        out.append(InputObject(obj.uri, rel, obj.size, output_uri(output_path, rel), obj.version, obj.modified))
    return out


def objects_of_manifest(entries: list[Any], output_path: str,
                        listed: dict[str, StoredObject] | None = None) -> list[InputObject]:
    """A ManifestFile's entries as InputObjects (size, version and time from ``listed`` by URI, where known)."""
    prefix, rels = parse_input_manifest(entries)
    base = prefix if prefix.endswith("/") else prefix + "/"
    out = []
    for rel in rels:
        obj = (listed or {}).get(base + rel)
        out.append(InputObject(base + rel, rel, obj.size if obj else 0, output_uri(output_path, rel),
                               obj.version if obj else "", obj.modified if obj else 0.0))
    return out


# -- ManifestFile inputs -------------------------------------------------------------------------------------
def input_manifest(objects: Iterable[InputObject]) -> list[Any]:
    """SageMaker's ManifestFile for these objects: ``[{"prefix": P}, rel1, rel2, ...]`` with P + rel the
    object's URI. All objects must share the prefix (they do when listed under one input prefix)."""
    objects = list(objects)
    if not objects:
        raise SpecError("objects", "a ManifestFile needs at least one object.", "")
    prefixes = {o.uri[: len(o.uri) - len(o.rel)] for o in objects}
    if len(prefixes) != 1 or not all(o.uri.endswith(o.rel) for o in objects):
        raise SpecError("objects", f"objects under different prefixes ({sorted(prefixes)[:3]}) cannot share a "
                        "ManifestFile.", "list objects of one input prefix.")
    return [{"prefix": prefixes.pop()}] + sorted(o.rel for o in objects)


def parse_input_manifest(entries: Any) -> tuple[str, list[str]]:
    if (not isinstance(entries, list) or not entries or not isinstance(entries[0], dict)
            or "prefix" not in entries[0] or not all(isinstance(e, str) for e in entries[1:])):
        raise SpecError("ManifestFile", "is not a SageMaker manifest.",
                        'use [{"prefix": "s3://bucket/prefix/"}, "relative/key1", "relative/key2", ...].')
    return entries[0]["prefix"], list(entries[1:])


def digest(objects: Iterable[InputObject]) -> str:
    """A short fingerprint of a set of objects (names shard plans and re-run manifests)."""
    h = hashlib.sha1()
    for rel in sorted(o.rel for o in objects):
        h.update(rel.encode() + b"\0")
    return h.hexdigest()[:10]


# -- completeness --------------------------------------------------------------------------------------------
def records_countable(split_type: str | None, assemble_with: str | None, batch_strategy: str | None = None,
                      accept: str | None = None, data_processing: bool = False) -> bool:
    """Whether an object's output lines count its records: records are lines (SplitType Line), responses
    are assembled one per line (AssembleWith Line), and each record gives one line: one record per request
    (SingleRecord), a line-per-record response type (CSV, JSON Lines), or JoinSource/OutputFilter (which
    emit one line per record)."""
    if split_type != "Line" or assemble_with != "Line":
        return False
    if data_processing or (batch_strategy or "SingleRecord") == "SingleRecord":
        return True
    return (accept or "").split(";")[0].strip().lower() in LINE_PER_RECORD_TYPES


def count_output_lines(data: bytes) -> int:
    return sum(1 for line in data.split(b"\n") if line.strip())


@dataclass
class Entry:
    input: str
    rel: str
    output: str
    input_bytes: int
    status: str = "missing"  # ok | missing | count_mismatch | stale
    input_records: int | None = None
    output_records: int | None = None
    output_bytes: int | None = None
    job: str | None = None
    #: provenance of the output: the fingerprint of the model that made it, the input version it was made from
    model: str | None = None
    made_from: str | None = None
    #: why a present output is stale (another model, a changed input)
    stale: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class CompletenessReport:
    entries: list[Entry]
    counted: bool

    @property
    def complete(self) -> bool:
        return all(e.status == "ok" for e in self.entries)

    @property
    def pending(self) -> list[Entry]:
        return [e for e in self.entries if e.status != "ok"]

    @property
    def missing(self) -> list[str]:
        return [e.input for e in self.pending]

    @property
    def records(self) -> int | None:
        return sum(e.input_records or 0 for e in self.entries) if self.counted else None

    def describe(self, limit: int = 10) -> str:
        bad = self.pending
        if not bad:
            return f"all {len(self.entries)} object(s) have their output" + (
                f" with matching record counts ({self.records} records)" if self.counted else "")
        lines = []
        for e in bad[:limit]:
            if e.status == "missing":
                lines.append(f"{e.input}: no output {e.output}")
            elif e.status == "stale":
                lines.append(f"{e.input}: its output {e.output} is stale ({e.stale})")
            else:
                lines.append(f"{e.input}: {e.input_records} record(s) in, {e.output_records} line(s) in {e.output}")
        more = f"\n... and {len(bad) - limit} more" if len(bad) > limit else ""
        return f"{len(bad)} of {len(self.entries)} object(s) incomplete:\n" + "\n".join(lines) + more


def model_fingerprint(container: dict[str, Any], artifact_version: str | None = None,
                      code_version: str | None = None) -> str:
    """A short hash of what makes a model's predictions: its artifact (URI and version), image, environment
    and inference code (a PrimaryContainer of CreateModel or DescribeModel; ``code_version`` stands for the
    code that ``SAGEMAKER_SUBMIT_DIRECTORY`` names, whose URI holds the model's name and so changes with
    every new model of the same code)."""
    env = {k: v for k, v in (container.get("Environment") or {}).items() if k != "SAGEMAKER_SUBMIT_DIRECTORY"}
    what = {"ModelDataUrl": container.get("ModelDataUrl"), "Image": container.get("Image"), "Environment": env,
            "ArtifactVersion": artifact_version, "Code": code_version}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def made_record(model: str | None, made_from: str | None) -> dict[str, str]:
    """What made one output: the model's fingerprint and the version of the input it was made from (each
    where known)."""
    return {k: v for k, v in (("model", model), ("made_from", made_from)) if v}


def provenance_of(manifest: Any) -> dict[str, dict[str, str]]:
    """Input URI -> {"model", "made_from"} of each output a manifest recorded ({} for none or a foreign one)."""
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return {}
    out = {}
    for e in manifest.get("entries") or []:
        if isinstance(e, dict) and isinstance(e.get("input"), str) and (e.get("model") or e.get("made_from")):
            out[e["input"]] = made_record(e.get("model"), e.get("made_from"))
    return out


def staleness(made: dict[str, str], model: str | None, obj: InputObject, output: StoredObject) -> str | None:
    """Why an output made as ``made`` records is stale for ``model`` and its input ``obj`` as listed now.
    An output with no record of what made it (written by hand, by another tool, or before records were
    kept) is stale when its input was written after it, as ``make`` decides."""
    if made.get("model") and model and made["model"] != model:
        return f"made by another model ({made['model']}, now {model})"
    if made.get("made_from") and obj.version and made["made_from"] != obj.version:
        return f"its input changed since (was {made['made_from']}, now {obj.version})"
    if not made and obj.modified and output.modified and obj.modified > output.modified:
        return "no record of what made it, and its input was written after it"
    return None


def check_completeness(objects: list[InputObject], outputs: Iterable[StoredObject], *,
                       count: bool = False, read: Callable[[str], bytes] | None = None,
                       compression: str = "None", split_type: str = "Line", workers: int = 8,
                       provenance: dict[str, dict[str, str]] | None = None,
                       model: str | None = None) -> CompletenessReport:
    """Every input object needs its output (listed in ``outputs``). With ``count`` (see
    :func:`records_countable`), the output's non-blank lines must equal the input's records (``read`` fetches
    both); a mismatch is pending like a missing output. With ``provenance`` (input URI -> {"model",
    "made_from"}), an output made by a model other than ``model`` or from an earlier version of its input is
    stale: pending too."""
    present = {o.uri: o for o in outputs}
    entries = [Entry(o.uri, o.rel, o.output, o.size) for o in objects]
    for e, obj in zip(entries, objects):
        made = (provenance or {}).get(e.input, {})
        e.model, e.made_from = made.get("model"), made.get("made_from")
        out = present.get(e.output)
        if out is not None:
            e.status, e.output_bytes = "ok", out.size
            e.stale = staleness(made, model, obj, out)
            if e.stale:
                e.status = "stale"
    if count:
        if read is None:
            raise ValueError("count=True needs read")
        from airflow_smdist.runtime.batch_runner import count_records

        def counts(e: Entry) -> tuple[int, int | None]:
            n_in = count_records(read(e.input), split_type, compression)
            n_out = count_output_lines(read(e.output)) if e.status == "ok" else None
            return n_in, n_out

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for e, (n_in, n_out) in zip(entries, pool.map(counts, entries)):
                e.input_records, e.output_records = n_in, n_out
                if e.status == "ok" and n_in != n_out:
                    e.status = "count_mismatch"
    return CompletenessReport(entries, counted=count)


# -- the inputs-to-outputs manifest --------------------------------------------------------------------------
def batch_manifest(report: CompletenessReport, *, input_uri: str, output_path: str, fan_out: str,
                   jobs: list[dict[str, Any]] | None = None, settings: dict[str, Any] | None = None,
                   created: str | None = None, processed: Iterable[str] = ()) -> dict[str, Any]:
    """The manifest written to ``<S3OutputPath>/_smdist/manifest.json``: one entry per input object with its
    output, sizes, record counts and status, plus the jobs and settings that produced them."""
    processed = set(processed)
    return {
        "format": MANIFEST_FORMAT,
        "input_uri": input_uri,
        "output_uri": output_path,
        "fan_out": fan_out,
        "created": created,
        "complete": report.complete,
        "objects": len(report.entries),
        "records": report.records,
        "records_counted": report.counted,
        "processed_this_run": sorted(processed),
        "pending": report.missing,
        "jobs": list(jobs or []),
        "settings": dict(settings or {}),
        "entries": [e.as_dict() for e in report.entries],
    }


def manifest_summary(manifest: dict[str, Any], manifest_location: str | None, limit: int = 1000) -> dict[str, Any]:
    """The XCom form of a manifest: counts, jobs, pending, and input -> output (at most ``limit`` pairs);
    ``manifest_uri`` is None for a manifest not written."""
    entries = manifest["entries"]
    summary = {k: manifest[k] for k in ("input_uri", "output_uri", "fan_out", "complete", "objects", "records",
                                        "pending", "jobs")}
    summary["manifest_uri"] = manifest_location
    summary["processed"] = len(manifest["processed_this_run"])
    summary["outputs"] = {e["input"]: e["output"] for e in entries[:limit]}
    if len(entries) > limit:
        summary["outputs_truncated"] = True
    return summary


def dumps(document: Any) -> bytes:
    return (json.dumps(document, indent=1, sort_keys=False, default=str) + "\n").encode()


__all__ = [
    "CompletenessReport", "Entry", "InputObject", "Shard", "balance", "batch_manifest", "check_completeness",
    "check_prefixes", "count_output_lines", "digest", "input_manifest", "input_objects", "manifest_summary",
    "made_record", "model_fingerprint", "provenance_of", "staleness",
    "manifest_uri", "objects_of_manifest", "output_uri", "parse_input_manifest", "plan_shards",
    "records_countable", "work_uri",
]
