"""The local backend for an Airflow worker that is not root (the official Airflow image runs as uid 50000).

These tests switch to real non-root uids in forked children (``os.setuid``), so they need root, as CI has.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import tempfile
from pathlib import Path

import psutil  # noqa: F401 - imported before the forks: a child that is no longer root may not read the venv
import pytest

from airflow_smdist.backends.local.job import supervisor
from airflow_smdist.backends.local.job.supervisor import PortTableError, free_port, release_ports

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to other uids needs root")

#: uids of no account here, as a worker in a container may have (the official Airflow image's is 50000)
USER_A, USER_B = 50000, 50001


class AsUser:
    """``fn(*args)`` in a forked child running as ``uid`` (its own group, no supplementary groups); its result
    (or its exception, as "ExcType: message") comes back as JSON. The child stays alive, holding what it
    reserved, until :meth:`finish` ends it; with ``go``, it waits for a byte on that pipe before it calls ``fn``."""

    def __init__(self, uid: int, fn, *args, go: int | None = None) -> None:
        out_r, out_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns into pytest
            try:
                os.close(out_r)
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                if go is not None:
                    os.read(go, 1)
                try:
                    result = {"value": fn(*args)}
                except Exception as exc:  # noqa: BLE001 - reported to the parent
                    result = {"error": f"{type(exc).__name__}: {exc}"}
                os.write(out_w, json.dumps(result).encode() + b"\n")
                while True:  # alive, as a job that holds its ports, until finish()
                    signal.pause()
            finally:
                os._exit(1)
        os.close(out_w)
        self.out = os.fdopen(out_r)

    def result(self) -> dict:
        line = self.out.readline()
        assert line, "the child died before it answered"
        return json.loads(line)

    def finish(self) -> None:
        self.out.close()
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


@pytest.fixture
def shared_tmp(monkeypatch):
    """A fresh directory like /tmp (world-writable, sticky) as the port tables' place."""
    base = Path(tempfile.mkdtemp(prefix="smdist-nonroot-"))
    base.chmod(0o1777)
    monkeypatch.setattr(supervisor, "PORTS_BASE", base)
    yield base
    import shutil

    shutil.rmtree(base, ignore_errors=True)


def free_preferred() -> int:
    """A port nothing listens on, to prefer (a fixed one could be taken on a busy machine)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def test_free_port_as_two_non_root_users_after_root_gives_each_its_own_port(shared_tmp):
    """What issue 30 saw: a machine-wide table made by root first; another user's job then died with a bare
    PermissionError. Here root reserves first (and leaves the old machine-wide files, root's, 0600), then two
    non-root users reserve while root's and each other's reservations are held, none of them bound yet:
    all succeed, and no two get the same port."""
    for legacy in ("smdist-ports.json", "smdist-ports.lock"):
        (shared_tmp / legacy).write_text("{}")
        (shared_tmp / legacy).chmod(0o600)
    preferred = free_preferred()
    ports = [free_port(preferred)]
    users = []
    try:
        for uid in (USER_A, USER_B):
            users.append(AsUser(uid, free_port, preferred))
            result = users[-1].result()
            assert "error" not in result, result
            ports.append(result["value"])
    finally:
        for u in users:
            u.finish()
        release_ports()
    assert len(set(ports)) == 3, ports
    assert ports[0] == preferred
    for uid in (USER_A, USER_B):  # each user's table is its own, readable by the others
        st = os.stat(shared_tmp / f"smdist-ports-{uid}" / "ports.json")
        assert st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o644


def test_free_port_as_two_users_at_the_same_moment_gives_distinct_ports(shared_tmp):
    """Two users' jobs reserving at once (both released by one write to a pipe), many times over: never the
    same port (each writes its reservation, then looks at the other's; one always sees the other)."""
    for _ in range(10):
        preferred = free_preferred()
        go_r, go_w = os.pipe()
        users = [AsUser(uid, free_port, preferred, go=go_r) for uid in (USER_A, USER_B)]
        os.close(go_r)
        try:
            os.write(go_w, b"gg")
            results = [u.result() for u in users]
        finally:
            os.close(go_w)
            for u in users:
                u.finish()
        assert all("error" not in r for r in results), results
        assert results[0]["value"] != results[1]["value"], results


def test_free_port_gives_back_another_users_port_once_its_job_is_gone(shared_tmp):
    """A reservation lasts as long as the process that made it: once user A's job has ended, user B may have
    its port (A's table still lists it: a dead owner holds nothing)."""
    preferred = free_preferred()
    a = AsUser(USER_A, free_port, preferred)
    assert a.result() == {"value": preferred}
    a.finish()  # A's process ends without releasing
    b = AsUser(USER_B, free_port, preferred)
    try:
        assert b.result() == {"value": preferred}
    finally:
        b.finish()


def test_an_unusable_port_table_location_is_a_clear_error(shared_tmp):
    """The user's table directory made by someone else, or a temp directory the user cannot write: an error
    that names the place and the way out, not a bare PermissionError."""
    taken = shared_tmp / f"smdist-ports-{USER_A}"
    taken.mkdir(mode=0o755)  # root's, as a planted or stale directory would be
    a = AsUser(USER_A, free_port, free_preferred())
    try:
        error = a.result()["error"]
    finally:
        a.finish()
    assert error.startswith("PortTableError: ") and str(taken) in error and "owner uid 0" in error, error
    assert "remove" in error and "TMPDIR" in error

    shared_tmp.chmod(0o755)  # a temp directory only root may write
    b = AsUser(USER_B, free_port, free_preferred())
    try:
        error = b.result()["error"]
    finally:
        b.finish()
    assert error.startswith("PortTableError: ") and f"smdist-ports-{USER_B}" in error and "cannot be made" in error
    assert issubclass(PortTableError, RuntimeError)


def test_release_ports_without_reservations_makes_no_table(shared_tmp):
    """A namespaced job reserves nothing, and its release leaves nothing behind for other users to trip on
    (the old table was made by every training job's release, whoever ran it first owning it)."""
    release_ports()
    assert list(shared_tmp.iterdir()) == []


def test_the_mpi_agent_server_of_a_non_root_worker_starts_after_a_root_worker_ran(tmp_path):
    """A root worker's MPI job leaves /run/smdist (root's, 0700); a non-root worker's MPI job then starts its
    agent server (Open MPI's rsh agent talks to it) on a socket of its own in the temp directory, where the
    fallback's hosts see it, instead of failing to bind in root's directory."""
    from airflow_smdist.backends.local.job import mpi

    os.makedirs("/run/smdist", mode=0o700, exist_ok=True)  # as any root run of a job leaves it

    def start() -> str:
        server = mpi.AgentServer(tmp_path, "none")
        server.start()
        try:
            return server.path
        finally:
            server.close()

    a = AsUser(USER_A, start)
    try:
        result = a.result()
    finally:
        a.finish()
    assert "error" not in result, result
    assert os.path.dirname(result["value"]) == tempfile.gettempdir()
