"""Rehearsed interruptions of local training jobs: managed spot interruptions and internal instance failures.

SageMaker interrupts a managed spot job when capacity goes, not when you want; this module decides, on the
local backend only, when a job's hosts are lost on purpose, so a checkpointing script can be rehearsed before
it pays for spot. The request is never changed: the settings live beside it (in the job's state), and the
SageMaker backend never reads them.

* ``SMDIST_LOCAL_SPOT_INTERRUPTIONS`` (or the smdist connection's ``local_spot_interruptions`` extra, which
  wins): comma-separated ends of the tries of a job with ``EnableManagedSpotTraining``, each either seconds of
  training (``"3,3"`` interrupts twice, each time 3 s into the try's training) or ``checkpoint`` /
  ``checkpoint:N``: right after the try has written its N-th checkpoint (default 1; a file under
  /opt/ml/checkpoints written since the try started and unchanged for a watch tick), so that on any machine,
  however long its start-up, each interruption comes after the job saved work and its resume can be seen
  (``"checkpoint,checkpoint"``: the example's default); ``"random:SEED:N"`` (or ``"random:SEED:N:MAX"``)
  interrupts N times, each after a number of seconds drawn with that seed between 1 and MAX (default 10). A job
  without ``EnableManagedSpotTraining`` is not interrupted (its log says the setting was ignored).
* ``SMDIST_LOCAL_INSTANCE_FAILURES`` (or ``local_instance_failures``): the same syntax, for any training job:
  an internal instance failure after that many seconds of training, retried as ``RetryStrategy`` says (else
  the job fails with SageMaker's ``InternalServerError``).

The interruptions come first, then the failures, one per try. The supervisor (:mod:`.training`) does what
SageMaker does on each: checkpoints synced, every host's processes killed, the hosts' directories lost and
made again, checkpoints restored before the entry point restarts.
"""

from __future__ import annotations

from typing import Any

import os
import random
from dataclasses import dataclass

SPOT_ENV = "SMDIST_LOCAL_SPOT_INTERRUPTIONS"
FAILURES_ENV = "SMDIST_LOCAL_INSTANCE_FAILURES"
#: seconds an interrupted spot job waits for capacity again (simulated: SageMaker's may take minutes or hours)
CAPACITY_WAIT_ENV = "SMDIST_LOCAL_SPOT_CAPACITY_WAIT"
CAPACITY_WAIT_DEFAULT = 2.0
RANDOM_MAX_DEFAULT = 10.0
#: no more tries than this (SageMaker's RetryStrategy allows 30 attempts)
MAX_EVENTS = 30


@dataclass(frozen=True)
class Event:
    """One rehearsed end of a try: ``kind`` "spot" (an interruption) or "failure" (an internal instance failure),
    ``after`` seconds into the try's training, or (``checkpoints`` > 0) once the try has written that many
    checkpoints."""

    kind: str
    after: float = 0.0
    checkpoints: int = 0

    def describe(self) -> str:
        if self.checkpoints > 1:
            return f"after checkpoint {self.checkpoints} of the try"
        if self.checkpoints:
            return "after the try's first checkpoint"
        return f"{self.after:g} s into the try's training"


#: one item of a setting: seconds (a float), or the try's N-th checkpoint ("checkpoint:N")
Item = float | str


def _item(text: str, setting: str, what: str) -> Item:
    """``text`` as seconds or ``checkpoint:N``; ValueError says what is wrong."""
    text = text.strip().lower()
    if text.startswith("checkpoint"):
        n = text.partition(":")[2] or "1"
        if text not in ("checkpoint", f"checkpoint:{n}") or not n.isdigit() or int(n) < 1:
            raise ValueError(f"{what}={setting!r}: {text!r} is not checkpoint or checkpoint:N (N from 1)")
        return f"checkpoint:{int(n)}"
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"{what}={setting!r}: give comma-separated seconds of training ('3,3' interrupts twice, "
                         "3 s into each try), checkpoint[:N] (after the try's N-th checkpoint) or "
                         "random:SEED:N") from None
    if seconds < 0:
        raise ValueError(f"{what}={setting!r}: at most {MAX_EVENTS} values, none negative")
    return seconds


