"""The init process of one simulated host: ``python -I -S hostinit.py '<spec json>'``.

A SageMaker instance runs the training container; the container ends when its entry point ends, taking
every process it started with it (daemons included), and nothing of it outlives the job. This program
gives a simulated host the same lifetime. It uses the standard library only and runs isolated (``-I -S``),
so nothing of the Airflow worker (its ``PYTHONPATH``, its packages) reaches the host through it.

* ``isolation: "namespace"``: it is started by ``unshare --mount --uts --net --pid --ipc --fork`` and is
  PID 1 of the host's PID namespace. It binds the host's directory on ``/opt/ml``, mounts a private
  ``/tmp`` and ``/proc``, binds the job's ``hosts`` file on ``/etc/hosts``, sets the host name (``algo-N``),
  tells the supervisor it is ready (the supervisor then plugs the host into the job's bridge) and waits
  for the go. When it exits, the kernel ends every other process of the namespace.
* ``isolation: "none"`` (the fallback): it makes itself the child subreaper, so processes that
  double-fork or ``setsid`` stay its descendants, and ends them all when the entry point ends.

Either way it runs the entry point with ``execve`` semantics (no shell: environment names with ``-`` or
``.`` such as ``SM_HP_LEARNING-RATE`` survive), forwards SIGTERM/SIGINT to every process of the host, and
ends the host when the *lifeline* pipe from the supervisor closes (the supervisor died, even by kill -9).
It exits with the entry point's status (128 + N when a signal N ended it).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import time

_PR_SET_CHILD_SUBREAPER = 36
_MS_BIND, _MS_REC, _MS_NOSUID, _MS_NODEV = 4096, 16384, 2, 4
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def setup_namespace(spec: dict) -> None:
    """Mounts and host name inside fresh mount, UTS and PID namespaces (we are PID 1 there)."""
    _mount(spec["host_dir"], "/opt/ml", None, _MS_BIND | _MS_REC)
    # paths the host needs that live under /tmp (the job directory, the interpreter) stay visible
    kept = {p: os.open(p, os.O_PATH) for p in sorted(set(spec.get("keep") or []))
            if (p + "/").startswith("/tmp/") and os.path.isdir(p)}
    _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    for path, fd in kept.items():
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        os.close(fd)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV)
    if spec.get("etc_hosts"):
        _mount(spec["etc_hosts"], "/etc/hosts", None, _MS_BIND)
    name = spec["hostname"].encode()
    if _libc.sethostname(name, len(name)) != 0:  # socket.sethostname's call, without importing socket
        err = ctypes.get_errno()
        raise OSError(err, f"sethostname {spec['hostname']}: {os.strerror(err)}")


def descendants() -> list[int]:
    """Every live process below this one (orphans reparent to us: PID 1 or child subreaper)."""
    me = os.getpid()
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parent[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {me}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in found}
        found |= frontier
    return sorted(found)


def signal_all(sig: int) -> None:
    for pid in descendants():
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def reap(main_pid: int) -> int | None:
    """Reap every exited child; the entry point's wait status once it has exited."""
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == main_pid:
            status = st


def exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def end_host(code: int) -> None:
    """The container stops: whatever the entry point left behind is killed, as Docker does."""
    signal_all(signal.SIGKILL)
    deadline = time.time() + 5
    while descendants() and time.time() < deadline:
        reap(-1)
        time.sleep(0.01)
    sys.stdout.flush()
    os._exit(code)


def wait_for_go(lifeline: int) -> None:
    if os.read(lifeline, 1) != b"g":  # the supervisor went away before the host was ready
        os._exit(125)


def main() -> None:
    spec = json.loads(sys.argv[1])
    lifeline, ready = spec["lifeline"], spec.get("ready")
    os.set_inheritable(lifeline, False)
    if spec["isolation"] == "namespace":
        setup_namespace(spec)
    else:
        _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if ready is not None:
        os.write(ready, b"r")
        os.close(ready)
    import subprocess  # while the supervisor plugs the host in: not before the host is ready

    wait_for_go(lifeline)
    terminated = []

    def forward(signum, _frame):
        terminated.append(signum)
        signal_all(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        main_proc = subprocess.Popen(spec["argv"], cwd=spec["cwd"], stdin=subprocess.DEVNULL)
    except OSError as e:
        print(f"hostinit: cannot run {spec['argv'][0]!r}: {e}", flush=True)
        os._exit(127 if isinstance(e, FileNotFoundError) else 126)
    watch(main_proc.pid, lifeline)


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (readable once it exits), or None where the kernel has none (Linux < 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def watch(main_pid: int, lifeline: int) -> None:
    """Reap children until the entry point exits (woken at once by its pidfd; orphans are reaped at least every
    50 ms), or until the supervisor's end of the lifeline closes; then end the host."""
    poller = select.poll()
    poller.register(lifeline, select.POLLIN | select.POLLHUP)
    exited = _pidfd(main_pid)
    if exited is not None:
        poller.register(exited, select.POLLIN)
    while True:
        status = reap(main_pid)
        if status is not None:
            end_host(exit_code(status))
        ready = {fd for fd, _event in poller.poll(50)}
        if lifeline in ready and not os.read(lifeline, 1):  # the supervisor is gone: so is this host
            end_host(137)


if __name__ == "__main__":
    main()
