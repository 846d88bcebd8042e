"""Reading back what an ``@task.smdist`` job wrote: global rank 0's result and done record, each host's
result of a processing job, and the per-rank error records in the hosts' logs.

Where results live (the same on both backends; a job writes only into its own container paths and the
platform uploads them, so the job needs no S3 client and no credentials):

* training: global rank 0 writes ``smdist-function/result.json`` and ``done.json`` under its
  ``/opt/ml/output/data``; SageMaker (and the local backend) upload the hosts' output data as
  ``<S3OutputPath>/<job>/output/output.tar.gz``. Only that one member pair is read (streamed).
* processing: each host writes ``host-<rank>.json`` and ``host-<rank>.done.json`` into the job's
  ``smdist-results`` output, uploaded to ``<results location>/<job>/output/smdist-results/``.

The worker never unpickles anything a job wrote: results are JSON.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from typing import TYPE_CHECKING

from airflow_smdist._compat import AirflowException
from airflow_smdist.decorators.payload import RESULTS_OUTPUT
from airflow_smdist.lifecycle import JobFailed
from airflow_smdist.runtime.function import (
    DONE_FILE,
    ERROR_MARKER,
    RESULT_DIR,
    RESULT_FILE,
)

if TYPE_CHECKING:
    from airflow_smdist.backends.base import LogEvent
    from airflow_smdist.storage import Storage


class SmdistFunctionError(JobFailed):
    """The function raised in the job: a :class:`~airflow_smdist.lifecycle.JobFailed` whose reason is the first
    failing rank's error. ``exception_type``, ``host``, ``rank``, ``remote_traceback`` and ``records`` (every
    failing rank's record, first first) say where and what."""

    def __init__(self, kind: str, name: str, reason: str, record: dict[str, Any],
                 records: list[dict[str, Any]]) -> None:
        super().__init__(kind, name, "Failed", reason)
        self.exception_type = record.get("type")
        self.host = failure_host(record)
        self.rank = record.get("rank")
        self.remote_traceback = record.get("traceback")
        self.records = records


class SmdistNoResult(AirflowException):
    """The job completed but the result or its done record is missing or does not match."""


def _stamp(epoch: Any) -> str:
    try:
        return datetime.fromtimestamp(float(epoch), tz=UTC).strftime("%H:%M:%S.%f")[:-3] + "Z"
    except (TypeError, ValueError):
        return "?"


# -- errors -------------------------------------------------------------------------------------------------
def failure_host(record: dict[str, Any]) -> Any:
    """The host a failing process ran on. A record with a rank names its own host (the job's host name, from
    the rank's resource config): under MPI every rank's output is relayed through mpirun on the first host,
    so the log stream (``log_host``) says algo-1 for a rank that ran on algo-2. Without a rank (the runner
    failed before it knew where it was, and its ``host`` is only the machine's name), the log stream's host."""
    if record.get("rank") is not None and record.get("host"):
        return record["host"]
    return record.get("log_host") or record.get("host")


def error_records(events: list[LogEvent]) -> list[dict[str, Any]]:
    """Every ``SMDIST_FUNCTION_ERROR`` record in the log events, earliest first; ``log_host`` is the host
    (log stream) that printed it, not always the one that failed (see :func:`failure_host`)."""
    records = []
    for event in events:
        message = event.message
        at = message.find(ERROR_MARKER)
        if at < 0:
            continue
        try:
            record = json.loads(message[at + len(ERROR_MARKER):])
        except ValueError:
            continue
        if isinstance(record, dict):
            record["log_host"] = event.host
            records.append(record)
    records.sort(key=lambda r: (float(r.get("time") or 0), r.get("rank") if r.get("rank") is not None else -1))
    return records


def first_failure(records: list[dict[str, Any]], job_name: str, kind: str) -> SmdistFunctionError:
    first = records[0]
    host = failure_host(first)
    where = f"rank {first.get('rank')} on {host}" if kind == "training" else f"host {host}"
    others = [f"{r.get('type')} on {failure_host(r)} (rank {r.get('rank')}, "
              f"{_stamp(r.get('time'))})" for r in records[1:6]]
    message = (f"{first.get('function', 'the function')} raised {first.get('type')} on {where} at "
               f"{_stamp(first.get('time'))}: {first.get('message')}\n"
               f"Traceback on {host}:\n{first.get('traceback', '').rstrip()}")
    if others:
        message += (f"\n{len(records) - 1} later failure(s), probably consequences: " + "; ".join(others)
                    + (" ..." if len(records) > 6 else ""))
    return SmdistFunctionError(kind, job_name, message, first, records)


