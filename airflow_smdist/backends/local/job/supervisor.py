"""What every local job supervisor does, whatever the job kind.

A supervisor runs detached (its own session) for one job: it keeps the job's ``state.json`` (status,
secondary status transitions, failure reason, metrics), writes the platform's own log lines, streams
every simulated host's output into ``logs/<host>.jsonl`` (and through MetricDefinitions regexes), and ends
every process of the job on stop, on MaxRuntimeInSeconds, or when one host fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import socket
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING
from typing import IO, Any, Protocol, TypeVar
from collections.abc import Callable

from airflow_smdist.backends.local import diskspace
from airflow_smdist.backends.local.inhost.hostinit import FULL_PREFIX as HOST_FULL_PREFIX
from airflow_smdist.backends.local.job import bounds, contract, hostfs, hostnet, launcher, litter
from airflow_smdist.kinds import kind_info
from airflow_smdist.backends.local.job.metrics import MetricParser
from airflow_smdist.backends.local.job.sampler import UtilizationSampler
from airflow_smdist.backends.local.store import (
    JobStore,
    await_placement,
    locked,
    owner_alive,
    read_json,
    this_process,
    write_json_atomic,
)
from airflow_smdist.storage import Storage, StoredObject, UploadJournal, parse_uri
from airflow_smdist import wire

if TYPE_CHECKING:
    from types import FrameType

    from airflow_smdist.backends.local.job import runtimes

FAILURE_LIMIT = 1024
#: of a host's failure file, what is read at most (FailureReason keeps 1 KB of it)
FAILURE_READ_LIMIT = 1 << 20
#: a traceback's first line, also behind a rank's tag (torchrun's "[rank0]:", mpirun's "[1,3]<stderr>:")
_TRACEBACK = re.compile(r"^(\[[^\]]*\](?:<std(?:out|err)>)?:\s?)?Traceback \(most recent call last\):")
#: chained tracebacks ("During handling of the above exception ...") belong to the last one
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
#: a Java exception carried by a Python one (py4j's Py4JJavaError: ": java.io...." on the line after "An error
#: occurred while calling ...", then the JVM's frames, "Caused by: ..." for each cause)
_JAVA_CAUSE = (": ", "Caused by: ")
_JAVA_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ more)")
#: at most this many Java exception lines follow a Python exception line in an excerpt
_JAVA_CAUSES_KEPT = 4


def fit_failure_reason(text: str, limit: int = FAILURE_LIMIT, *, keep_head: bool = True) -> str:
    """``text`` within SageMaker's 1,024 characters of FailureReason, keeping what matters: its first line
    (what failed, e.g. ``AlgorithmError: ExecuteUserScriptError:``; unless ``keep_head`` is false) and its
    END (the exception line, then as much of the context before it as fits); the middle goes."""
    if len(text) <= limit:
        return text
    head, _, rest = text.partition("\n") if keep_head else ("", "", text)
    marker = "\n...\n" if head else "...\n"
    head = head[: limit // 4]
    tail = rest[-(limit - len(head) - len(marker)):]
    cut = tail.find("\n")
    if 0 <= cut < len(tail) // 2:  # start the kept context at a line boundary
        tail = tail[cut + 1:]
    return head + marker + tail


#: what a fallback job's FailureReason adds when a host could not bind a port another host holds
SHARED_NETWORK_HINT = "the simulated hosts share one network stack here: bind SM_CURRENT_HOST's address, not 0.0.0.0"
_ADDRESS_IN_USE = re.compile(r"address already in use|EADDRINUSE", re.IGNORECASE)


def with_network_hint(reason: str, isolation: str) -> str:
    """``reason`` with :data:`SHARED_NETWORK_HINT` as its last line when the hosts share this machine's
    network stack (the fallback) and a port was in use: on SageMaker, and with namespaces, each host has its
    own, so 0.0.0.0:<port> on every host works there and collides here. Still within FailureReason's limit,
    keeping the reason's end (its exception line)."""
    if isolation == "namespace" or not _ADDRESS_IN_USE.search(reason):
        return reason
    return fit_failure_reason(reason, FAILURE_LIMIT - len(SHARED_NETWORK_HINT) - 1) + "\n" + SHARED_NETWORK_HINT


def error_excerpt(lines: list[str]) -> list[str]:
    """The lines a failure reason should quote from a host's output: up to the exception line of the last
    traceback (chained ones included, with what was printed before them as context), else the output's
    end. torch's elastic agent reports a failed rank with its own ChildFailedError traceback after the
    rank's: the rank's is the one that names the cause."""
    starts = [i for i, x in enumerate(lines) if _TRACEBACK.match(x)]
    for start in reversed(starts):
        end = _exception_line(lines, start)
        if end is not None and "ChildFailedError" not in lines[end]:
            prefix = _tag(lines[start])
            # a tagged rank's traceback: other ranks' lines printed meanwhile are not part of it
            return (lines[:start] + [x for x in lines[start: end + 1] if x.startswith(prefix)]
                    + _java_causes(lines, end, prefix))
    return lines


def _java_causes(lines: list[str], end: int, prefix: str) -> list[str]:
    """The Java exception (and its causes) that the message of the exception line ``lines[end]`` goes on
    with, without the JVM's stack frames: a PySpark job's failure is a Py4JJavaError whose first line names only
    the call that failed."""
    causes: list[str] = []
    for line in lines[end + 1:]:
        if not line.startswith(prefix):
            continue
        body = line.removeprefix(prefix)
        if _JAVA_FRAME.match(body):
            continue
        if not body.startswith(_JAVA_CAUSE) or len(causes) == _JAVA_CAUSES_KEPT:
            break
        causes.append(line)
    return causes


