"""Each simulated host bounded as an instance is: its memory, its process count and its writable storage.

A SageMaker instance has its instance type's memory, and a job that exceeds it fails ("OutOfMemoryError");
its container's writable paths hold what its volume holds, and a write past that fails with "No space left on
device". A local host gets the same bounds from the kernel's own mechanisms:

* **memory and processes**: a cgroup per host (memory and pids controllers; cgroup v2 where the machine has
  it, v1 where it has that), below one cgroup for the job. A host's memory limit is its instance type's memory
  (:func:`instance_memory`), capped to a share of this machine (``SMDIST_LOCAL_MEMORY_SHARE``, default
  :data:`DEFAULT_MEMORY_SHARE`), which also caps the job's hosts together: one job cannot take the memory that
  Airflow's scheduler, triggerer and other tasks on the worker need. Its process count (threads included, as
  the kernel counts them) is capped at ``SMDIST_LOCAL_PIDS_MAX`` (default :data:`DEFAULT_PIDS_MAX`).
  A host whose process the kernel killed for memory fails the job with :data:`OOM_REASON`, naming the host.
* **storage**: a namespaced host's root file system (``/tmp``, ``/var/tmp``, ``/root``) and its ``/dev/shm``
  are tmpfs mounts of a fixed size (:func:`tmpfs_bytes`: the job's ``VolumeSizeInGB``, at most half the host's
  memory, as the kernel sizes a tmpfs by default), so a write past it fails with "No space left on device"
  naming the path, before it can take the worker's memory.

Where a bound cannot be set (no writable cgroup hierarchy: a non-root worker; no namespaces: no tmpfs), the
job's log says once what is not bounded (:attr:`JobBounds.unbounded`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from airflow_smdist.backends.local.store import pid_alive

#: the share of this machine's memory a job's hosts may use together (and each host at most)
DEFAULT_MEMORY_SHARE = 0.5
#: processes and threads per host
DEFAULT_PIDS_MAX = 8192
#: a host never gets less than this, whatever the share (an interpreter and a small script fit)
MIN_HOST_MEMORY = 256 * 2**20
#: SageMaker's failure reason for a job whose instance ran out of memory
OOM_REASON = ("OutOfMemoryError: Please use an instance type with more memory, or reduce the size of job data "
              "processed on an instance.")
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: memory per vCPU (GiB) by instance family, as AWS lists the ml.* types (the accelerated families per size
#: where it is not a multiple of their vCPUs)
GIB_PER_VCPU = {"m": 4.0, "c": 2.0, "r": 8.0, "t": 4.0, "g": 4.0, "x": 16.0, "z": 8.0, "inf": 2.0, "trn": 4.0,
                "p2": 15.25, "p3": 7.625, "p3dn": 8.0, "p4d": 12.0, "p4de": 12.0, "p5": 10.667, "p5e": 10.667,
                "p5en": 10.667}


def vcpus(instance_type: str) -> int | None:
    """The vCPUs of an ml.* instance type by its size (medium and large: 2; xlarge: 4; Nxlarge: 4N)."""
    size = instance_type.rsplit(".", 1)[-1]
    if size in ("medium", "large"):
        return 2
    m = re.fullmatch(r"(\d*)xlarge", size)
    return 4 * int(m.group(1) or 1) if m else None


def instance_memory(instance_type: str) -> int | None:
    """An ml.* instance type's memory in bytes (None for a type not known here): its family's memory per vCPU
    (the exact family, else its letters: ``m5d`` is an ``m``) times its vCPUs; a t-family medium has 4 GiB."""
    parts = instance_type.split(".")
    n = vcpus(instance_type)
    if len(parts) != 3 or parts[0] != "ml" or n is None:
        return None
    letters = re.match(r"[a-z]+", parts[1])
    per = GIB_PER_VCPU.get(parts[1]) or (GIB_PER_VCPU.get(letters.group(0)) if letters else None)
    if per is None:
        return None
    if parts[1].startswith("t") and parts[2] == "medium":
        return 4 * 2**30
    return int(per * n * 2**30)


def machine_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_share() -> float:
    value = os.environ.get("SMDIST_LOCAL_MEMORY_SHARE", str(DEFAULT_MEMORY_SHARE))
    try:
        share = float(value)
    except ValueError:
        share = -1.0
    if not 0 < share <= 1:
        raise ValueError(f"SMDIST_LOCAL_MEMORY_SHARE={value!r} is not a share of this machine's memory: "
                         "give a number above 0 and at most 1 (default 0.5).")
    return share


def pids_max() -> int:
    value = os.environ.get("SMDIST_LOCAL_PIDS_MAX", str(DEFAULT_PIDS_MAX))
    if not value.isdigit() or int(value) < 16:
        raise ValueError(f"SMDIST_LOCAL_PIDS_MAX={value!r} is not a process count: give a whole number of at "
                         f"least 16 (default {DEFAULT_PIDS_MAX}).")
    return int(value)


def host_memory(instance_type: str, job_cap: int) -> int:
    """A host's memory limit: its instance type's memory, at most the job's cap (never below the floor)."""
    own = instance_memory(instance_type)
    return max(MIN_HOST_MEMORY, min(own, job_cap) if own else job_cap)


