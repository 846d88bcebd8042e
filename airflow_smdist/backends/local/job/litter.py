"""What a job supervisor killed mid-upload leaves, and its removal (issue 34, hole 7).

A supervisor killed with SIGKILL runs no cleanup. What it may leave, and how each is found again:

- ``<job dir>/pack.tmp/``: the model.tar.gz / output.tar.gz being built (``pack`` writes it there, not in /tmp);
- ``<object>.<pid>-<hex>.smdist-partial`` next to a file:// destination, named in ``<job dir>/uploads.jsonl``
  before it is written;
- an S3 multipart upload never completed nor aborted (billed until a lifecycle rule runs), whose UploadId is in
  the journal before its first part is sent.

:func:`reclaim` removes them for every job whose supervisor is gone; each supervisor calls it when it starts, so
the litter lasts at the latest until the next job starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from airflow_smdist.backends.local.job.hostfs import StrPath
from airflow_smdist.storage import PARTIAL, Storage, UploadJournal

JOURNAL = "uploads.jsonl"
PACK_TMP = "pack.tmp"


def _supervisor_alive(job_dir: Path) -> bool:
    from airflow_smdist.backends.local import LocalBackend

    return LocalBackend._supervisor_pid(job_dir) is not None or not (job_dir / "supervisor.pid").exists()


def candidates(root: Path) -> list[Path]:
    """Job directories that may hold litter: a pack directory or an upload journal not marked done."""
    found = {p.parent for p in root.glob(f"*/*/{PACK_TMP}")}
    found |= {p.parent for p in root.glob(f"*/*/{JOURNAL}") if not UploadJournal(p).finished()}
    return sorted(found)


def reclaim(root: StrPath, say: Callable[[str], None] | None = None) -> list[str]:
    """Remove what dead supervisors of jobs under the local root left; a line for each thing removed."""
    done: list[str] = []
    for job_dir in candidates(Path(root)):
        if _supervisor_alive(job_dir):
            continue
        done += reclaim_job(job_dir)
    if say:
        for line in done:
            say(line)
    return done


def settle(job_dir: Path) -> None:
    """A supervisor ending normally marks its journal done when no upload of its own is left open (one whose
    abort failed stays open, for the next start to try again)."""
    journal = UploadJournal(job_dir / JOURNAL)
    if journal.path.exists() and not journal.open_entries():
        journal.mark_done()


def reclaim_job(job_dir: Path) -> list[str]:
    """Remove one dead supervisor's litter: its pack directory, its partial objects, its multipart uploads."""
    out = []
    if (job_dir / PACK_TMP).exists():
        shutil.rmtree(job_dir / PACK_TMP, ignore_errors=True)
        out.append(f"removed {job_dir / PACK_TMP} (a killed supervisor's pack)")
    journal = UploadJournal(job_dir / JOURNAL)
    entries = journal.open_entries()
    for entry in entries:
        partial = entry.get("partial")
        if partial and partial.endswith(PARTIAL):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
                out.append(f"removed {partial} (a killed supervisor's partial upload of {entry['uri']})")
        if entry.get("upload_id"):
            storage = Storage(endpoint_url=entry.get("endpoint_url"), region_name=entry.get("region"))
            try:
                storage.s3.abort_multipart_upload(Bucket=entry["bucket"], Key=entry["key"],
                                                  UploadId=entry["upload_id"])
                out.append(f"aborted the multipart upload of {entry['uri']} (a killed supervisor's)")
            except Exception as e:  # noqa: BLE001 - gone already (NoSuchUpload), or unreachable: said, kept
                code = getattr(e, "response", {}).get("Error", {}).get("Code")
                if code != "NoSuchUpload":  # tried once: the journal is marked done all the same
                    out.append(f"could not abort the multipart upload of {entry['uri']}: {e}")
    if journal.path.exists():
        journal.mark_done()
    return out