def _tag(line: str) -> str:
    """The rank tag a line of a traceback starts with (``[1,3]<stderr>:``), or ""."""
    match = _TRACEBACK.match(line)
    return (match.group(1) or "") if match else ""


def _exception_line(lines: list[str], start: int) -> int | None:
    prefix = _tag(lines[start])
    for i in range(start + 1, len(lines)):
        if not lines[i].startswith(prefix):  # another rank's line, interleaved by mpirun/torchrun
            continue
        body = lines[i].removeprefix(prefix)
        if body.strip() and not body.startswith((" ", "\t")) and not _TRACEBACK.match(body):
            if body.startswith(_CHAINED):
                continue
            return i
    return None


class PlatformError(RuntimeError):
    """A failure SageMaker itself reports (its message is the FailureReason as it stands, e.g.
    "ClientError: No S3 objects found under S3 URL ..."), as opposed to an error of ours."""


def _close_quietly(f: IO[Any]) -> None:
    """Close ``f``; what its buffer held is lost where the disk has no room for it."""
    try:
        f.close()
    except OSError:
        pass


class EndedBeforeHosts(Exception):
    """StopTrainingJob or a time limit ended the job during a step before its hosts ran (the pre-run install):
    its whole process tree has been ended. ``outcome``: (status, secondary status, failure reason)."""

    def __init__(self, status: str, secondary: str, reason: str | None = None) -> None:
        super().__init__(f"{status} ({secondary}) before the hosts ran")
        self.outcome = (status, secondary, reason)


class SupervisorLog:
    """The supervisor's own log (``supervisor.log``), which a full disk never makes raise: a line that cannot
    be written is lost, and the supervisor told (``on_full``), so that the job ends with the disk's reason."""

    def __init__(self, path: Path, on_full: Callable[[], object]) -> None:
        self.file = open(path, "a", buffering=1)
        self.on_full = on_full

    def write(self, text: str) -> None:
        try:
            self.file.write(text)
        except OSError as exc:
            if not diskspace.is_disk_full(exc):
                raise
            self.on_full()

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError:
            pass


def stop_grace() -> float:
    return float(os.environ.get("SMDIST_LOCAL_STOP_GRACE", "30"))


class _Keyed(Protocol):
    """What :func:`shard` sorts by: a stored object, or an input item with its key."""

    @property
    def key(self) -> str: ...


_K = TypeVar("_K", bound=_Keyed)


def shard(objects: list[_K], rank: int, n_hosts: int) -> list[_K]:
    """ShardedByS3Key: keys sorted, key i to the host of rank i % n (SageMaker promises ~1/n per host)."""
    ordered = sorted(objects, key=lambda o: o.key)
    return [o for i, o in enumerate(ordered) if i % n_hosts == rank]


#: where the fallback's port reservations live: one directory per user, ``smdist-ports-<uid>/`` (its table
#: ``ports.json`` and ``lock``), each written by its user only and readable by all (a reservation is a pid and
#: a start time), so no user's table can be in another's way, and a user reads everyone's
PORTS_BASE = Path(tempfile.gettempdir())
PORTS_TABLE = "ports.json"


class PortTableError(RuntimeError):
    """The port table's location cannot be used (made by another user, not a directory, not writable)."""


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def ports_dir() -> Path:
    """This user's port table directory (made 0755 on first use); a clear error when it is unusable."""
    uid = os.geteuid()
    path = PORTS_BASE / f"smdist-ports-{uid}"
    fix = f"remove {path}, or give the Airflow worker a TMPDIR of its own"
    try:
        path.mkdir(mode=0o755)
        os.chmod(path, 0o755)  # whatever the umask: other users read the table
    except FileExistsError:
        pass
    except OSError as exc:
        raise PortTableError(f"the local backend's port table {path} cannot be made ({exc.strerror}): "
                             f"{fix}") from exc
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
        raise PortTableError(f"the local backend's port table {path} is not a directory that only this user "
                             f"(uid {uid}) can write (owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}): "
                             f"{fix}")
    if not os.access(path, os.W_OK | os.X_OK):
        raise PortTableError(f"the local backend's port table {path} is not writable here: {fix}")
    return path


def _write_table(path: Path, table: dict[str, Any]) -> None:
    """``path`` whole or not at all, readable by every user (0644): other users' jobs skip what it holds."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o644)
        f.write(json.dumps(table, sort_keys=True))
    os.replace(tmp, path)


def _others_reserved(mine: Path) -> set[str]:
    """The ports other users' running jobs hold in their tables (an unreadable or torn table holds none)."""
    held: set[str] = set()
    for table in PORTS_BASE.glob(f"smdist-ports-*/{PORTS_TABLE}"):
        if table.parent == mine.parent:
            continue
        try:
            entries = json.loads(table.read_text()) or {}
        except (OSError, ValueError):
            continue
        held.update(k for k, v in entries.items() if isinstance(v, dict) and owner_alive(v))
    return held


