"""Start and end the process trees of simulated hosts.

Each simulated host is one process tree. Where the OS allows it (root, or unprivileged user namespaces),
the host runs in its own mount namespace with its job directory bound on ``/opt/ml``, so scripts that
hard-code ``/opt/ml/...`` work unchanged and hosts never see each other's files. Where it does not, the
host runs with its directory relocated (``SAGEMAKER_BASE_DIR`` and every SM_* path point into it) and the
job's log says so.

Ending a host ends every process it started: the tree is found through /proc (descendants and members
of the host's session), so ranks that torchrun or a script spawned are not left running.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time
from functools import lru_cache

OPT_ML = "/opt/ml"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


@lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...] | None:
    """The ``unshare`` prefix that gives a process a private mount namespace, or None if unavailable."""
    if os.environ.get("SMDIST_LOCAL_ISOLATION", "auto") == "none":
        return None
    unshare = shutil.which("unshare")
    if not unshare:
        return None
    try:
        os.makedirs(OPT_ML, exist_ok=True)
    except OSError:
        pass
    if not os.path.isdir(OPT_ML):
        return None
    candidates = [(unshare, "--mount", "--propagation", "private")]
    if os.geteuid() != 0:
        candidates = [(unshare, "--map-root-user", "--mount", "--propagation", "private")]
    with tempfile.TemporaryDirectory() as probe_dir:
        open(os.path.join(probe_dir, ".smdist-probe"), "w").close()
        for prefix in candidates:
            try:
                r = subprocess.run([*prefix, "/bin/sh", "-c", 'mount --bind "$1" /opt/ml && test -e /opt/ml/.smdist-probe',
                                    "sh", probe_dir], capture_output=True, timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if r.returncode == 0:
                return tuple(prefix)
    return None


def isolation_mode() -> str:
    mode = os.environ.get("SMDIST_LOCAL_ISOLATION", "auto")
    if mode not in ("auto", "namespace", "none"):
        raise ValueError(f"SMDIST_LOCAL_ISOLATION={mode!r}: use auto, namespace or none")
    if mode == "none":
        return "none"
    available = namespace_prefix() is not None
    if mode == "namespace" and not available:
        raise RuntimeError("SMDIST_LOCAL_ISOLATION=namespace but this OS does not allow a private mount namespace "
                           "(needs root or unprivileged user namespaces, util-linux unshare, and /opt/ml)")
    return "namespace" if available else "none"


def wrap_in_namespace(cmd: list[str], host_dir: str, cwd_inside: str) -> list[str]:
    """``cmd`` run with ``host_dir`` bound on /opt/ml in a private mount namespace, from ``cwd_inside``."""
    prefix = namespace_prefix()
    assert prefix is not None
    script = 'mount --bind "$1" /opt/ml || exit 97; cd "$2" || exit 97; shift 2; exec "$@"'
    return [*prefix, "/bin/sh", "-c", script, "sh", host_dir, cwd_inside, *cmd]


def spawn(cmd: list[str], *, env: dict, cwd: str, stdout) -> subprocess.Popen:
    """Start a host's process tree in its own session, dying with the supervisor."""
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=stdout, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, session id) for every live process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        table[int(entry)] = (int(fields[1]), int(fields[3]))
    return table


def tree(root_pid: int) -> list[int]:
    """``root_pid`` and every live process descended from it or in its session."""
    table = _proc_table()
    found = {p for p, (_pp, sid) in table.items() if sid == root_pid}
    if root_pid in table:
        found.add(root_pid)
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _sid) in table.items():
            if ppid in found and pid not in found:
                found.add(pid)
                changed = True
    return sorted(found)


def signal_tree(root_pid: int, sig: int) -> list[int]:
    pids = tree(root_pid)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    return pids


def end_tree(root_pid: int, grace: float, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM the tree, then SIGKILL whatever is left after ``grace`` seconds (SageMaker: 120 s)."""
    signal_tree(root_pid, signal.SIGTERM)
    deadline = time.time() + grace
    while time.time() < deadline:
        if proc is not None:
            proc.poll()
        if not tree(root_pid):
            return
        time.sleep(0.1)
    signal_tree(root_pid, signal.SIGKILL)
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
