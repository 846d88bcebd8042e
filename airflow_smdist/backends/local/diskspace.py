"""A full disk under the local backend, said as what it is: which disk, how full, and what filled it.

A job's supervisor keeps a small reserve file in the job's directory (:data:`RESERVE_NAME`, made by ``submit``):
when one of its writes fails with ENOSPC it deletes the reserve (:func:`release_reserve`), so the job's final
state can still be written, with a FailureReason that names the disk (:func:`full_message`). The runtime cache
says the same of its own disk instead of "does not install on this machine".
"""

from __future__ import annotations

import errno
import heapq
import os
import re
import stat
import time
from pathlib import Path

#: the reserve file of a job directory: room for the final state.json (and a few log lines) once the disk is full
RESERVE_NAME = ".state.reserve"
RESERVE_BYTES = 256 * 1024
#: what names the job root, in the message of a full one
JOB_ROOT_SETTING = "the smdist connection's local_root extra, or SMDIST_LOCAL_ROOT"
#: the bound on the walk for the biggest entries (a job root holds runtimes and many jobs)
WALK_MAX_ENTRIES = 200_000
WALK_MAX_SECONDS = 5.0
MIB = 1024 * 1024
#: below this much free space a disk looks full: a failure that says "No space left on device" is put down to it
LOW_SPACE_BYTES = MIB
#: how uv, pip and Python say the disk is full in their output
_FULL_TEXT = re.compile(r"No space left on device|os error 28|Errno 28|ENOSPC|Disk quota exceeded", re.IGNORECASE)


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a write that failed for want of space (ENOSPC, or EDQUOT: a quota is as full)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def says_disk_full(output: str) -> bool:
    """Whether a tool's output (uv's, pip's, a traceback) says a write failed for want of space."""
    return bool(_FULL_TEXT.search(output or ""))


def make_reserve(job_dir: str | os.PathLike[str], size: int = RESERVE_BYTES) -> Path:
    """The reserve file of ``job_dir``, its blocks allocated (written, not sparse: a sparse file frees nothing;
    a file system that allocates late still counts written blocks as used at once)."""
    path = Path(job_dir) / RESERVE_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        block = b"\0" * 65536
        left = size
        while left > 0:
            left -= os.write(fd, block[: min(left, len(block))])
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return path


def release_reserve(job_dir: str | os.PathLike[str]) -> bool:
    """Delete the reserve of ``job_dir``; whether there was one to free."""
    try:
        os.unlink(Path(job_dir) / RESERVE_NAME)
    except FileNotFoundError:
        return False
    return True


def _unescape(field: str) -> str:
    """A path as /proc/self/mountinfo writes it (spaces, tabs, newlines, backslashes as octal escapes)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def file_system(path: str | os.PathLike[str]) -> tuple[str, str]:
    """(mount point, file system type) of the mount that holds ``path`` ("?" for the type where
    /proc/self/mountinfo cannot be read)."""
    target = os.path.realpath(path)
    best, kind = "/", "?"
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return best, kind
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or not rest:
            continue
        mount = _unescape(fields[4])
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):  # the last of equal ones: mounted over the others
            best, kind = mount, rest[0]
    return best, kind


def usage(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(bytes free to this user, bytes in all) of the file system that holds ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def looks_full(path: str | os.PathLike[str]) -> bool:
    """Whether the file system of ``path`` has less than :data:`LOW_SPACE_BYTES` free (False where unknown)."""
    try:
        return usage(path)[0] < LOW_SPACE_BYTES
    except OSError:
        return False


def _size(st: os.stat_result) -> int:
    """What an entry takes on its disk (allocated blocks; its length where the file system has no blocks)."""
    return st.st_blocks * 512 if getattr(st, "st_blocks", None) is not None else st.st_size


def biggest_entries(root: str | os.PathLike[str], n: int = 3, *, max_entries: int = WALK_MAX_ENTRIES,
                    max_seconds: float = WALK_MAX_SECONDS) -> list[tuple[str, int]]:
    """The ``n`` biggest files under ``root`` (path, bytes on disk), biggest first, jobs' reserves left out;
    links are not followed and other mounts not entered. Bounded: a walk that would take longer looks at what it
    saw by then."""
    root = os.fspath(root)
    try:
        device = os.lstat(root).st_dev
    except OSError:
        return []
    deadline = time.monotonic() + max_seconds
    seen = 0
    heap: list[tuple[int, str]] = []
    stack = [root]
    while stack and seen < max_entries and time.monotonic() < deadline:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    seen += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        if st.st_dev == device:
                            stack.append(entry.path)
                    elif stat.S_ISREG(st.st_mode) and entry.name != RESERVE_NAME:  # ours: not what filled it
                        item = (_size(st), entry.path)
                        if len(heap) < n:
                            heapq.heappush(heap, item)
                        elif item > heap[0]:
                            heapq.heapreplace(heap, item)
        except OSError:  # a directory removed meanwhile, or unreadable
            continue
    return [(path, size) for size, path in sorted(heap, reverse=True)]


def human(size: int) -> str:
    """Bytes as a short size: 812 KiB, 7.5 MiB, 2.1 GiB."""
    for unit, scale in (("GiB", 1024 ** 3), ("MiB", MIB), ("KiB", 1024)):
        if size >= scale:
            value = size / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{size} B"


def describe_disk(path: str | os.PathLike[str]) -> str:
    """``<path> (<fs type>, N MiB free of M MiB)``."""
    _mount, kind = file_system(path)
    try:
        free, total = usage(path)
    except OSError:
        return f"{path} ({kind})"
    return f"{path} ({kind}, {free // MIB} MiB free of {total // MIB} MiB)"


def full_statement(path: str | os.PathLike[str], what: str = "the job root") -> str:
    """``No space left on device: <what> <path> (<fs>, N MiB free of M MiB) is full; the biggest entries: ...``"""
    biggest = biggest_entries(path)
    entries = "; the biggest entries: " + ", ".join(f"{p} ({human(s)})" for p, s in biggest) if biggest else ""
    return f"No space left on device: {what} {describe_disk(path)} is full{entries}."


def full_message(path: str | os.PathLike[str], what: str = "the job root", setting: str = JOB_ROOT_SETTING) -> str:
    """The reason of a failure for want of space at ``path``: which disk, how full, its biggest entries, the fix."""
    return f"{full_statement(path, what)} Fix: free space or set {what} elsewhere ({setting})."


def full_line(output: str) -> str:
    """The line of a tool's output that says the disk is full (its last such line), else ""."""
    lines = [ln.strip() for ln in (output or "").splitlines() if _FULL_TEXT.search(ln)]
    return lines[-1] if lines else ""