def free_port(preferred: int) -> int:
    """``preferred`` when nothing listens on it on any address and no running local job (of any local root
    or user on this machine) holds it, else the next such port; held for this process until
    :func:`release_ports`. A probe alone would give two jobs started at once the same port (neither listens
    yet), so a port is reserved in this user's table under its lock, and a user's jobs skip the ports in
    every other user's table; when two users reserve the same port at the same moment, whoever sees the
    other's reservation after writing its own moves on (write, then look: one always sees the other). Only
    the fallback mode needs it: namespaced hosts have their own network stacks."""
    me = this_process()
    mine = ports_dir() / PORTS_TABLE
    with locked(mine.with_name("lock")):
        table = {k: v for k, v in (read_json(mine, {}) or {}).items() if owner_alive(v)}
        others = _others_reserved(mine)
        candidates: list[int] = [preferred, *range(max(preferred, 1024) + 1, 65535)]  # (mypy infers list[Any])
        for port in candidates:
            key = str(port)
            if key in table or key in others or not _bindable(port):
                continue
            table[key] = me
            _write_table(mine, table)
            if key not in _others_reserved(mine):
                return port
            del table[key]  # another user's job took it at the same moment
            _write_table(mine, table)
    raise RuntimeError("no free TCP port")


def release_ports() -> None:
    """Give back every port this process reserved with :func:`free_port`."""
    me = os.getpid()
    mine = PORTS_BASE / f"smdist-ports-{os.geteuid()}" / PORTS_TABLE
    if not mine.exists():  # nothing reserved (namespaced hosts reserve nothing): nothing made either
        return
    with locked(mine.with_name("lock")):
        table = read_json(mine, {}) or {}
        kept = {k: v for k, v in table.items() if v.get("pid") != me}
        if kept != table:
            _write_table(mine, kept)


#: how often a supervisor looks at the stop file, MaxRuntimeInSeconds and its periodic work while hosts run
WATCH_TICK = 0.2


class HostExits:
    """Wakes a supervisor the moment one of its hosts' processes exits (a pidfd per host, readable once
    the process has ended), so a job ends when its entry point does, not up to a tick later. Where the
    kernel has no pidfds (Linux < 5.3), :meth:`wait` sleeps the whole timeout, as a plain poll would."""

    def __init__(self, procs: dict[str, launcher.HostProcess]) -> None:
        self.fds: dict[str, int] = {}
        for label, proc in procs.items():
            try:
                self.fds[label] = os.pidfd_open(proc.pid)
            except (AttributeError, OSError):  # no pidfds here, or already reaped (its poll() reports it)
                continue

    def wait(self, running: list[str], timeout: float) -> None:
        """Return once a host of ``running`` has exited, or after ``timeout`` seconds."""
        fds = [self.fds[label] for label in running if label in self.fds]
        if fds:  # a host without a pidfd is seen at the next tick
            select.select(fds, [], [], timeout)
        else:
            time.sleep(timeout)

    def __enter__(self) -> HostExits:
        return self

    def __exit__(self, *_exc: object) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


def _read_lines(stream: IO[bytes], lines: list[str], log: Callable[[str], None]) -> None:
    """Each line of ``stream`` into ``lines`` and, when not blank, ``log``, until it closes."""
    for raw in stream:
        line = raw.decode(errors="replace").rstrip("\n")
        lines.append(line)
        if line.strip():
            log(line)


