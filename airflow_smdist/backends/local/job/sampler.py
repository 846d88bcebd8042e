"""Per-host utilization of a local job, sampled while its hosts run: the local stand-in for the instance
metrics SageMaker publishes to CloudWatch (``CPUUtilization``, ``MemoryUtilization``, ...).

One daemon thread per job supervisor. Every ``SMDIST_LOCAL_SAMPLE_INTERVAL`` seconds (default 0.5) it
walks each host's process tree with psutil and appends one line per host to ``utilization.jsonl`` in the
job directory::

    {"t": 1733215000.1, "host": "algo-1", "cpu_percent": 97.5, "cpu_seconds": 12.3,
     "rss_bytes": 123456789, "read_bytes": 4096, "write_bytes": 1024, "processes": 3,
     "channel_bytes": 16777216, "channels": {"train": 16777216}}

``cpu_percent`` is CPU time over wall time since the previous sample, in percent of one core (SageMaker's
``CPUUtilization`` is also a sum over cores: 400 % on four busy cores). ``read_bytes``/``write_bytes`` are
cumulative bytes the host's processes read and wrote through system calls (``read_chars``/``write_chars``:
page-cache hits count, so a channel file read twice counts twice, as a data pipeline sees it). Counters
of processes that ended between samples are kept from their last sample, so totals never go down.
``channel_bytes`` (training jobs) is the size of the input data staged for the host
(``/opt/ml/input/data/<channel>``, per channel in ``channels``): a host's reads count its interpreter's
imports too, so the data it was given, and how many times over it read that much, is what says whether the
shards are even.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil

UTILIZATION_FILE = "utilization.jsonl"


def sample_interval() -> float:
    return max(0.05, float(os.environ.get("SMDIST_LOCAL_SAMPLE_INTERVAL", "0.5")))


class _HostCounters:
    """Cumulative counters of one host's processes, surviving the processes that ended.

    Linux adds a reaped child's CPU time (``children_*``) and I/O (``/proc/<pid>/io``) to its parent, so a
    process that ended counts through its nearest ancestor still alive in the tree, and on its own (its last
    sample) when none is. Totals are kept monotonic (a zombie not yet reaped would dip them)."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[int, tuple[float, int, int]]] = {}  # pid -> (ppid, (cpu s, read, written))
        self.ended = [0.0, 0, 0]
        self.total = [0.0, 0, 0]

    @staticmethod
    def _read(p: psutil.Process) -> tuple[int, tuple[float, int, int], int] | None:
        import psutil

        try:
            with p.oneshot():
                cpu = p.cpu_times()
                io = p.io_counters()
                return p.ppid(), (cpu.user + cpu.system + cpu.children_user + cpu.children_system,
                                  getattr(io, "read_chars", io.read_bytes),
                                  getattr(io, "write_chars", io.write_bytes)), p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None

    def _absorbed(self, pid: int, seen: dict[int, tuple[int, tuple[float, int, int]]]) -> bool:
        """Whether an ancestor of the ended ``pid`` (by the last known parents) is still alive: the chain of
        reaps carries its counts up to that ancestor (a child ending with its parent in one interval too)."""
        parent, hops = self.last[pid][0], 0
        while parent in self.last and hops < 64:
            if parent in seen:
                return True
            parent, hops = self.last[parent][0], hops + 1
        return parent in seen

    def update(self, procs: list[psutil.Process]) -> tuple[float, int, int, int]:
        seen: dict[int, tuple[int, tuple[float, int, int]]] = {}
        rss = 0
        for p in procs:
            read = self._read(p)
            if read is not None:
                seen[p.pid] = (read[0], read[1])
                rss += read[2]
        for pid, (_ppid, values) in self.last.items():
            if pid not in seen and not self._absorbed(pid, seen):  # ended, and nothing alive absorbs it
                self.ended = [a + b for a, b in zip(self.ended, values)]
        self.last = seen
        current = [sum(v[1][i] for v in seen.values()) + self.ended[i] for i in range(3)]
        self.total = [max(a, b) for a, b in zip(self.total, current)]
        return float(self.total[0]), int(self.total[1]), int(self.total[2]), rss


class UtilizationSampler:
    """Samples every registered host until all of them have ended (then the thread stops by itself)."""

    def __init__(self, job_dir: Path) -> None:
        self.path = Path(job_dir) / UTILIZATION_FILE
        self.hosts: dict[str, Any] = {}  # label -> Popen
        self.channels: dict[str, dict[str, int]] = {}  # label -> bytes staged per channel
        self.counters: dict[str, _HostCounters] = {}
        self.previous: dict[str, tuple[float, float]] = {}  # label -> (time, cpu seconds)
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.interval = sample_interval()

    def add(self, label: str, proc: Any, channels: dict[str, int] | None = None) -> None:
        with self.lock:
            self.hosts[label] = proc
            if channels is not None:
                self.channels[label] = dict(channels)
            self.counters[label] = _HostCounters()
            self.previous.pop(label, None)  # a host started again (a rehearsed interruption) counts from zero
        if self.thread is None or not self.thread.is_alive():  # (it ends once every host it had is gone)
            self.thread = threading.Thread(target=self._run, name="smdist-sampler", daemon=True)
            self.thread.start()

    def _tree(self, proc: Any) -> list[psutil.Process]:
        import psutil  # in the sampler's thread: a job's start does not wait for it

        try:
            root = psutil.Process(proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def sample_once(self) -> bool:
        """One line per host; False once every host's tree is gone."""
        now = time.time()
        alive = False
        lines = []
        with self.lock:
            hosts, channels = dict(self.hosts), dict(self.channels)
        for label, proc in hosts.items():
            procs = self._tree(proc)
            alive = alive or bool(procs) or getattr(proc, "returncode", 0) is None
            cpu, read, written, rss = self.counters[label].update(procs)
            t0, c0 = self.previous.get(label, (now, cpu))
            percent = 100.0 * (cpu - c0) / (now - t0) if now > t0 else 0.0
            self.previous[label] = (now, cpu)
            lines.append({"t": now, "host": label, "cpu_percent": round(max(percent, 0.0), 2),
                          "cpu_seconds": round(cpu, 3), "rss_bytes": rss, "read_bytes": read,
                          "write_bytes": written, "processes": len(procs)})
            if label in channels:
                lines[-1].update(channel_bytes=sum(channels[label].values()), channels=channels[label])
        with open(self.path, "a") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        return alive

    def _run(self) -> None:
        while True:
            try:
                if not self.sample_once():
                    return
            except OSError:  # the job directory went away (job reclaimed): nothing left to sample for
                return
            time.sleep(self.interval)


def read_utilization(job_dir: Path) -> list[dict[str, Any]]:
    from airflow_smdist.backends.local.store import read_jsonl

    return read_jsonl(Path(job_dir) / UTILIZATION_FILE)[0]
