"""What the supervisor reads from and writes into a host's directory, without leaving it (issue 34, hole 1).

The supervisor runs as root with the worker's environment; a host's ``/opt/ml`` is written by the job's own code,
which may plant symbolic links there (``checkpoints/x -> /proc/self/environ``, ``model -> /home/worker``,
``output/failure -> /etc/cron.d/x``). Everything here is opened relative to a directory the supervisor made (the
host's directory), and no path resolution ever leaves it:

- ``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``: links that stay inside the host's directory are
  followed (SageMaker uploads what a path resolves to inside the container), absolute links, ``..`` above the
  directory and ``/proc`` magic links fail with EXDEV/ELOOP;
- where the kernel has no ``openat2`` (ENOSYS, before Linux 5.6), a walk one component at a time with
  ``O_NOFOLLOW``, each link read with ``readlinkat`` and resolved by hand, refused when it leaves.

Writes never go through a link: the last component is opened ``O_NOFOLLOW | O_CREAT`` and missing parents are made
with ``mkdirat`` below an fd that was itself opened without leaving the directory.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Union

StrPath = Union[str, "os.PathLike[str]"]

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
SYS_OPENAT2 = 437  # the same number on every architecture (the unified syscall table, Linux 5.6)
#: links followed in one resolution at most, as the kernel's MAXSYMLINKS
MAX_LINKS = 40


class LeavesHost(OSError):
    """A path that resolves outside the host's directory (or through a /proc magic link)."""

    def __init__(self, rel: str) -> None:
        super().__init__(errno.EXDEV, "a link out of the host", rel)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc: Any = None
_openat2_missing = bool(os.environ.get("SMDIST_HOSTFS_NO_OPENAT2"))  # tests: the fallback walk


def _syscall() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc.syscall


def _openat2(dirfd: int, rel: str, flags: int, mode: int) -> int | None:
    """``openat2`` beneath ``dirfd``; None where the kernel (or a seccomp filter) has none."""
    global _openat2_missing
    if _openat2_missing:
        return None
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    fd = _syscall()(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd), ctypes.c_char_p(os.fsencode(rel)),
                    ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        return int(fd)
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM) and not _probe_openat2():
        _openat2_missing = True
        return None
    if err == errno.EXDEV or (err == errno.ELOOP and not flags & os.O_NOFOLLOW):
        raise LeavesHost(rel)
    raise OSError(err, os.strerror(err), rel)