class JobSupervisor:
    """Base of the per-kind supervisors. ``kind`` names the job kind; subclasses implement ``run``."""

    kind = "training"
    #: the job's hosts, set by the kind's :meth:`run` before any host starts
    cluster: contract.Cluster

    def __init__(self, job_dir: Path) -> None:
        if not await_placement(Path(job_dir)):  # its submitter died before the job was in place
            raise SystemExit(0)
        self.dir = Path(job_dir)
        self.store = JobStore(self.dir.parent.parent)
        self.request = read_json(self.dir / "request.json")
        self.name = kind_info(self.kind).job_name(self.request)
        self.state = read_json(self.dir / "state.json")
        self.storage = Storage(endpoint_url=self.state.get("s3_endpoint_url"), region_name=self.state.get("region"),
                               journal=UploadJournal(self.dir / litter.JOURNAL))
        self.metrics = MetricParser(self.metric_definitions())
        self.final_metrics: dict[str, list[float]] = {}
        self.metrics_lock = threading.Lock()
        self.stop_requested = False
        self.procs: dict[str, launcher.HostProcess] = {}
        self.readers: list[threading.Thread] = []
        self.isolation = self.state.get("isolation", "none")
        self.net: hostnet.JobNetwork | None = None
        self.no_nat: str | None = None  # why the job's hosts have no NAT (None: they have, or no network)
        self.network_said = False
        #: the job's runtime (the image's environment), resolved by the kinds that run code in one
        self.runtime: runtimes.Runtime | None = None
        #: why the job cannot go on: a write of the supervisor's failed for want of space (see :meth:`disk_full`)
        self.disk_full_reason: str | None = None
        self.disk_lock = threading.Lock()
        self.log = SupervisorLog(self.dir / "supervisor.log", self.disk_full)
        self.sampler = UtilizationSampler(self.dir)  # per-host CPU, memory and I/O while hosts run
        #: seconds the job's hosts ran in its earlier tries (rehearsed interruptions, retries: see .spot)
        self.ran_before = 0.0
        #: the bounds of the job's hosts (:meth:`job_bounds`), made with the first host
        self._bounds: bounds.JobBounds | None = None

    def run(self) -> int:
        """Run the job to its end, writing its final state; the supervisor process's exit code."""
        raise NotImplementedError

    @property
    def resolved_runtime(self) -> runtimes.Runtime:
        """:attr:`runtime`, which the kinds that run code resolve before any host starts (an error before)."""
        if self.runtime is None:
            raise RuntimeError(f"the {self.kind} job's runtime is used before it is resolved")
        return self.runtime

    # -- state -----------------------------------------------------------------------------------
    def save(self, **changes: Any) -> None:
        """Update the state file. A failed job whose disk is full fails with the disk's reason; a full disk
        that refuses the write frees the job's reserve (ending its hosts first) and writes it again."""
        if changes.get("status", self.state.get("status")) == "Failed" and changes.get("failure_reason"):
            changes["failure_reason"] = self.with_disk_reason(str(changes["failure_reason"]))
        if changes.get("failure_reason"):  # every kind's reasons meet SageMaker's limit here, keeping the end
            changes["failure_reason"] = fit_failure_reason(str(changes["failure_reason"]))
        self.state.update(changes)
        with self.metrics_lock:
            self.state["final_metrics"] = dict(self.final_metrics)
        try:
            write_json_atomic(self.dir / "state.json", self.state)
        except OSError as exc:
            if not diskspace.is_disk_full(exc):
                raise
            self.disk_full()
            self.free_reserve()
            write_json_atomic(self.dir / "state.json", self.state)

    # -- a full disk -----------------------------------------------------------------------------------
    def disk_full(self) -> str:
        """Note that a write of this job failed for want of space (once: the message measures the disk as it
        is then, before the reserve is freed); the job's FailureReason from now on."""
        with self.disk_lock:
            if self.disk_full_reason is None:
                self.disk_full_reason = diskspace.full_message(self.store.root)
            return self.disk_full_reason

    def fail(self, exc: BaseException) -> None:
        """The end of a job whose ``run`` raised: its traceback in the supervisor's log, and the job Failed with
        the error (the full disk's reason where that is why), unless it had ended already."""
        import traceback

        self.log.write(traceback.format_exc())
        if self.state.get("status") in ("Completed", "Failed", "Stopped"):
            return
        if diskspace.is_disk_full(exc):
            self.disk_full()
        if self.procs:
            self.end_all(5)
        t = time.time()
        transitions = self.state.setdefault("transitions", [])
        if transitions and "end" not in transitions[-1]:
            transitions[-1]["end"] = t
        transitions.append({"status": "Failed", "start": t, "end": t,
                            "message": f"{self.kind.capitalize()} job failed"})
        self.save(status="Failed", secondary_status="Failed", ended=t,
                  failure_reason=f"InternalServerError: {type(exc).__name__}: {exc}")

    def free_reserve(self) -> None:
        """Free the job's reserve for its last writes; its hosts end first (in the supervisor's main thread),
        so that what freed the room does not take it again."""
        if threading.current_thread() is threading.main_thread() and any(
                p.poll() is None for p in self.procs.values()):
            self.end_all(min(stop_grace(), 5))
        diskspace.release_reserve(self.dir)

    def with_disk_reason(self, reason: str) -> str:
        """``reason`` of a failed job, said as the full disk where that is why: a write of the supervisor's
        failed for want of space, or the job's own error says so in a line that names a file of the job root's
        disk (under /opt/ml), or that disk is (nearly) full. (A host's /tmp and /dev/shm are its own, bounded:
        a traceback of a script in /opt/ml/code that filled them is the job's own error.) What room is left holds
        the job's own error."""
        said = diskspace.full_line(reason)
        if self.disk_full_reason is None and said and (
                "/opt/ml" in said or str(self.store.root) in said or diskspace.looks_full(self.store.root)):
            self.disk_full()  # every host's /opt/ml is on the job root's disk
        full = self.disk_full_reason
        if full is None or reason.startswith(full):
            return reason
        room = FAILURE_LIMIT - len(full) - 1
        return full + ("\n" + fit_failure_reason(reason, room) if room > 80 else "")

    def secondary(self, status: str, message: str) -> None:
        t = time.time()
        transitions = self.state.setdefault("transitions", [])
        if transitions and "end" not in transitions[-1]:
            transitions[-1]["end"] = t
        transitions.append({"status": status, "start": t, "message": message})
        self.say(f"{status}: {message}")
        self.save(secondary_status=status)

    def say(self, message: str) -> None:
        """A platform line in the job's log (the 'platform' stream), like SageMaker's own messages (lost, and
        the disk noted full, where there is no room for it)."""
        line = json.dumps({"t": time.time(), "m": message})
        try:
            with open(self.dir / "logs" / "platform.jsonl", "a") as f:
                f.write(line + "\n")
        except OSError as exc:
            if not diskspace.is_disk_full(exc):
                raise
            self.disk_full()
        self.log.write(f"{time.strftime('%H:%M:%S')} {message}\n")

    def on_sigterm(self, _signum: int, _frame: FrameType | None) -> None:
        self.stop_requested = True

    # -- staging ---------------------------------------------------------------------------------
    def host_dir(self, host: contract.Host) -> Path:
        return self.dir / "hosts" / host.label

    def metric_definitions(self) -> list[dict[str, Any]]:
        return []

    def manifest_objects(self, manifest_uri: str) -> tuple[str, list[StoredObject]]:
        """ManifestFile: first entry {"prefix": ...}, then keys relative to it."""
        entries = json.loads(self.storage.read_bytes(manifest_uri))
        prefix = entries[0]["prefix"]
        objs = []
        for rel in entries[1:]:
            uri = prefix.rstrip("/") + "/" + rel if not prefix.endswith("/") else prefix + rel
            _s, _b, key = parse_uri(uri)
            objs.append(StoredObject(uri, key, 0))
        return prefix, objs

    def reader(self, host: contract.Host, stream: IO[bytes]) -> None:
        """Drain a host's output to its end (a host blocks on a full pipe), recording each line
        (:meth:`record`) while there is room: a full disk stops the recording, never the draining."""
        path = self.dir / "logs" / f"{host.label}.jsonl"
        out: IO[str] | None = None
        try:
            out = open(path, "a")
        except OSError as exc:
            if not diskspace.is_disk_full(exc):
                raise
            self.disk_full()
        try:
            for raw in iter(stream.readline, b""):
                if out is None:
                    continue
                try:
                    self.record(host, out, raw)
                except OSError as exc:
                    if not diskspace.is_disk_full(exc):
                        raise
                    self.disk_full()
                    _close_quietly(out)  # its buffer may hold a torn line: dropped with it
                    out = None
        finally:
            stream.close()
            if out is not None:
                _close_quietly(out)

    def record(self, host: contract.Host, out: IO[str], raw: bytes) -> None:
        """One line of a host's output into its log stream and, through MetricDefinitions, the metrics."""
        t = time.time()
        line = raw.decode("utf-8", "replace").rstrip("\n")
        out.write(json.dumps({"t": t, "m": line}) + "\n")
        out.flush()
        points = self.metrics.parse(line, t, host.label)
        if points:
            with self.metrics_lock:
                for p in points:
                    self.final_metrics[p.name] = [p.value, p.timestamp]
                with open(self.dir / "metrics.jsonl", "a") as mf:
                    for p in points:
                        mf.write(json.dumps({"name": p.name, "value": p.value, "t": p.timestamp,
                                             "host": p.host}) + "\n")

    # -- hosts -----------------------------------------------------------------------------------
    def network_isolated(self) -> bool:
        """EnableNetworkIsolation of the request (the kind's own key)."""
        return bool(self.request.get("EnableNetworkIsolation"))

    def build_cluster(self, resource_config: dict[str, Any]) -> contract.Cluster:
        """The job's hosts; in namespace mode also the job's bridge and /etc/hosts, and the platform lines
        that say what a simulated host is (and, in the fallback, how it differs from an instance)."""
        subnet = None
        if self.isolation == "namespace":
            self.net, no_nat = hostnet.JobNetwork.allocate(str(self.dir), self.state["block"][1],
                                                           nat=not self.network_isolated(),
                                                           hosts=wire.host_count(resource_config),
                                                           owner=self.owner())
            subnet = str(self.net.subnet.network_address)
        cluster = contract.make_cluster(resource_config, tuple(self.state["block"]), subnet)
        if self.net is not None:
            (self.dir / "etc-hosts").write_text(contract.etc_hosts(cluster))
            self.no_nat = no_nat
            self.save(network={"bridge": self.net.bridge, "subnet": str(self.net.subnet), "gateway": None})
        else:
            why = launcher.namespaces_available() or "SMDIST_LOCAL_ISOLATION=none"
            self.say(f"hosts run without namespaces ({why}), unlike instances: "  # the reason once
                     + "; ".join(launcher.FALLBACK_DIFFERENCES))
        return cluster

    def settle_network(self) -> None:
        """Once, before the first host is plugged: the job's NAT finished (:meth:`hostnet.JobNetwork.settle`,
        whose table was made while the hosts started), its gateway in the state, and the line that says what
        the hosts are and reach."""
        if self.net is None or self.network_said:
            return
        self.network_said = True
        self.no_nat = self.net.settle() or self.no_nat
        self.save(network={"bridge": self.net.bridge, "subnet": str(self.net.subnet), "gateway": self.net.gateway})
        link = f"veth {self.net.link}" if self.net.single else f"bridge {self.net.bridge}"
        self.say(f"hosts are namespaced containers: own hostname algo-N, network (eth0 on {link}, "
                 f"{self.net.subnet}), /tmp, /opt/ml and process tree; they reach {self.reach(self.no_nat)}")

    def owner(self) -> dict[str, Any] | None:
        """This supervisor as :func:`..store.owner_alive` reads it, from the pid file its submitter wrote (psutil's
        create time, to 10 ms: its resolution on Linux), so the job's start needs no psutil of its own; None
        where the file does not name this process."""
        try:
            pid, started = (self.dir / "supervisor.pid").read_text().split()
            if int(pid) == os.getpid():
                return {"pid": int(pid), "create_time": float(started)}
        except (OSError, ValueError):
            pass
        return None

    def reach(self, no_nat: str | None) -> str:
        """What a namespaced host reaches outside its job, for the job's log."""
        if self.network_isolated():
            return "nothing outside the job (EnableNetworkIsolation)"
        loopback = "the worker's loopback endpoints (S3) through forwarded ports"
        if self.net is None or self.net.gateway is None:
            return f"{loopback}, nothing else ({no_nat}: no route off the job)"
        forwarding = ("; net.ipv4.ip_forward was 0: turned on, machine-wide, and left on, as Docker does"
                      if self.net.forwarding_enabled else "")
        return (f"{loopback}, and what the worker reaches through the job's gateway {self.net.gateway} "
                f"(nftables masquerade{forwarding}){hostnet.dns_note()}")

    def keep_paths(self) -> list[str]:
        """What of this machine a host reads besides the system, the interpreter and its own files (read-only):
        the job's runtime (the worker's virtualenv only when the job runs in the worker's interpreter), what its
        installs and its ``pip`` run (uv, the CA files and the find-links and constraint files of the machine's
        index settings); kinds add theirs."""
        rt = self.runtime
        if rt is None:
            return []
        paths = [rt.root, *launcher.interpreter_paths(rt.python)]
        if rt.is_worker:
            paths.append(sys.prefix)
        from airflow_smdist.backends.local.job import runtimes as rts  # a job with a runtime loaded it already

        paths += [rts.uv_binary(), *rts.tls_files(), *rts.source_paths()]  # its installs and its pip
        return [p for p in paths if p]

    def writable_paths(self) -> list[str]:
        """What a host writes outside its ``/opt/ml`` and private root: the job's layer (its ``pip`` installs
        there, as a container's pip into its own copy of the image); kinds add theirs."""
        layer = self.dir / "layer"
        layer.mkdir(exist_ok=True)
        return [str(layer)]

    def host_view(self) -> launcher.HostView:
        """A namespaced host's view of this machine (see :func:`..inhost.hostinit.setup_namespace`): this job's own
        directory read-only, without the other hosts' directories; nothing of the job root, other jobs,
        AIRFLOW_HOME, the worker's home or checkout."""
        return launcher.HostView(ro=(str(self.dir), *self.keep_paths()), rw=tuple(self.writable_paths()),
                                 hide=(str(self.dir / "hosts"),))

    def close_network(self) -> None:
        if self.net is not None:
            self.net.remove()
            self.net = None

    def release(self) -> None:
        """Give back what the job held on this machine: its network (links, NAT table) and loopback block.
        :func:`serve` calls it once the job's final state is written, as SageMaker reports a job ended before
        it releases the job's instances: a task waiting for the job does not wait for the kernel's teardown
        of its links (10 to 40 ms). The supervisor is a process of the job until then, and a supervisor
        killed before it is done leaves what :func:`hostnet.reclaim` and the block table's owner check free."""
        try:
            self.close_network()
        finally:
            self.store.release_block(f"{self.kind}/{self.name}")
            if self._bounds is not None:
                self._bounds.remove()

    def forwarded_endpoints(self) -> list[tuple[str, int]]:
        """The worker's loopback endpoints a host reaches (none with network isolation)."""
        if self.network_isolated():
            return []
        urls = [self.state.get("s3_endpoint_url"), os.environ.get("AWS_ENDPOINT_URL"),
                os.environ.get("AWS_ENDPOINT_URL_S3")]
        return sorted({e for e in map(hostnet.loopback_endpoint, urls) if e})

    def base_env(self) -> dict[str, str]:
        """The allow-listed environment every host process starts from (see launcher.base_environment)."""
        return launcher.base_environment(region=self.state.get("region", "us-east-1"),
                                         s3_endpoint_url=self.state.get("s3_endpoint_url"))

    def channel_bytes(self, host: contract.Host) -> dict[str, int] | None:
        """Bytes of input data staged for ``host``, per channel (None: this kind has no channels)."""
        return None

    def spawn(self, host: contract.Host, argv: list[str], env: dict[str, str], cwd: str) -> launcher.HostProcess:
        """One host's init process, bounded as its instance (:mod:`.bounds`), waiting for ``go()``."""
        import subprocess

        limits = self.job_bounds()
        proc = launcher.spawn_host(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, isolation=self.isolation,
                                   host_dir=str(self.host_dir(host)), hostname=host.label,
                                   etc_hosts=str(self.dir / "etc-hosts"),
                                   view=self.host_view() if self.isolation == "namespace" else None,
                                   tmpfs_size=limits.tmpfs_of(host.instance_type))
        cgroup = limits.host(host.label, host.instance_type)
        if cgroup is not None:
            proc.wait_ready()  # unshare has forked hostinit, which waits for go(): nothing of the job runs yet
            try:
                cgroup.attach(launcher.tree(proc.pid))
            except OSError as e:
                self.say(f"warning: {host.label}'s memory and process count are not bounded: its cgroup: {e}")
        return proc

    def job_bounds(self) -> bounds.JobBounds:
        """The bounds of the job's hosts, made with its first host; the log says them once, and what is not
        bounded here."""
        if self._bounds is None:
            self._bounds = made = bounds.JobBounds.make(str(self.dir), self.volume_gb())
            hosts = self.cluster.hosts
            for instance_type in sorted({h.instance_type for h in hosts}):
                self.say(made.describe(instance_type, sum(h.instance_type == instance_type for h in hosts)))
            for what in made.unbounded:
                self.say(f"not bounded here: {what}")
            if self.isolation != "namespace":
                self.say("not bounded here: /tmp and /dev/shm (the fallback's hosts write the worker's own)")
            self.say(f"not bounded here: /opt/ml (its data, model, output and checkpoints are on the job root's "
                     f"disk, not a volume of VolumeSizeInGB={self.volume_gb() or 'none'}; a full disk fails the "
                     "job, as a full volume does)")
        return self._bounds

    def volume_gb(self) -> float | None:
        """VolumeSizeInGB of the request's instances (training and processing; None for the others)."""
        config = (self.request.get("ResourceConfig")
                  or (self.request.get("ProcessingResources") or {}).get("ClusterConfig") or {})
        value = config.get("VolumeSizeInGB")
        return float(value) if value else None

    def start_host(self, host: contract.Host, cmd: list[str], env: dict[str, str], cwd: str) -> None:
        """Start one host (its init process and ``cmd`` under it) with its output streamed into its log."""
        proc = self.spawn(host, cmd, env, cwd)
        self.procs[host.label] = proc
        self.sampler.add(host.label, proc.proc, channels=self.channel_bytes(host))
        t = threading.Thread(target=self.reader, args=(host, proc.proc.stdout), daemon=True)
        t.start()
        self.readers.append(t)
        if self.net is not None:
            proc.wait_ready()
            self.settle_network()
            self.net.plug(int(host.label.split("-")[1]), proc.pid)
            for endpoint in self.forwarded_endpoints():
                self.net.forward(proc.pid, endpoint)
        proc.go()

    def run_in_host(self, host: contract.Host, argv: list[str], env: dict[str, str], cwd: str,
                    log: Callable[[str], None]) -> tuple[int, str]:
        """Run one command in ``host`` before its entry point, as the toolkit runs its pre-run steps (pip) inside
        the container: the host's view of the machine, its clean environment and its network (not the
        supervisor's, which holds the worker's secrets); each line into ``log``. Returns (exit code, output)."""
        proc = self.spawn(host, argv, env, cwd)
        n = int(host.label.split("-")[1])
        lines: list[str] = []
        started = time.time()
        try:
            if self.net is not None:
                proc.wait_ready()
                self.settle_network()
                self.net.plug(n, proc.pid)  # no forwarded endpoints: an install reaches the index, not S3
            proc.go()
            assert proc.proc.stdout is not None
            reader = threading.Thread(target=_read_lines, args=(proc.proc.stdout, lines, log), daemon=True,
                                      name="smdist-install-output")
            reader.start()
            code = self.wait_bounded(proc, started)
            reader.join(timeout=10)
        finally:
            os.close(proc.lifeline)
            if self.net is not None:
                self.net.unplug(n)
            self.ran_before += time.time() - started  # the install runs in the container: MaxRuntime counts it
        return code, "\n".join(lines)

    def wait_bounded(self, proc: launcher.HostProcess, started: float) -> int:
        """The exit code of a step run in a host before its entry point (:meth:`run_in_host`), unless
        StopTrainingJob or MaxRuntimeInSeconds (and the kind's own limits) come first, in every phase as on
        SageMaker: then the step's whole process tree is ended (whatever it forked, or left holding its output)
        and :class:`EndedBeforeHosts` raised."""
        import subprocess

        while True:
            try:
                return proc.proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            if self.stop_requested or (self.dir / "stop").exists():
                self.secondary("Stopping", "Stopping the job during its pre-run install")
                end: tuple[str, str, str | None] | None = ("Stopped", "Stopped", None)
            else:
                end = self.limit_reached(started)
            if end is not None:
                launcher.end_tree(proc.pid, stop_grace(), proc.proc)
                raise EndedBeforeHosts(*end)

    def max_runtime(self) -> float | None:
        value = (self.request.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds")
        return float(value) if value else None

    def periodic(self) -> None:
        """Called about every few seconds while hosts run (checkpoint sync, ...)."""

    def end_all(self, grace: float) -> None:
        threads = [threading.Thread(target=launcher.end_tree, args=(p.pid, grace, p.proc)) for p in self.procs.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def watch(self, cluster: contract.Cluster) -> tuple[str, str, str | None]:
        """Wait for the hosts. Returns (status, secondary status, failure reason)."""
        with HostExits(self.procs) as exits:
            return self._watch(cluster, exits)

    def over_limit(self, started: float) -> tuple[str, str, str | None] | None:
        """The job's end, its hosts ended, once a limit is reached while they run (MaxRuntimeInSeconds, which
        counts the seconds of earlier tries, :attr:`ran_before`, too); None while within. ``started``: when
        this try's hosts started. Kinds add theirs."""
        end = self.limit_reached(started)
        if end is not None:
            self.end_all(stop_grace())
        return end

    def limit_reached(self, started: float) -> tuple[str, str, str | None] | None:
        """The job's end once a time limit is reached (said as the Stopping secondary status; nothing ended
        yet): MaxRuntimeInSeconds here, kinds add theirs. ``started``: when the running phase started."""
        max_run = self.max_runtime()
        if max_run and self.ran_before + time.time() - started > float(max_run):
            self.secondary("Stopping", f"Job exceeded MaxRuntimeInSeconds={max_run}")
            return "Stopped", "MaxRuntimeExceeded", None
        return None

    def _watch(self, cluster: contract.Cluster, exits: HostExits) -> tuple[str, str, str | None]:
        started = time.time()
        last_sync = time.time()
        while True:
            if self.stop_requested or (self.dir / "stop").exists():
                self.save(status="Stopping")
                self.secondary("Stopping", f"Stopping the {self.kind} job")
                self.end_all(stop_grace())
                return "Stopped", "Stopped", None
            if self.disk_full_reason is not None:  # a write of the job's failed for want of space
                self.end_all(min(stop_grace(), 5))
                return "Failed", "Failed", self.disk_full_reason
            limit = self.over_limit(started)
            if limit is not None:
                return limit
            codes = {label: p.poll() for label, p in self.procs.items()}
            failed = [(label, c) for label, c in codes.items() if c not in (None, 0)]
            if failed:
                label, code = failed[0]
                host = next(h for h in cluster.hosts if h.label == label)
                self.end_all(min(stop_grace(), 10))
                return "Failed", "Failed", with_network_hint(self.failure_reason(host, code), self.isolation)
            if all(c == 0 for c in codes.values()):
                # each host ended with its entry point (hostinit ends what it left behind): the job is done
                return "Completed", "Completed", None
            if time.time() - last_sync > float(os.environ.get("SMDIST_LOCAL_CHECKPOINT_SYNC", "5")):
                self.periodic()
                last_sync = time.time()
            exits.wait([label for label, c in codes.items() if c is None], WATCH_TICK)

    def failure_reason(self, host: contract.Host, code: int) -> str:
        hosts = [host] + [x for x in self.cluster.hosts if x is not host]  # the failed host first
        out_of_memory = self.out_of_memory(hosts)
        if out_of_memory is not None:
            return out_of_memory
        text = None
        for h in hosts:
            # read inside the host's directory: a failure file linked out of it (/proc/self/environ) is not read
            found = hostfs.read_text(self.host_dir(h), "output/failure", FAILURE_READ_LIMIT)
            if found and found.strip():
                text = found
                break
        if text is None:
            tail = []
            path = self.dir / "logs" / f"{host.label}.jsonl"
            for t in self.readers:
                t.join(timeout=5)
            if path.exists():
                tail = [json.loads(x)["m"] for x in path.read_text().splitlines()[-400:]]
            error_lines = error_excerpt([x for x in tail if x.strip()])
            error_lines += [x for x in tail if x.startswith(HOST_FULL_PREFIX)]  # which bounded path is full
            sig = f" (killed by signal {-code})" if code < 0 else ""
            head = f"ExecuteUserScriptError:\nExitCode {code}{sig}\nHost {host.label} ({host.address})\nErrorMessage \""
            room = FAILURE_LIMIT - len("AlgorithmError: ") - len(head) - 1
            text = head + fit_failure_reason("\n".join(error_lines), room, keep_head=False) + '"'
            self.write_host_file(host, "output/failure", text)  # as the training toolkit does when the script fails
        return fit_failure_reason("AlgorithmError: " + text)

    def out_of_memory(self, hosts: list[contract.Host]) -> str | None:
        """SageMaker's failure reason when the kernel killed a process of one of ``hosts`` for memory, naming
        the first such host and its limit; else None."""
        limits = self._bounds
        if limits is None:
            return None
        for h in hosts:
            if limits.oom_killed(h.label):
                memory = limits.memory_of(h.instance_type)
                self.say(f"{h.label} ran out of memory: the kernel killed a process of it at its limit of "
                         f"{memory / 2**30:.2f} GiB")
                return fit_failure_reason(f"{bounds.OOM_REASON} Host {h.label} ({h.instance_type}) ran out of "
                                          f"memory (its limit here: {memory / 2**30:.2f} GiB).")
        return None

    def write_host_file(self, host: contract.Host, rel: str, text: str) -> None:
        """Write ``rel`` in the host's directory, never through a link the job made (one is left as it is)."""
        try:
            hostfs.write_text(self.host_dir(host), rel, text)
        except OSError as e:
            if diskspace.is_disk_full(e):
                self.disk_full()
                return
            self.say(f"{host.label}: did not write {rel}: {e.strerror or e} (a link the job made?)")

    def host_skipped(self, host: contract.Host) -> Callable[[str], None]:
        """Where :func:`.hostfs.walk` says what it skipped in ``host``'s directory: the job's log, once each."""
        said = self.__dict__.setdefault("_skipped_said", set())

        def say(message: str) -> None:
            if (host.label, message) not in said:
                said.add((host.label, message))
                self.say(f"{host.label}: {message}")

        return say


def serve(cls: type[JobSupervisor], argv: list[str] | None = None) -> int:
    """A kind's supervisor process: run the job (``cls(<job dir>).run()``, which writes its final state),
    then release what it held (:meth:`JobSupervisor.release`). Returns the process's exit code."""
    argv = sys.argv[1:] if argv is None else argv
    supervisor = cls(Path(argv[0]))
    try:
        try:  # what killed supervisors left (pack temporaries, partial objects, multipart uploads): gone now
            # (in the supervisor's own log: other jobs' paths are not this job's business)
            litter.reclaim(supervisor.store.root, say=lambda m: supervisor.log.write(f"litter: {m}\n"))
        except Exception as e:  # noqa: BLE001 - never fatal to this job
            supervisor.log.write(f"litter: could not reclaim what killed supervisors left: {e}\n")
        return supervisor.run()
    except Exception as exc:  # noqa: BLE001 - the job ends with a reason, not with a dead supervisor
        supervisor.fail(exc)
        return 1
    finally:
        try:
            supervisor.release()
        finally:
            with contextlib.suppress(OSError):  # (a full disk: the next start reads the journal whole)
                litter.settle(supervisor.dir)
            diskspace.release_reserve(supervisor.dir)  # the job's final state is written: its reserve goes
