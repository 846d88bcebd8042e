"""Retention of local jobs: which finished jobs may go, removing them, and the ``local_retention`` pass at submit.

A job's directory is removed only when all of these hold (:func:`verdict`):

* it is finished (Completed, Failed or Stopped, as Describe reports it) and its supervisor no longer runs;
* it finished at least ``older_than`` seconds ago (``ended`` in its state, else its state file's mtime);
* it is not a trial of a tuning job that is still kept (a trial goes with its tuning job);
* the task instance that owns it (its ``smdist:task-instance`` tag, see :mod:`airflow_smdist.lifecycle`) is in
  a final state or no longer exists; when that cannot be told (no metadata database here, an identity too
  long to read back), the job is kept.

A removed job is first renamed into ``<root>/.trash/`` (atomic: no reader ever sees half a job), then deleted.

The ``smdist`` connection's ``local_retention`` extra (``"30d"``) runs :func:`prune_after_submit` after each
local submit: at most once per :data:`RETENTION_INTERVAL_SECONDS` per job root (a stamp file decides; a pass
already running elsewhere is not waited for), deciding within :data:`RETENTION_BUDGET_SECONDS`, and deleting
in a background thread, so a submit is never held up for long.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_smdist.backends.base import JOB_KINDS, TERMINAL_STATES
from airflow_smdist.backends.local.store import private_dir

log = logging.getLogger(__name__)

OWNER_TAG = "smdist:task-instance"  # airflow_smdist.lifecycle.OWNER_TAG (not imported: lifecycle imports Airflow)
TRY_TAG = "smdist:try"
TRASH = ".trash"
#: how often the ``local_retention`` pass runs per job root, at most
RETENTION_INTERVAL_SECONDS = 600.0
#: how long that pass may spend deciding (reading states, asking owners' states) within a submit
RETENTION_BUDGET_SECONDS = 2.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_duration(text: str) -> float:
    """Seconds of a duration such as ``7d``, ``12h``, ``30m``, ``45s``, ``2w``; ValueError otherwise."""
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a duration: write a number and a unit, e.g. 7d, 12h, 30m, 45s or 2w")
    return float(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True)
class OwnerRef:
    """The task instance a job's owner tag names."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: str = ""


def owner_of(tags: list[dict[str, str]]) -> OwnerRef | None:
    """The owner named by a job's tags (``dag/task/run/map index``, run ids may hold ``/``); None without one.
    ValueError for a tag that cannot be read back (an identity shortened with a hash)."""
    values = {t.get("Key"): t.get("Value", "") for t in tags}
    identity = values.get(OWNER_TAG)
    if not identity:
        return None
    parts = identity.split("/")
    if "#" in identity or len(parts) < 4 or not parts[-1].lstrip("-").isdigit():
        raise ValueError(f"owner tag {identity!r} cannot be read back into a task instance")
    return OwnerRef(parts[0], parts[1], "/".join(parts[2:-1]), int(parts[-1]), values.get(TRY_TAG, ""))


@dataclass
class Verdict:
    """What prune decides for one job."""

    kind: str
    name: str
    delete: bool
    reason: str
    #: the tuning job of a trial kept for being one (it goes with that job)
    parent: str | None = None


def finished_at(state: dict[str, Any], job_dir: Path) -> float:
    ended = state.get("ended")
    if ended:
        return float(ended)
    try:
        return (job_dir / "state.json").stat().st_mtime
    except FileNotFoundError:
        return time.time()


def owner_verdict(tags: list[dict[str, str]], cache: dict[OwnerRef, str | None]) -> str | None:
    """Why the job's owner keeps it (None: no owner, or one that is done with it)."""
    from airflow_smdist._compat import FINISHED_TI_STATES, TaskStateUnknown, task_instance_state

    try:
        owner = owner_of(tags)
    except ValueError as exc:
        return f"kept: {exc}"
    if owner is None:
        return None
    if owner not in cache:
        try:
            exists, state = task_instance_state(owner.dag_id, owner.task_id, owner.run_id, owner.map_index)
        except TaskStateUnknown as exc:
            cache[owner] = f"kept: the state of its task instance cannot be told here ({exc})"
        else:
            who = f"{owner.dag_id}/{owner.task_id}/{owner.run_id}/{owner.map_index}"
            cache[owner] = None if not exists or state in FINISHED_TI_STATES else \
                f"kept: its task instance {who} is {state or 'not finished (no state)'}"
    return cache[owner]


