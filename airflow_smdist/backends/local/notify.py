"""Waking a blocking wait the moment a local job changes: Linux inotify on the jobs' directories (a supervisor
writes ``state.json`` by renaming a new file over it) and pidfds of their supervisors (one that dies without
a last state). :class:`ChangeWaker` is a context manager whose :meth:`~ChangeWaker.wait` returns when any
of them fires or after ``timeout``; where the kernel or the file system gives neither (another OS, a
directory on a network file system whose writer is another machine), it returns after ``timeout`` as a
plain sleep does, so a caller keeps checking the state itself and inotify only makes it see a change at
once instead of at its next check. (So does a machine out of inotify instances: ``fs.inotify.
max_user_instances``, 128 by default, shared by every process of the user.)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import time
from pathlib import Path

#: a file was renamed into the directory (``write_json_atomic``), or a file opened for writing was closed
IN_MOVED_TO = 0x00000080
IN_CLOSE_WRITE = 0x00000008

_libc: ctypes.CDLL | None = None


def _inotify() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(None, use_errno=True)  # this process's own symbols: libc's
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        except (OSError, AttributeError):
            return None
        _libc = lib
    return _libc


class ChangeWaker:
    """Wakes on a change in any of ``dirs`` (a file renamed into one, or closed after writing) or the exit of
    any of ``pids``."""

    def __init__(self, dirs: list[Path], pids: list[int]) -> None:
        self.fds: list[int] = []
        self.inotify: int | None = None
        lib = _inotify()
        if lib is not None:
            fd = lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd >= 0:
                self.inotify = fd
                self.fds.append(fd)
                for d in dirs:  # a directory gone or not made yet: its state is read by the caller anyway
                    lib.inotify_add_watch(fd, os.fsencode(d), IN_MOVED_TO | IN_CLOSE_WRITE)
        for pid in pids:
            with contextlib.suppress(OSError, AttributeError):  # gone already, or no pidfd_open here
                self.fds.append(os.pidfd_open(pid))
        self.poller = select.poll()  # not select(): a task's process may hold descriptors past FD_SETSIZE
        for fd in self.fds:
            self.poller.register(fd, select.POLLIN)

    def wait(self, timeout: float) -> bool:
        """Until something fired (True) or ``timeout`` seconds passed (False). Reads the inotify events, so
        the next wait waits for the next change."""
        if not self.fds:
            if timeout > 0:
                time.sleep(timeout)
            return False
        ready = {fd for fd, _event in self.poller.poll(max(0.0, timeout) * 1000)}
        if self.inotify is not None and self.inotify in ready:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                while os.read(self.inotify, 65536):
                    pass
        return bool(ready)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []

    def __enter__(self) -> ChangeWaker:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