def event(kind: str, item: Item) -> Event:
    if isinstance(item, str):
        return Event(kind, checkpoints=int(item.partition(":")[2]))
    return Event(kind, after=float(item))


def describe_items(items: list[Item]) -> str:
    return ", ".join(event("spot", i).describe() for i in items)


def parse(text: str | None, what: str = SPOT_ENV) -> list[Item]:
    """The items of ``text`` ("3,3", "checkpoint,checkpoint:2", "random:SEED:N[:MAX]", "" for none): seconds as
    floats, checkpoints as "checkpoint:N". ValueError says what is wrong."""
    text = (text or "").strip()
    if not text or text.lower() in ("0", "off", "none", "false"):
        return []
    if text.lower().startswith("random:"):
        parts = text.split(":")
        try:
            if len(parts) not in (3, 4):
                raise ValueError
            seed, n = int(parts[1]), int(parts[2])
            top = float(parts[3]) if len(parts) == 4 else RANDOM_MAX_DEFAULT
        except ValueError:
            raise ValueError(f"{what}={text!r}: the random mode is random:SEED:N or random:SEED:N:MAX "
                             "(integers SEED and N, MAX seconds)") from None
        if not 0 <= n <= MAX_EVENTS or top < 1:
            raise ValueError(f"{what}={text!r}: N must be 0 to {MAX_EVENTS} and MAX at least 1")
        rng = random.Random(seed)
        drawn: list[Item] = [round(rng.uniform(1.0, top), 1) for _ in range(n)]
        return drawn
    items = [_item(x, text, what) for x in text.split(",")]
    if len(items) > MAX_EVENTS:
        raise ValueError(f"{what}={text!r}: at most {MAX_EVENTS} values, none negative")
    return items


def rehearsal_state(request: dict[str, Any], spot: str | None, failures: str | None) -> dict[str, Any] | None:
    """What a training job's state keeps of the settings (None: nothing to rehearse). ``spot`` and ``failures``:
    the connection's settings, else the environment's. Raises ValueError for a malformed setting."""
    spot = spot if spot not in (None, "") else os.environ.get(SPOT_ENV)
    failures = failures if failures not in (None, "") else os.environ.get(FAILURES_ENV)
    out: dict[str, Any] = {}
    interruptions = parse(spot, SPOT_ENV)
    if interruptions and request.get("EnableManagedSpotTraining"):
        out.update(spot=interruptions, spot_setting=spot)
    elif interruptions:
        out["spot_ignored"] = spot
    crashes = parse(failures, FAILURES_ENV)
    if crashes:
        out.update(failures=crashes, failures_setting=failures)
    return out or None


def schedule(rehearsal: dict[str, Any] | None) -> list[Event]:
    """The tries' ends in order: the spot interruptions first, then the instance failures."""
    rehearsal = rehearsal or {}
    return ([event("spot", s) for s in rehearsal.get("spot") or []]
            + [event("failure", s) for s in rehearsal.get("failures") or []])


def capacity_wait() -> float:
    try:
        return max(0.0, float(os.environ.get(CAPACITY_WAIT_ENV, CAPACITY_WAIT_DEFAULT)))
    except ValueError:
        return CAPACITY_WAIT_DEFAULT


def retries_allowed(request: dict[str, Any]) -> int:
    """RetryStrategy.MaximumRetryAttempts (0 without one)."""
    return int((request.get("RetryStrategy") or {}).get("MaximumRetryAttempts") or 0)


def unbilled_seconds(transitions: list[dict[str, Any]], started: float) -> float:
    """Seconds of a job's life without instances: the capacity waits after interruptions (``Interrupted``) and
    the relaunches after them or after an internal failure (a ``Starting`` after the job's start)."""
    total = 0.0
    for t in transitions:
        if t["status"] in ("Interrupted", "Starting") and t["start"] >= started and t.get("end"):
            total += t["end"] - t["start"]
    return total
