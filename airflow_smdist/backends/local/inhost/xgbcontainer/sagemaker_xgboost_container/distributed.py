"""``sagemaker_xgboost_container.distributed``: XGBoost's Rabit ring over the job's hosts, for scripts.

Written by airflow-smdist from the behaviour of the container's module (aws/sagemaker-xgboost-container,
Apache-2.0, ``src/sagemaker_xgboost_container/distributed.py`` at ``f7a93a21e50e44b4077f0889a7f676cad8c226f3``,
the ``1.7-1`` branch, and its xgboost 3.x port at ``cb8df91cd44c7b01c53ccf321fd3fdf3eb78adae``); the public names
and signatures are the container's:

* :func:`wait_hostname_resolution` resolves every host, retrying (exponential back-off, up to 15 minutes);
* :func:`rabit_run` runs ``exec_fun(**args)`` in two rings: the first over every host, where each says whether it
  has data (``include_in_training``); a host without leaves (a warning, exit code 0); the second, on the next
  port, over the hosts with data, inside which ``xgb.train`` trains one model across them; with one host with
  data, no second ring. ``update_rabit_args=True`` adds ``is_master`` to ``args``;
* :class:`Rabit` (a context manager, returning a :class:`RabitHelper`): the first of the sorted hosts is the
  master and runs the tracker on ``port`` (default 9099); every host waits for the tracker
  (``max_connect_attempts``, ``connect_retry_timeout``), then joins the ring; with one host there is no tracker
  and no ring (rank 0, as the container's 3.x port does).

Where it differs, by design: the logger's format is ``%(name)s [host]: %(message)s`` (the 1.7-1 container's
``%(name) [host]`` cannot format a record); ranks follow the sorted host list (task ids), so the master is rank
0; the xgboost 1.x tracker is reached with the tracker protocol's ``print`` command (a bare TCP connection, which
the container's own patched tracker tolerated, stalls xgboost 1.7's); a ring left by an exception is not shut
down (the container waits for the tracker, which would wait for the hosts still training: the local backend
ends the job's other hosts when one fails); and each host says on stderr which ring it joined, with its rank.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import sys
import time

TYPE_CHECKING = False  # typing's own, without importing typing at run time (mypy reads it so)
if TYPE_CHECKING:
    from types import ModuleType, TracebackType
    from typing import Any, Callable, Protocol

    from typing_extensions import TypeIs
    from xgboost.tracker import RabitTracker

    class _PythonTracker(Protocol):
        """xgboost 1.x's Python ``xgboost.tracker.RabitTracker`` (a thread), which the installed xgboost's
        annotations (2.x+, the C++ tracker) do not describe."""

        def worker_envs(self) -> dict[str, str | int]: ...

        def start(self, n_workers: int) -> None: ...

        def join(self) -> None: ...

LOCAL_HOSTNAME = "127.0.0.1"
DEFAULT_PORT = 9099
#: the tracker protocol's magic number (xgboost/tracker.py, rabit)
_MAGIC = 0xFF99


def _dns_lookup(host: str) -> str:
    """``socket.gethostbyname`` of ``host``, retried as the container does (exponential wait from 100 ms, at most
    30 s apart, for up to 15 minutes)."""
    deadline, wait = time.time() + 15 * 60, 0.1
    while True:
        try:
            return socket.gethostbyname(host)
        except OSError:
            if time.time() + wait > deadline:
                raise
            time.sleep(wait)
            wait = min(wait * 2, 30.0)


def wait_hostname_resolution(sm_hosts: list[str]) -> None:
    """Wait until every host of the cluster resolves (a cluster's names come up as it boots)."""
    for host in sm_hosts:
        _dns_lookup(host)


def rabit_run(exec_fun: Callable[..., object], args: dict[str, Any], include_in_training: bool, hosts: list[str],
              current_host: str, first_port: int | None = None, second_port: int | None = None,
              max_connect_attempts: int | None = None, connect_retry_timeout: float = 3,
              update_rabit_args: bool = False) -> None:
    """Run ``exec_fun(**args)`` after initializing Rabit (see the module docstring).

    :param exec_fun: what to run in the ring (``xgb.train`` must run in this process to use it)
    :param args: its keyword arguments (with ``is_master`` added when ``update_rabit_args``)
    :param include_in_training: whether this host trains (it has data)
    :param hosts: the cluster's hosts
    :param current_host: this host
    :param first_port: the first ring's tracker port (9099 when None)
    :param second_port: the second ring's (the first's + 1 when None)
    :param max_connect_attempts: tries to reach the tracker (None: no limit)
    :param connect_retry_timeout: seconds between tries
    :param update_rabit_args: add ``is_master`` to ``args``
    """
    with Rabit(hosts=hosts, current_host=current_host, port=first_port, max_connect_attempts=max_connect_attempts,
               connect_retry_timeout=connect_retry_timeout) as rabit:
        hosts_with_data = rabit.synchronize({"host": rabit.current_host, "include_in_training": include_in_training})
        hosts_with_data = [record["host"] for record in hosts_with_data if record["include_in_training"]]
        previous_port = rabit.master_port

    if not include_in_training:
        logging.warning("Host {} not being used for distributed training.".format(current_host))
        sys.exit(0)

    second_rabit_port = second_port if second_port else previous_port + 1
    if len(hosts_with_data) > 1:
        with Rabit(hosts=hosts_with_data, current_host=current_host, port=second_rabit_port,
                   max_connect_attempts=max_connect_attempts, connect_retry_timeout=connect_retry_timeout) as cluster:
            if update_rabit_args:
                args.update({"is_master": cluster.is_master})
            exec_fun(**args)
    elif len(hosts_with_data) == 1:
        logging.debug("Only 1 host with training data, starting single node training job from: {}".format(current_host))
        if update_rabit_args:
            args.update({"is_master": True})
        exec_fun(**args)
    else:
        raise RuntimeError("No hosts received training data.")


def _collective() -> ModuleType:
    from xgboost import collective

    return collective


def _xgboost_major() -> int:
    import xgboost

    return int(xgboost.__version__.split(".")[0])


class RabitHelper(object):
    """What :class:`Rabit` returns: ``is_master``, ``rank``, ``current_host``, ``master_port`` and
    :meth:`synchronize`."""

    def __init__(self, is_master: bool, current_host: str, master_port: int, distributed: bool = True) -> None:
        self.is_master = is_master
        self.current_host = current_host
        self.master_port = master_port
        self.rank = _collective().get_rank() if distributed else 0
        self.world_size = _collective().get_world_size() if distributed else 1

    def synchronize(self, data: Any) -> list[Any]:
        """Every host's ``data`` (JSON-serializable), in rank order: each rank broadcasts its own in turn."""
        if self.world_size == 1:
            return [data]
        collective = _collective()
        results = []
        for i in range(self.world_size):
            sent = json.dumps(data) if self.rank == i else ""
            if self.rank == i:
                logging.debug("Broadcasting data from self ({}) to others".format(self.rank))
            else:
                logging.debug("Receiving data from {}".format(i))
            results.append(json.loads(str(collective.broadcast(sent, i))))
        return results


class Rabit(object):
    """Context manager for one Rabit ring (see the module docstring)."""

    @staticmethod
    def _get_logger(current_host: str) -> logging.Logger:
        logging.basicConfig(format="%(name)s [{}]: %(message)s".format(current_host))
        return logging.getLogger("RabitContextManager")

    def __init__(self, hosts: list[str], current_host: str | None = None, master_host: str | None = None,
                 port: int | None = None, max_connect_attempts: int | None = None,
                 connect_retry_timeout: float = 3) -> None:
        """:param hosts: the ring's hostnames
        :param current_host: this host (127.0.0.1 when not given)
        :param master_host: the tracker's host (the first of the sorted hosts when not given)
        :param port: the tracker's port (9099 when not given)
        :param max_connect_attempts: tries to reach the tracker (None: no limit; else > 0)
        :param connect_retry_timeout: seconds between tries"""
        if not current_host:
            current_host = LOCAL_HOSTNAME
        self.current_host = current_host
        self.logger = self._get_logger(self.current_host)
        self.logger.debug("Found current host.")
        self.hosts = sorted(hosts)
        self.n_workers = len(self.hosts)
        self.logger.debug("Found hosts: {} [{}]".format(self.hosts, self.n_workers))
        if not master_host:
            master_host = self.hosts[0]
        self.master_host = master_host
        self.is_master_host = self.current_host == self.master_host
        self.logger.debug("Is Master: {}".format(self.is_master_host))
        self.logger.debug("Master: {}".format(self.master_host))
        if port is None:
            port = DEFAULT_PORT
            self.logger.debug("No port specified using: {}".format(port))
        else:
            self.logger.debug("Using provided port: {}".format(port))
        self.port = port
        if max_connect_attempts is None or max_connect_attempts > 0:
            self.max_connect_attempts = max_connect_attempts
        else:
            raise ValueError("max_connect_attempts must be None or an integer greater than 0.")
        self.connect_retry_timeout = connect_retry_timeout
        self.rabit_context: RabitTracker | _PythonTracker | None = None
        self._joined = False

    # -- starting ---------------------------------------------------------------------------------------------
    def start(self) -> RabitHelper:
        """Start the tracker on the master host, wait for it from every host, join the ring; a
        :class:`RabitHelper` of this host's place in it."""
        self.rabit_context = None
        self._joined = False
        if self.n_workers == 1:
            self.logger.debug("One host: no tracker, no ring.")
            return RabitHelper(True, self.current_host, self.port, distributed=False)
        major = _xgboost_major()
        tracker_ip = _dns_lookup(self.master_host)
        if self.is_master_host:
            self.logger.debug("Master host. Starting Rabit Tracker.")
            self.rabit_context = self._start_tracker(major, tracker_ip)
        self.logger.debug("Starting parameter server.")
        self._wait_for_tracker(major)
        task_id = "{:06d}".format(self.hosts.index(self.current_host)) if self.current_host in self.hosts else "NULL"
        if major < 2:
            _collective().init(DMLC_TRACKER_URI=tracker_ip, DMLC_TRACKER_PORT=str(self.port), DMLC_TASK_ID=task_id)
        else:
            _collective().init(dmlc_communicator="rabit", dmlc_tracker_uri=tracker_ip, dmlc_tracker_port=self.port,
                               dmlc_task_id=task_id)
        self._joined = True
        helper = RabitHelper(self.is_master_host, self.current_host, self.port)
        self.logger.debug("Rabit started - Rank {}".format(helper.rank))
        sys.stderr.write("RabitContextManager [{}]: joined the Rabit ring of {} hosts ({}) through the tracker on "
                         "{}:{} as rank {} of {}\n".format(self.current_host, self.n_workers, ", ".join(self.hosts),
                                                           self.master_host, self.port, helper.rank,
                                                           helper.world_size))
        sys.stderr.flush()
        self.logger.debug("Executing user code")
        return helper

    def _start_tracker(self, major: int, tracker_ip: str) -> RabitTracker | _PythonTracker:
        from xgboost.tracker import RabitTracker

        if major < 2:  # the Python tracker: its thread accepts the workers (start(n)), join() waits for their end
            # (xgboost 1.x's class, which the annotations of the xgboost type-checked here, 2.x+, do not describe)
            python_tracker_class: Any = RabitTracker
            python_tracker: _PythonTracker = python_tracker_class(host_ip=tracker_ip, n_workers=self.n_workers,
                                                                  port=self.port, sortby="task")
            self.logger.info("Rabit slave environment: {}".format(python_tracker.worker_envs()))
            python_tracker.start(self.n_workers)
            return python_tracker
        else:  # the C++ tracker
            tracker = RabitTracker(n_workers=self.n_workers, host_ip=tracker_ip, port=self.port, sortby="task")
            tracker.start()
            self.logger.info("Rabit slave environment: {}".format(tracker.worker_args()))
        return tracker

    def _wait_for_tracker(self, major: int) -> None:
        attempt = 0
        while self.max_connect_attempts is None or attempt < self.max_connect_attempts:
            self.logger.debug("Checking if RabitTracker is available.")
            if self._reach_tracker(major):
                self.logger.info("Connected to RabitTracker.")
                return
            self.logger.info("Failed to connect to RabitTracker on attempt {}".format(attempt))
            attempt += 1
            self.logger.info("Sleeping for {} sec before retrying".format(self.connect_retry_timeout))
            time.sleep(self.connect_retry_timeout)
        self.logger.error("Failed to connect to Rabit Tracker after %s attempts", self.max_connect_attempts)
        raise Exception("Failed to connect to Rabit Tracker")

    def _reach_tracker(self, major: int) -> bool:
        """Whether the tracker answers: xgboost 1.x's Python tracker reads a whole request from every connection
        (a bare connection stalls it), so the probe is the protocol's ``print`` command, which it prints; the
        C++ tracker of xgboost 2+ takes a bare connection."""
        try:
            with socket.create_connection((self.master_host, self.port), timeout=30) as s:
                if major >= 2:
                    return True
                s.sendall(struct.pack("@i", _MAGIC))
                if struct.unpack("@i", _recv(s, 4))[0] != _MAGIC:
                    return False
                message = "RabitTracker: {} reached the tracker".format(self.current_host)
                s.sendall(struct.pack("@ii", -1, -1) + _string("NULL") + _string("print") + _string(message))
                return True
        except OSError:
            return False

    # -- stopping ---------------------------------------------------------------------------------------------
    def stop(self, failed: bool = False) -> None:
        """Leave the ring (the tracker ends when every host has); the master waits for its tracker. After an
        exception, nothing is waited for (see the module docstring)."""
        self.logger.debug("Shutting down parameter server.")
        if failed or not self._joined:
            return
        _collective().finalize()
        self._joined = False
        tracker, self.rabit_context = self.rabit_context, None
        if tracker is None:
            return
        if _is_cpp_tracker(tracker):
            tracker.wait_for()
            tracker.free()
        else:
            tracker.join()

    def __enter__(self) -> RabitHelper:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc_value: BaseException | None,
                 exc_traceback: TracebackType | None) -> None:
        self.stop(failed=exc_type is not None and not issubclass(exc_type, SystemExit))


def _is_cpp_tracker(tracker: RabitTracker | _PythonTracker) -> TypeIs[RabitTracker]:
    """Whether ``tracker`` is xgboost 2+'s C++ tracker (``wait_for``, ``free``), not 1.x's Python thread."""
    return hasattr(tracker, "wait_for")


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("the tracker closed the connection")
        data += chunk
    return data


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("@i", len(raw)) + raw
