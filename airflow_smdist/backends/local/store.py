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

A job appears whole or not at all. ``submit`` builds it in a private staging directory beside it
(``<root>/<kind>/.creating.<name>.<pid>.<random>``: its request, state, logs and the pid of its already started
supervisor) and renames that into place with ``renameat2(RENAME_NOREPLACE)``, which never replaces an existing
job, not even an empty directory (a plain rename would). A submitter killed before the rename leaves only a
staging directory: no job of that name exists (a retry creates it), listings skip it, its waiting supervisor
removes it when it sees its submitter gone (:func:`await_placement`), and any later submit of that kind
reclaims one whose creator is dead.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import errno
import fcntl
import json
import os
import shutil
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
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=1, sort_keys=True, default=str))
        os.replace(tmp, path)
    except BaseException:  # a full disk, most often: no half-written file is left to hold its space
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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


def this_process() -> dict[str, Any]:
    """This process as :func:`owner_alive` reads an owner: ``{"pid": ..., "create_time": ...}`` (psutil's)."""
    import psutil

    me = psutil.Process()
    return {"pid": me.pid, "create_time": me.create_time()}


def owner_alive(owner: dict[str, Any]) -> bool:
    """Whether the process recorded as ``{"pid": ..., "create_time": ...}`` (psutil's) still runs: the same
    process, not a later one given its pid, and not a zombie."""
    import psutil

    try:
        proc = psutil.Process(owner["pid"])
        return bool(abs(proc.create_time() - owner["create_time"]) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, KeyError, TypeError):
        return False


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


