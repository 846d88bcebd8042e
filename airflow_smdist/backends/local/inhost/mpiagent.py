"""The rsh agent Open MPI uses to start its daemons on the other simulated hosts (no sshd).

``mpirun`` on the first host runs ``<agent> [ssh options] <host> <command>`` for every other host, as it
would run ``ssh``. This program (standard library only, run with ``python -I -S``) hands the command and
its own stdin/stdout/stderr to the job's supervisor over a Unix socket; the supervisor starts the command
inside the target host (``nsenter`` into its namespaces, or directly in the fallback) with that host's
environment, and sends back its exit status, which this program exits with.

``mpiagent.py --wait <done file>`` is what the other hosts run meanwhile, as the training toolkit's MPI
worker runner does: it returns once the daemon started on its host has ended.
"""

from __future__ import annotations

import array
import json
import os
import socket
import sys
import time


def run_remote(sock_path: str, argv: list[str]) -> int:
    while argv and argv[0].startswith("-"):  # ssh options (-x, ...): nothing to do without ssh
        argv = argv[1:]
    host, command = argv[0], " ".join(argv[1:])
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(sock_path)
        msg = json.dumps({"host": host, "command": command}).encode() + b"\n"
        s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = s.recv(64)
            if not chunk:
                return 255  # the supervisor went away, as a broken ssh connection would
            reply += chunk
    return int(reply)


def wait_done(done: str) -> int:
    while not os.path.exists(done):
        time.sleep(0.1)
    return 0


def main() -> int:
    if sys.argv[1] == "--wait":
        return wait_done(sys.argv[2])
    return run_remote(sys.argv[1], sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
