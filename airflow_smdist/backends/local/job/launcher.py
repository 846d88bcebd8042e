"""Start and end simulated hosts, and build the environment each host process gets.

A simulated host is one process tree under :mod:`..inhost.hostinit`, its init process. Where the OS allows it
(root, util-linux ``unshare``, iproute2's ``ip``, ``/opt/ml``), the host is a small container made of Linux
namespaces: mount (its directory on ``/opt/ml``, a private ``/tmp``, the job's ``/etc/hosts``), UTS (host
name ``algo-N``), network (its own ``eth0`` on the job's bridge, see :mod:`.hostnet`), IPC and PID (the
host ends when its entry point ends, taking every process with it). Elsewhere (``SMDIST_LOCAL_ISOLATION=
none``, or a non-root worker) hosts share the machine's network and ``/tmp``, are named by loopback
addresses (127.A.B.N), and hostinit, as child subreaper, still ends every process of the host when its
entry point ends; the job's log names each difference.

Either way the supervisor holds a *lifeline* pipe to each hostinit: when the supervisor dies, even by
kill -9, every host ends (README: "What the local backend gives a script").
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

OPT_ML = "/opt/ml"
HOSTINIT = str(Path(__file__).resolve().parents[1] / "inhost" / "hostinit.py")
UNSHARE_FLAGS = ("--mount", "--uts", "--net", "--pid", "--ipc", "--fork", "--propagation", "private", "--kill-child")
#: what a host process keeps of the supervisor's environment (besides the contract and the request's own)
PASSTHROUGH = ("PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "JAVA_HOME")
#: why fallback hosts differ from SageMaker instances, one line each in the job's log
FALLBACK_DIFFERENCES = (
    ("hosts share this machine's network stack: a port bound by one host (also on 0.0.0.0) is taken for all; "
     "bind SM_CURRENT_HOST's address, not 0.0.0.0"),
    "hosts share /tmp",
    ("host names are loopback addresses (SM_HOSTS, SM_CURRENT_HOST, resourceconfig.json), not algo-N, and "
     "socket.gethostname() is this machine's name"),
    "hard-coded /opt/ml paths do not resolve: scripts must read SAGEMAKER_BASE_DIR and the SM_* paths",
    "EnableNetworkIsolation is not enforced",
    ("the job's code reaches what the worker's user reaches (its files, other jobs of that user, AIRFLOW_HOME): "
     "hosts have no root file system of their own"),
)


@lru_cache(maxsize=1)
def namespaces_available() -> str | None:
    """None when hosts can be namespaced here, else why not."""
    if os.geteuid() != 0:
        return "the worker is not root (the per-job bridge and veth pairs need CAP_NET_ADMIN)"
    unshare = shutil.which("unshare")
    if not unshare:
        return "util-linux unshare is not installed"
    from airflow_smdist.backends.local.job.hostnet import ip_path

    if ip_path() is None:
        return "iproute2's ip is not installed (apt-get install iproute2)"
    try:
        os.makedirs(OPT_ML, exist_ok=True)
    except OSError as e:
        return f"{OPT_ML} cannot be created: {e}"
    try:
        r = subprocess.run([unshare, *UNSHARE_FLAGS, "--", "true"], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare failed: {e}"
    if r.returncode != 0:
        return f"unshare {' '.join(UNSHARE_FLAGS)} failed: {r.stderr.decode(errors='replace').strip()}"
    return None


def namespace_prefix() -> tuple[str, ...] | None:
    """The ``unshare`` prefix that starts a host in its own namespaces, or None where unavailable."""
    if os.environ.get("SMDIST_LOCAL_ISOLATION", "auto") == "none" or namespaces_available() is not None:
        return None
    return unshare_prefix()


def unshare_prefix() -> tuple[str, ...]:
    """The ``unshare`` command line of a namespaced host, unchecked: a job's supervisor starts hosts in the
    isolation its submitter chose (``isolation_mode``, which probed the machine with ``unshare``)."""
    return (shutil.which("unshare") or "unshare", *UNSHARE_FLAGS, "--")


def isolation_mode() -> str:
    mode = os.environ.get("SMDIST_LOCAL_ISOLATION", "auto")
    if mode not in ("auto", "namespace", "none"):
        raise ValueError(f"SMDIST_LOCAL_ISOLATION={mode!r}: use auto, namespace or none")
    if mode == "none":
        return "none"
    why = namespaces_available()
    if mode == "namespace" and why:
        raise RuntimeError(f"SMDIST_LOCAL_ISOLATION=namespace but hosts cannot be namespaced here: {why}")
    return "none" if why else "namespace"


def package_root() -> str:
    """The directory holding ``airflow_smdist``: on PYTHONPATH of the project's own modules run in a host
    (the built-in XGBoost algorithm, the transform worker), as an image carries its toolkit."""
    return str(Path(__file__).resolve().parents[4])


def base_environment(*, region: str, s3_endpoint_url: str | None = None,
                     worker_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The base of every host process's environment: an allow-list, never the worker's credentials,
    ``AIRFLOW_*`` settings or ``PYTHONPATH``. The caller adds the SM_* contract and the request's
    ``Environment``."""
    src = os.environ if worker_env is None else worker_env
    env = {k: src[k] for k in PASSTHROUGH if src.get(k)}
    env.setdefault("PATH", os.defpath)
    bindir = os.path.dirname(sys.executable)  # the job's interpreter first, as `python` on the image's PATH
    if bindir not in env["PATH"].split(os.pathsep):
        env["PATH"] = bindir + os.pathsep + env["PATH"]
    env.update({"AWS_REGION": region, "AWS_DEFAULT_REGION": region, "PYTHONUNBUFFERED": "1"})
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        if src.get(key):
            env[key] = src[key]
    if s3_endpoint_url:
        env["AWS_ENDPOINT_URL_S3"] = s3_endpoint_url
    return env