def tmpfs_bytes(volume_gb: float | None, memory: int) -> int:
    """The size of a host's root file system and of its /dev/shm: the volume, at most half the host's memory."""
    half = memory // 2
    return min(int(volume_gb * 2**30), half) if volume_gb else half


# -- the cgroup hierarchies ------------------------------------------------------------------------------------
def _own_cgroups() -> dict[str, str]:
    """controller (or "" for v2's unified hierarchy) -> this process's cgroup path."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _n, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def hierarchy() -> tuple[str, dict[str, Path]] | tuple[None, str]:
    """("v1" | "v2", controller -> the directory where this process's job cgroups go), or (None, why not)."""
    own = _own_cgroups()
    if (CGROUP_ROOT / "cgroup.controllers").exists():  # v2 only
        base = CGROUP_ROOT / own.get("", "/").lstrip("/")
        control = base / "cgroup.subtree_control"
        enabled = control.read_text().split() if control.exists() else []
        if not {"memory", "pids"} <= set(enabled):
            return None, f"cgroup v2: the memory and pids controllers are not enabled below {base}"
        return ("v2", {"memory": base, "pids": base}) if os.access(base, os.W_OK) else (
            None, f"cgroup v2: {base} is not writable by this user")
    dirs = {c: CGROUP_ROOT / c / own.get(c, "/").lstrip("/") for c in ("memory", "pids")}
    missing = [c for c, d in dirs.items() if not d.is_dir()]
    if missing:
        return None, f"cgroup v1: no {' and '.join(missing)} hierarchy at {CGROUP_ROOT}"
    denied = [str(d) for d in dirs.values() if not os.access(d, os.W_OK)]
    if denied:
        return None, f"cgroup v1: {', '.join(denied)} not writable by this user"
    return "v1", dirs


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


@dataclass
class HostCgroup:
    """One host's cgroups (one per controller in v1, one in v2) and its limits."""

    label: str
    version: str
    dirs: dict[str, Path]
    memory: int
    pids: int

    def make(self) -> None:
        for d in set(self.dirs.values()):
            d.mkdir(parents=True, exist_ok=True)
        if self.version == "v2":
            _write(self.dirs["memory"] / "memory.max", str(self.memory))
            if (self.dirs["memory"] / "memory.swap.max").exists():  # an instance has no swap
                _write(self.dirs["memory"] / "memory.swap.max", "0")
            _write(self.dirs["pids"] / "pids.max", str(self.pids))
        else:
            _write(self.dirs["memory"] / "memory.limit_in_bytes", str(self.memory))
            _write(self.dirs["pids"] / "pids.max", str(self.pids))

    def attach(self, pids: list[int]) -> None:
        """Move ``pids`` (a host's init processes, before its entry point starts) into the host's cgroups."""
        self.make()
        for d in set(self.dirs.values()):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    _write(d / "cgroup.procs", str(pid))

    def oom_kills(self) -> int:
        """How many processes of the host the kernel killed for memory."""
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        try:
            text = (self.dirs["memory"] / name).read_text()
        except OSError:
            return 0
        m = re.search(r"^oom_kill (\d+)$", text, re.M)
        return int(m.group(1)) if m else 0

    def remove(self) -> None:
        for d in set(self.dirs.values()):
            with contextlib.suppress(OSError):
                d.rmdir()


@dataclass
class JobBounds:
    """The bounds of one job's hosts (see the module's docstring); ``unbounded``: what is not, and why."""

    job_key: str
    volume_gb: float | None
    job_cap: int = 0
    pids: int = DEFAULT_PIDS_MAX
    version: str | None = None
    base: dict[str, Path] = field(default_factory=dict)
    hosts: dict[str, HostCgroup] = field(default_factory=dict)
    unbounded: list[str] = field(default_factory=list)

    @classmethod
    def make(cls, job_dir: str, volume_gb: float | None) -> JobBounds:
        share, pids = memory_share(), pids_max()
        # the supervisor's PID in the name: :func:`sweep` removes only the cgroups of supervisors that are gone
        key = f"smdist-{hashlib.sha1(os.path.realpath(job_dir).encode()).hexdigest()[:12]}-{os.getpid()}"
        bounds = cls(key, volume_gb, job_cap=int(machine_memory() * share), pids=pids)
        found = hierarchy()
        if found[0] is None:
            bounds.unbounded.append(f"memory and process count ({found[1]})")
            return bounds
        bounds.version, dirs = found
        assert isinstance(dirs, dict)
        bounds.base = {c: d / key for c, d in dirs.items()}
        try:
            bounds._make_job()
        except OSError as e:
            bounds.version = None
            bounds.unbounded.append(f"memory and process count (the job's cgroup: {e})")
        return bounds

    def _make_job(self) -> None:
        sweep(set(self.base.values()))
        for d in set(self.base.values()):
            d.mkdir(exist_ok=True)
        if self.version == "v2":
            _write(self.base["memory"] / "cgroup.subtree_control", "+memory +pids")
            _write(self.base["memory"] / "memory.max", str(self.job_cap))
        else:
            _write(self.base["memory"] / "memory.limit_in_bytes", str(self.job_cap))

    def memory_of(self, instance_type: str) -> int:
        return host_memory(instance_type, self.job_cap)

    def tmpfs_of(self, instance_type: str) -> int:
        return tmpfs_bytes(self.volume_gb, self.memory_of(instance_type))

    def host(self, label: str, instance_type: str) -> HostCgroup | None:
        if self.version is None:
            return None
        if label not in self.hosts:
            self.hosts[label] = HostCgroup(label, self.version, {c: d / label for c, d in self.base.items()},
                                           self.memory_of(instance_type), self.pids)
        return self.hosts[label]

    def oom_killed(self, label: str) -> bool:
        host = self.hosts.get(label)
        return host is not None and host.oom_kills() > 0

    def describe(self, instance_type: str, hosts: int) -> str:
        own = instance_memory(instance_type)
        return (f"each of the {hosts} host(s) is bounded as an {instance_type} instance: memory "
                f"{self.memory_of(instance_type) / 2**30:.1f} GiB (the instance type's "
                + (f"{own / 2**30:g} GiB" if own else "memory is not known here")
                + f"; the job's hosts together at most {self.job_cap / 2**30:.1f} GiB, SMDIST_LOCAL_MEMORY_SHARE of "
                f"this machine), {self.pids} processes and threads, /tmp and /dev/shm "
                f"{self.tmpfs_of(instance_type) / 2**30:.1f} GiB each")

    def remove(self) -> None:
        for host in self.hosts.values():
            host.remove()
        for d in set(self.base.values()):
            with contextlib.suppress(OSError):
                d.rmdir()


def sweep(job_dirs: set[Path]) -> None:
    """Remove the cgroups of jobs whose supervisors were killed before they removed them: those named with the
    PID of a process that is gone (a live job's, even between its hosts, stays; a cgroup with a process in it
    is never removed either: rmdir refuses it)."""
    for parent in {d.parent for d in job_dirs}:
        for old in parent.glob("smdist-*-*"):
            pid = old.name.rsplit("-", 1)[1]
            if old in job_dirs or not pid.isdigit() or pid_alive(int(pid)):
                continue
            try:
                for child in old.iterdir():
                    if child.is_dir():
                        child.rmdir()
                old.rmdir()
            except OSError:
                continue