def verdict(backend: Any, kind: str, name: str, cutoff: float, cache: dict[OwnerRef, str | None]) -> Verdict:
    """Whether the job ``kind``/``name`` may be removed now, for a prune of jobs finished before ``cutoff``."""
    job_dir = backend.job_dir(kind, name)
    state = backend._live_state(kind, name)  # corrected when its supervisor died without finishing it
    if state["status"] not in TERMINAL_STATES:
        return Verdict(kind, name, False, f"kept: {state['status']}")
    if backend._supervisor_pid(job_dir) is not None:
        return Verdict(kind, name, False, "kept: its supervisor is still running")
    ended = finished_at(state, job_dir)
    if ended > cutoff:
        return Verdict(kind, name, False, f"kept: finished {format_age(time.time() - ended)} ago")
    parent = state.get("parent")
    if parent and backend.store.exists("tuning", parent):
        return Verdict(kind, name, False, f"kept: a trial of tuning job {parent} (it goes with that job)", parent)
    why = owner_verdict(backend.list_tags(kind, name), cache)
    if why:
        return Verdict(kind, name, False, why)
    return Verdict(kind, name, True, f"{state['status']} {format_age(time.time() - ended)} ago")


def format_age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{max(0.0, seconds):.0f}s"


def plan(backend: Any, older_than: float, *, deadline: float | None = None) -> list[Verdict]:
    """A verdict for every local job (tuning jobs first, so their trials follow them), until ``deadline``
    (``time.monotonic()``) if given."""
    cutoff = time.time() - older_than
    cache: dict[OwnerRef, str | None] = {}
    out: list[Verdict] = []
    for kind in sorted(JOB_KINDS, key=lambda k: k != "tuning"):
        for name in backend.store.list(kind):
            if deadline is not None and time.monotonic() > deadline:
                log.info("Local retention: the pass stopped after %.0fs; the jobs not looked at yet wait for "
                         "the next pass (at most one per %.0f minutes).", RETENTION_BUDGET_SECONDS,
                         RETENTION_INTERVAL_SECONDS / 60)
                return with_trials(out)
            out.append(verdict(backend, kind, name, cutoff, cache))
    return with_trials(out)


def with_trials(verdicts: list[Verdict]) -> list[Verdict]:
    """A tuning job's trials are removed with it."""
    going = {v.name for v in verdicts if v.kind == "tuning" and v.delete}
    for v in verdicts:
        if v.parent in going:
            v.delete, v.reason = True, f"a trial of tuning job {v.parent}, removed with it"
    return verdicts


def move_to_trash(backend: Any, kind: str, name: str) -> Path | None:
    """Rename the job's directory into the root's trash (None if it is gone already)."""
    trash = private_dir(backend.store.root / TRASH)
    target = trash / f"{kind}.{name}.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        os.rename(backend.job_dir(kind, name), target)
    except FileNotFoundError:
        return None
    return target


def empty_trash(root: Path) -> None:
    trash = root / TRASH
    for entry in sorted(trash.iterdir()) if trash.is_dir() else []:
        shutil.rmtree(entry, ignore_errors=True)


def prune(backend: Any, older_than: float, *, dry_run: bool = False) -> list[Verdict]:
    """Remove the finished jobs older than ``older_than`` seconds that nothing uses any more; every verdict."""
    verdicts = plan(backend, older_than)
    if not dry_run:
        for v in verdicts:
            if v.delete:
                move_to_trash(backend, v.kind, v.name)
        empty_trash(backend.store.root)
    return verdicts


# -- the connection's local_retention, at submit ----------------------------------------------------------
def _claim_pass(root: Path) -> Any:
    """An open, locked stamp file when a retention pass is due for ``root`` (the caller closes it); else None."""
    stamp = root / ".retention"
    try:
        if time.time() - stamp.stat().st_mtime < RETENTION_INTERVAL_SECONDS:
            return None
    except FileNotFoundError:
        pass
    fh = open(stamp, "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # another process runs a pass right now
        fh.close()
        return None
    if time.time() - stamp.stat().st_mtime < RETENTION_INTERVAL_SECONDS and stamp.stat().st_size:
        fh.close()  # another process finished one just before we locked
        return None
    fh.write(f"{time.time()}\n")
    fh.flush()
    os.utime(stamp)
    return fh


def prune_after_submit(backend: Any, retention: str) -> None:
    """The ``local_retention`` pass: remove finished jobs older than ``retention``, if a pass is due. Never
    raises: a failed pass is a warning in the submitting task's log."""
    try:
        older_than = parse_duration(retention)
    except ValueError as exc:
        log.warning("smdist connection's local_retention: %s; no local jobs are pruned.", exc)
        return
    try:
        fh = _claim_pass(backend.store.root)
        if fh is None:
            return
        try:
            verdicts = plan(backend, older_than, deadline=time.monotonic() + RETENTION_BUDGET_SECONDS)
            gone = [v for v in verdicts if v.delete and move_to_trash(backend, v.kind, v.name)]
        finally:
            fh.close()
    except Exception as exc:  # noqa: BLE001 - retention must never fail a submit
        log.warning("Pruning local jobs older than %s failed: %s: %s", retention, type(exc).__name__, exc)
        return
    if gone:
        log.info("Pruned %d local job(s) finished more than %s ago (local_retention): %s", len(gone), retention,
                 ", ".join(f"{v.kind}/{v.name}" for v in gone))
    if (backend.store.root / TRASH).is_dir():  # this pass's, and what an earlier one's process left
        threading.Thread(target=empty_trash, args=(backend.store.root,), daemon=True,
                         name="smdist-retention").start()