@dataclass
class HostProcess:
    """A running host: its init process (``proc``) and the supervisor's end of its lifeline."""

    proc: subprocess.Popen[bytes]
    lifeline: int
    ready: int | None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def init_pid(self) -> int:
        """hostinit's PID: ``unshare``'s child in namespace mode (PID 1 inside), else the process itself."""
        import psutil

        args = self.proc.args  # spawn_host's command line, a list
        namespaced = isinstance(args, list) and os.path.basename(args[0]) == "unshare"
        children = psutil.Process(self.proc.pid).children() if namespaced else []
        return children[0].pid if children else self.proc.pid

    def wait_ready(self, timeout: float = 20) -> None:
        """Block until hostinit has set up its namespaces (it writes one byte)."""
        import select

        if self.ready is None:
            return
        r, _w, _x = select.select([self.ready], [], [], timeout)
        data = os.read(self.ready, 1) if r else b""
        os.close(self.ready)
        self.ready = None
        if data != b"r":
            raise RuntimeError(f"the simulated host did not start (hostinit exit {self.proc.poll()})")

    def go(self) -> None:
        os.write(self.lifeline, b"g")


@dataclass(frozen=True)
class HostView:
    """What of this machine a namespaced host sees besides its own ``/opt/ml`` and private root file system
    (see :func:`..inhost.hostinit.setup_namespace`): ``ro`` read-only, ``rw`` writable, ``hide`` empty."""

    ro: tuple[str, ...] = ()
    rw: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()


def interpreter_paths(python: str | None = None) -> list[str]:
    """What running ``python`` needs (default: the worker's): its prefix and the real installation it links to
    (a venv's ``bin/python`` is a link to its base interpreter, whose standard library it imports)."""
    paths = [os.path.realpath(sys.base_prefix)]
    if python:
        real = os.path.realpath(python)
        paths.append(os.path.dirname(os.path.dirname(real)))
    return paths


#: the capabilities of a container (Docker's default set, which SageMaker's containers run with), as
#: hostinit.py keeps them; for setpriv
CONTAINER_CAPS = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
                  "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap")


def contained() -> list[str]:
    """The prefix that gives a command started into a host from outside (``nsenter``: Open MPI's daemons) the
    capabilities the host's own processes have, no more (util-linux ``setpriv``, beside ``nsenter``)."""
    bounding = ",".join(["-all", *(f"+{c}" for c in CONTAINER_CAPS)])
    return ["setpriv", f"--bounding-set={bounding}", "--inh-caps=-all", "--"]


def provider_code() -> str:
    """The provider's own package (its in-job code: the built-in XGBoost algorithm, the transform worker, the
    MPI agent), without the rest of the directory that holds it (an editable install's checkout)."""
    return str(Path(__file__).resolve().parents[3])


def spawn_host(argv: list[str], *, env: dict[str, str], cwd: str, stdout: int | IO[Any] | None, isolation: str,
               host_dir: str, hostname: str, etc_hosts: str | None = None, view: HostView | None = None,
               tmpfs_size: int | None = None) -> HostProcess:
    """Start one host's init process (see :mod:`..inhost.hostinit`); call ``go()`` once its network is set up.
    ``tmpfs_size``: the bytes of a namespaced host's root file system and of its /dev/shm (:mod:`.bounds`)."""
    import json

    life_r, life_w = os.pipe()
    ready_r, ready_w = os.pipe() if isolation == "namespace" else (None, None)
    view = view or HostView()
    spec = {"argv": argv, "cwd": cwd, "lifeline": life_r, "ready": ready_w, "isolation": isolation,
            "host_dir": host_dir, "hostname": hostname, "etc_hosts": etc_hosts, "home": env.get("HOME"),
            "ro": [*view.ro, *interpreter_paths(), provider_code()], "rw": list(view.rw),
            "hide": list(view.hide), "tmpfs_size": tmpfs_size}
    # the spec (the host's command line: the script's hyperparameters, secret ones too) reaches the host's init
    # through a file descriptor, not its command line, which every local user sees (ps) for the job's lifetime
    spec_fd = os.memfd_create("smdist-host-spec")
    os.write(spec_fd, json.dumps(spec).encode())
    os.lseek(spec_fd, 0, os.SEEK_SET)
    cmd = [sys.executable, "-I", "-S", HOSTINIT, str(spec_fd)]
    if isolation == "namespace":
        cmd = [*unshare_prefix(), *cmd]
    fds = [fd for fd in (life_r, ready_w, spec_fd) if fd is not None]
    try:
        proc = subprocess.Popen(cmd, env=env, cwd=host_dir, stdout=stdout, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)
    return HostProcess(proc, life_w, ready_r)


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


def end_tree(root_pid: int, grace: float, proc: subprocess.Popen[Any] | None = None) -> None:
    """SIGTERM the tree, then SIGKILL whatever is left after ``grace`` seconds (SageMaker: 120 s)."""
    signal_tree(root_pid, signal.SIGTERM)
    deadline = time.time() + grace
    while time.time() < deadline:
        if proc is not None:
            proc.poll()
        if not tree(root_pid):
            return
        time.sleep(0.05)
    signal_tree(root_pid, signal.SIGKILL)
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