#: staging directories of jobs being made: ``.creating.<name>.<pid of the submitter>.<random>``
STAGING_PREFIX = ".creating."
#: a staging directory older than this is reclaimed even if its creator's pid is alive (a reused pid)
STAGING_MAX_AGE_SECONDS = 3600.0
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def _renameat2() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # a libc without it (glibc < 2.28, some musl)
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename the directory ``src`` to ``dst``, atomically, raising FileExistsError if ``dst`` exists in any
    form. Where the kernel or file system lacks RENAME_NOREPLACE, ``os.rename``: it still fails on a non-empty
    ``dst``, and every job directory this store places is non-empty."""
    fn = _renameat2()
    if fn is not None:
        if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise FileExistsError(err, os.strerror(err), str(dst)) if err == errno.EEXIST else \
                OSError(err, os.strerror(err), str(src))
    try:
        os.rename(src, dst)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise FileExistsError(e.errno, e.strerror, str(dst)) from None
        raise


def staging_creator(path: Path) -> int | None:
    """The pid of the process that made the staging directory ``path`` (None if the name is not one)."""
    if not path.name.startswith(STAGING_PREFIX):
        return None
    pid = path.name.rsplit(".", 2)[-2]
    return int(pid) if pid.isdigit() else None


def _staging_abandoned(path: Path) -> bool:
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return False
    return not pid_alive(staging_creator(path)) or age > STAGING_MAX_AGE_SECONDS


def await_placement(job_dir: Path, *, poll: float = 0.02) -> bool:
    """In a supervisor started by ``submit`` (the environment names its staging directory and submitter):
    wait until the job is in place at ``job_dir`` with this process as its supervisor (True), or until
    the submitter is gone without placing it (False: the staging directory is removed). A supervisor
    started otherwise returns True at once."""
    staging = os.environ.pop("SMDIST_JOB_STAGING", None)
    submitter = os.environ.pop("SMDIST_JOB_SUBMITTER", None)
    if not staging or not submitter:
        return True

    def placed() -> bool:
        try:
            return (job_dir / "supervisor.pid").read_text().split()[0] == str(os.getpid())
        except (FileNotFoundError, IndexError):
            return False

    while not placed():
        if not os.path.exists(staging):  # renamed just now (then placed), or discarded by the submitter
            return placed()
        if os.getppid() != int(submitter):  # it died (we were re-parented): no rename can come any more
            if placed():
                return True
            shutil.rmtree(staging, ignore_errors=True)
            return False
        time.sleep(poll)
    return True


class JobStore:
    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root else default_root()

    def job_dir(self, kind: str, name: str) -> Path:
        if kind not in JOB_KINDS:
            raise ValueError(f"unknown job kind {kind!r}")
        if not name or "/" in name or name.startswith("."):
            raise JobNotFound(kind, name)
        return self.root / kind / name

    def stage(self, kind: str, name: str) -> Path:
        """A new private staging directory for the job ``name`` (0700, in a 0700 kind directory), after
        reclaiming those of this kind whose submitter died."""
        base = self.job_dir(kind, name).parent
        private_dir(base, chmod=True)
        self.reclaim_staging(kind)
        d = base / f"{STAGING_PREFIX}{name}.{os.getpid()}.{os.urandom(4).hex()}"
        d.mkdir(mode=0o700)
        return d

    def place(self, kind: str, name: str, staged: Path) -> Path:
        """Move the staged job into place as ``name``, atomically; FileExistsError if the name is taken."""
        d = self.job_dir(kind, name)
        rename_noreplace(staged, d)
        return d

    def staging_dirs(self, kind: str, name: str = "") -> list[Path]:
        base = self.root / kind  # job names have no dots: ".creating.<name>." names that job's only
        return sorted(base.glob(f"{STAGING_PREFIX}{name}.*" if name else f"{STAGING_PREFIX}*")) if base.is_dir() else []

    def reclaim_staging(self, kind: str) -> list[Path]:
        """Remove the staging directories of ``kind`` whose submitter is gone; the ones removed."""
        gone = [d for d in self.staging_dirs(kind) if _staging_abandoned(d)]
        for d in gone:
            shutil.rmtree(d, ignore_errors=True)
        return gone

    def taken(self, kind: str, name: str) -> bool:
        """Whether a job (or anything) of that name is in place."""
        return os.path.lexists(self.job_dir(kind, name))

    def exists(self, kind: str, name: str) -> bool:
        return (self.job_dir(kind, name) / "request.json").exists()

    def request(self, kind: str, name: str) -> dict[str, Any]:
        req: dict[str, Any] | None = read_json(self.job_dir(kind, name) / "request.json")
        if req is None:
            raise JobNotFound(kind, name)
        return req

    def state(self, kind: str, name: str) -> dict[str, Any]:
        d = self.job_dir(kind, name)
        st: dict[str, Any] | None = read_json(d / "state.json")
        if st is None:
            raise JobNotFound(kind, name)
        return st

    def list(self, kind: str) -> list[str]:
        base = self.root / kind
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if not p.name.startswith(".") and (p / "state.json").exists())

    # -- loopback addresses ----------------------------------------------------------------------
    def allocate_block(self, job_key: str) -> tuple[int, int]:
        """A 127.A.B.0/24 block of loopback addresses for one job's hosts, unique among running jobs.

        All of 127/8 is loopback on Linux, so host N of the job is reachable at 127.A.B.N and fixed ports
        (torchrun's 7777, a script's own) do not collide between hosts or between jobs that run at once.
        """
        path = self.root / "addresses.json"
        with locked(self.root / "addresses.lock"):
            table = read_json(path, {}) or {}
            for block, owner in list(table.items()):
                if self._block_free(owner):
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

    def _block_free(self, owner: str) -> bool:
        """Whether the job ``owner`` (kind/name) no longer needs its block: it ended, or it was never placed
        and is no longer being made (the staging directory is looked at first: a rename in between
        then shows the placed job)."""
        kind, _, name = owner.partition("/")
        if kind not in JOB_KINDS:
            return True
        if self.staging_dirs(kind, name):
            return False
        st = read_json(self.root / kind / name / "state.json", {}) or {}
        return not st or st.get("status") in TERMINAL_STATES

    def release_block(self, job_key: str, block: tuple[int, int] | builtins.list[int] | None = None) -> None:
        """Free the blocks of ``job_key`` (only ``block`` when given: two submitters of one name each hold
        one until the name is settled)."""
        path = self.root / "addresses.json"
        with locked(self.root / "addresses.lock"):
            table = read_json(path, {}) or {}
            only = f"{block[0]}.{block[1]}" if block else None
            table = {k: v for k, v in table.items() if v != job_key or (only is not None and k != only)}
            write_json_atomic(path, table)


def now() -> float:
    return time.time()
