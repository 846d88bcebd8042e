"""Where local jobs live: one directory per job, its request, its state, its hosts' loopback addresses.

Layout under the local root (``SMDIST_LOCAL_ROOT``, the ``smdist`` connection's ``local_root`` extra, or
``$AIRFLOW_HOME/smdist``)::

    <root>/<kind>/<job-name>/request.json     the Create*Job request, as submitted
                             state.json       status, secondary status, times, failure, metrics, pid
                             stop             exists once StopTrainingJob was asked
                             hosts/algo-N/    the /opt/ml tree of simulated host N
                             logs/algo-N.jsonl one JSON line per output line: {"t": epoch, "m": text}
                             supervisor.log   the supervisor's own log
    <root>/addresses.json                     loopback blocks in use (127.A.B.0/24 per job)

State survives the process that submitted the job, so a retried Airflow task in another process
describes, stops and reattaches to the same job.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

from airflow_smdist.backends.base import JOB_KINDS, TERMINAL_STATES, JobNotFound


def default_root() -> Path:
    env = os.environ.get("SMDIST_LOCAL_ROOT")
    if env:
        return Path(env)
    airflow_home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    return Path(airflow_home) / "smdist"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``path`` whole or not at all, readable by its owner only (0600: requests and hyperparameters
    may carry secrets)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def private_dir(path: Path, *, chmod: bool = False) -> Path:
    """Create ``path`` and its missing parents as directories only their owner can enter (0700); with
    ``chmod``, make an existing ``path`` private too (a directory of ours, never a user's)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for p in reversed(missing):
        p.mkdir(mode=0o700, exist_ok=True)
    if chmod:
        os.chmod(path, 0o700)
    return path


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


def read_jsonl(path: Path, offset: int = 0) -> tuple[list[Any], int]:
    """The records of the complete lines of a JSON-lines file from byte ``offset``, and the offset after
    them: a line still being written (no newline yet) waits for the next call. A missing file has none.
    Every JSON-lines file of a job (host logs, metrics, utilization) is read here."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    complete = data[: data.rfind(b"\n") + 1]
    records = []
    for raw in complete.splitlines():
        try:
            records.append(json.loads(raw))
        except ValueError:  # a line torn by a writer killed mid-write: skipped, never fatal
            continue
    return records, offset + len(complete)


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours is not alive
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    private_dir(path.parent)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class JobStore:
    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root else default_root()

    def job_dir(self, kind: str, name: str) -> Path:
        if kind not in JOB_KINDS:
            raise ValueError(f"unknown job kind {kind!r}")
        if not name or "/" in name or name.startswith("."):
            raise JobNotFound(kind, name)
        return self.root / kind / name

    def create(self, kind: str, name: str) -> Path:
        """Make the job's directory, private to this user (0700, in a 0700 kind directory); raises
        FileExistsError if the name is taken."""
        d = self.job_dir(kind, name)
        private_dir(d.parent, chmod=True)
        d.mkdir(mode=0o700)  # atomic: two submitters of one name cannot both win
        return d

    def exists(self, kind: str, name: str) -> bool:
        return (self.job_dir(kind, name) / "request.json").exists()

    def request(self, kind: str, name: str) -> dict:
        req = read_json(self.job_dir(kind, name) / "request.json")
        if req is None:
            raise JobNotFound(kind, name)
        return req

    def state(self, kind: str, name: str) -> dict:
        d = self.job_dir(kind, name)
        st = read_json(d / "state.json")
        if st is None:
            raise JobNotFound(kind, name)
        return st

    def list(self, kind: str) -> list[str]:
        base = self.root / kind
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if (p / "state.json").exists())

    # -- loopback addresses ----------------------------------------------------------------------
    def allocate_block(self, job_key: str) -> tuple[int, int]:
        """A 127.A.B.0/24 block of loopback addresses for one job's hosts, unique among running jobs.

        All of 127/8 is loopback on Linux, so host N of the job is reachable at 127.A.B.N and fixed ports
        (torchrun's 7777, a script's own) do not collide between hosts or between jobs that run at once.
        """
        path = self.root / "addresses.json"
        with locked(self.root / "addresses.lock"):
            table = read_json(path, {}) or {}
            # reclaim blocks of jobs that ended or whose supervisor died
            for block, owner in list(table.items()):
                kind, _, name = owner.partition("/")
                st = read_json(self.root / kind / name / "state.json", {}) or {}
                status = st.get("status")
                if status in TERMINAL_STATES or (status and not pid_alive(st.get("pid")) and st.get("pid")):
                    del table[block]
            for index in range(0, 254 * 256):
                a, b = 1 + index // 256, index % 256
                key = f"{a}.{b}"
                if key not in table:
                    table[key] = job_key
                    private_dir(self.root)
                    write_json_atomic(path, table)
                    return a, b
        raise RuntimeError("no free loopback block: more than 65,000 local jobs are running")

    def release_block(self, job_key: str) -> None:
        path = self.root / "addresses.json"
        with locked(self.root / "addresses.lock"):
            table = read_json(path, {}) or {}
            table = {k: v for k, v in table.items() if v != job_key}
            write_json_atomic(path, table)


def now() -> float:
    return time.time()