def _probe_openat2() -> bool:
    """Whether openat2 works at all here (EPERM from a seccomp filter reads like a refusal otherwise)."""
    how = _OpenHow(os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0, RESOLVE_BENEATH)
    fd = _syscall()(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(-100), ctypes.c_char_p(b"."), ctypes.byref(how),
                    ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        os.close(fd)
        return True
    return False


def _parts(rel: str) -> list[str]:
    if rel.startswith("/"):
        raise LeavesHost(rel)
    return [p for p in rel.split("/") if p not in ("", ".")]


def _walk_open(dirfd: int, rel: str, flags: int, mode: int) -> int:
    """The fallback: one component at a time below ``dirfd``, no component followed by the kernel; a link is
    read and resolved by hand against the components already walked, refused when it leaves."""
    todo = _parts(rel)
    done: list[str] = []
    links = 0
    fds = [os.dup(dirfd)]
    try:
        while todo:
            name = todo.pop(0)
            if name == "..":
                if not done:
                    raise LeavesHost(rel)
                done.pop()
                os.close(fds.pop())
                continue
            last = not todo
            want = (flags | os.O_NOFOLLOW) if last else (os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                fd = os.open(name, want | os.O_CLOEXEC, mode, dir_fd=fds[-1])
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR) or not _is_link(fds[-1], name):
                    raise
                if last and flags & os.O_NOFOLLOW:
                    raise
                links += 1
                target = os.readlink(name, dir_fd=fds[-1])
                if links > MAX_LINKS or target.startswith("/"):
                    raise LeavesHost(rel) from None
                todo = _parts(target) + todo
                continue
            if last:
                return fd
            fds.append(fd)
            done.append(name)
        return os.dup(fds[-1])  # "" or ".": the directory itself
    finally:
        for fd in fds:
            os.close(fd)


def _is_link(dirfd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_at(dirfd: int, rel: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """An fd of ``rel`` opened below the directory ``dirfd`` without leaving it (:class:`LeavesHost` otherwise)."""
    if not _parts(rel):
        rel = "."
    fd = _openat2(dirfd, rel, flags, mode)
    return fd if fd is not None else _walk_open(dirfd, rel, flags, mode)


def open_beneath(root: StrPath, rel: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """An fd of ``root/rel`` resolved without leaving ``root`` (a directory the supervisor made)."""
    rootfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_at(rootfd, rel, flags, mode)
    finally:
        os.close(rootfd)


def open_file(root: StrPath, rel: str) -> BinaryIO | None:
    """``root/rel`` open for reading if it is a regular file inside ``root``; None if it is missing, not a
    regular file, or a link out of the host."""
    try:
        fd = open_beneath(root, rel, os.O_RDONLY | os.O_NONBLOCK)  # (a FIFO the job made must not block us)
    except (FileNotFoundError, NotADirectoryError, LeavesHost, PermissionError):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_text(root: StrPath, rel: str, limit: int = 1 << 20) -> str | None:
    """The first ``limit`` bytes of ``root/rel`` as text (see :func:`open_file`), None if it cannot be read."""
    f = open_file(root, rel)
    if f is None:
        return None
    with f:
        return f.read(limit).decode("utf-8", "replace")


def write_text(root: StrPath, rel: str, text: str) -> None:
    """Write ``root/rel`` (made with its parents if missing) never through a link the job made: a link as the
    last component or as a parent raises :class:`LeavesHost` (or ELOOP) instead of writing elsewhere."""
    with create(root, rel) as f:
        f.write(text.encode())


def create(root: StrPath, rel: str) -> BinaryIO:
    """``root/rel`` created (or truncated) for writing, with its missing parents, never through a link."""
    parts = _parts(rel)
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "a directory", rel)
    rootfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dirfd = os.dup(rootfd)
        for name in parts[:-1]:
            try:
                os.mkdir(name, 0o755, dir_fd=dirfd)  # mkdirat never follows a link in its last component
            except FileExistsError:
                pass
            try:
                nxt = open_at(dirfd, name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            finally:
                os.close(dirfd)
            dirfd = nxt
        try:
            fd = open_at(dirfd, parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK)
        finally:
            os.close(dirfd)
    finally:
        os.close(rootfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LeavesHost(rel)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "wb")


def walk(root: StrPath, sub: str = "", *,
         say: Callable[[str], None] | None = None) -> Iterator[tuple[str, BinaryIO, os.stat_result]]:
    """Every regular file below ``root/sub`` as (path relative to ``root/sub``, open file, its stat), sorted;
    links that stay inside ``root`` are followed (not into a directory's own ancestors), links that leave are
    skipped with a line to ``say``. The file is closed when the next one is yielded. Each entry is resolved from
    ``root`` by its whole path, so a link may lead anywhere inside the host's directory but nowhere else."""
    rootfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield from _walk_dir(rootfd, "/".join(_parts(sub)), "", say, set())
    finally:
        os.close(rootfd)


def _key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _walk_dir(rootfd: int, path: str, prefix: str, say: Callable[[str], None] | None,
              ancestors: set[tuple[int, int]]) -> Iterator[tuple[str, BinaryIO, os.stat_result]]:
    """The files below the directory ``path`` (relative to the root); ``prefix``: its path relative to the walk's."""
    try:
        dirfd = open_at(rootfd, path, os.O_RDONLY | os.O_DIRECTORY)
    except LeavesHost:
        if say:
            say(f"skipped {path}: a link out of the host")
        return
    except OSError:  # missing, not a directory, gone meanwhile
        return
    try:
        st = os.fstat(dirfd)
        if _key(st) in ancestors:  # a link to one of its own ancestors: it would loop
            return
        names = sorted(os.listdir(dirfd))
    finally:
        os.close(dirfd)
    for name in names:
        full = f"{path}/{name}" if path else name
        try:
            fd = open_at(rootfd, full, os.O_RDONLY | os.O_NONBLOCK)
        except LeavesHost:
            if say:
                say(f"skipped {full}: a link out of the host")
            continue
        except OSError:  # gone meanwhile, a dangling link, a socket, no permission: not an object
            continue
        fst = os.fstat(fd)
        if stat.S_ISDIR(fst.st_mode):
            os.close(fd)
            yield from _walk_dir(rootfd, full, f"{prefix}{name}/", say, ancestors | {_key(st)})
        elif stat.S_ISREG(fst.st_mode):
            os.set_blocking(fd, True)
            f = os.fdopen(fd, "rb")
            try:
                yield f"{prefix}{name}", f, fst
            finally:
                f.close()
        else:
            os.close(fd)


def is_dir(root: StrPath, rel: str) -> bool:
    """Whether ``root/rel`` is a directory inside ``root``."""
    try:
        os.close(open_beneath(root, rel, os.O_RDONLY | os.O_DIRECTORY))
        return True
    except OSError:
        return False


def exists(root: StrPath, rel: str) -> bool:
    return is_dir(root, rel) or open_file(root, rel) is not None


__all__ = ["LeavesHost", "exists", "is_dir", "open_at", "open_beneath", "open_file", "read_text", "walk", "create",
           "write_text"]