# -- training: global rank 0's result ------------------------------------------------------------------------
def output_tar_uri(description: dict[str, Any]) -> str:
    base = description["OutputDataConfig"]["S3OutputPath"].rstrip("/")
    return f"{base}/{description['TrainingJobName']}/output/output.tar.gz"


def _members(tar_path: str, wanted: set[str], limit: int) -> dict[str, bytes]:
    import tarfile  # here, not at DAG-parse time

    found: dict[str, bytes] = {}
    with tarfile.open(tar_path, "r:gz") as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if name in wanted and member.isfile():
                if member.size > limit:
                    raise SmdistNoResult(f"{name} in the job's output is {member.size} bytes, above "
                                         f"max_result_bytes={limit}.")
                extracted = tar.extractfile(member)
                assert extracted is not None  # a regular file (isfile above)
                found[name] = extracted.read()
                if len(found) == len(wanted):
                    break
    return found


@dataclass
class Result:
    value: Any
    done: dict[str, Any] = field(default_factory=dict)
    uri: str = ""


def _check_done(data: bytes, done: dict[str, Any], where: str) -> None:
    if done.get("bytes") != len(data) or done.get("sha256") != hashlib.sha256(data).hexdigest():
        raise SmdistNoResult(f"the result at {where} does not match its done record ({done}); it was changed or "
                             "cut short after the job wrote it.")


def read_training_result(storage: Storage, description: dict[str, Any], limit: int) -> Result:
    uri = output_tar_uri(description)
    job = description["TrainingJobName"]
    if not storage.exists(uri):
        raise SmdistNoResult(f"training job {job} completed, but it has no output data ({uri}): global rank 0 "
                             "wrote no result. Did the function end the process (os._exit, sys.exit) or "
                             "delete the output data directory?")
    result_name, done_name = f"{RESULT_DIR}/{RESULT_FILE}", f"{RESULT_DIR}/{DONE_FILE}"
    with tempfile.NamedTemporaryFile(suffix=".tar.gz") as tmp:
        storage.download(uri, tmp.name)
        found = _members(tmp.name, {result_name, done_name}, max(limit, 4096))
    if done_name not in found or result_name not in found:
        raise SmdistNoResult(f"training job {job} completed, but global rank 0's done record is not in {uri}: "
                             "the function did not return on rank 0 (did it end the process with os._exit or "
                             "sys.exit?).")
    done = json.loads(found[done_name])
    _check_done(found[result_name], done, uri)
    return Result(json.loads(found[result_name]), done, uri)


# -- processing: every host's result -------------------------------------------------------------------------
def results_prefix(description: dict[str, Any]) -> str | None:
    for out in (description.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
        if out.get("OutputName") == RESULTS_OUTPUT:
            uri: str = out["S3Output"]["S3Uri"]
            return uri.rstrip("/")
    return None


def read_processing_results(storage: Storage, description: dict[str, Any], limit: int) -> Result:
    job = description["ProcessingJobName"]
    prefix = results_prefix(description)
    if prefix is None:
        raise SmdistNoResult(f"processing job {job} has no {RESULTS_OUTPUT!r} output: it was not started by "
                             "@task.smdist_processing.")
    count = int(description["ProcessingResources"]["ClusterConfig"]["InstanceCount"])
    values = []
    for rank in range(count):
        name = f"host-{rank:05d}"
        try:
            done = json.loads(storage.read_bytes(f"{prefix}/{name}.done.json"))
            data = storage.read_bytes(f"{prefix}/{name}.json")
        except Exception as exc:  # noqa: BLE001 - missing object: the storage layers raise different types
            raise SmdistNoResult(f"processing job {job} completed, but host {rank + 1} of {count} wrote no result "
                                 f"under {prefix}/ ({type(exc).__name__}): "
                                 "the function did not return there.") from None
        if len(data) > limit:
            raise SmdistNoResult(f"host {rank + 1}'s result is {len(data)} bytes, above max_result_bytes={limit}.")
        _check_done(data, {"bytes": len(data), **done}, f"{prefix}/{name}.json")
        values.append(json.loads(data))
    return Result(values, {"hosts": count}, prefix)
