"""``mpirun`` for one simulated host: start N ranks of a command with MPI's and torch's rank variables.

SageMaker's MPI-based launchers (mpi, smdistributed, pytorchddp) start ``processes_per_host`` ranks on
every host through mpirun. This machine has no MPI, so each simulated host runs this shim instead: it
starts its local ranks with the variables Open MPI sets (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
_LOCAL_SIZE, _NODE_RANK) and the ones torch.distributed's env:// initialisation reads (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). MPI itself (mpi4py, horovod) is not emulated.

    python -m airflow_smdist.backends.local.inhost.mpishim --np 2 --node-rank 0 --nodes 2 -- python train.py
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

TYPE_CHECKING = False  # typing's own, without importing typing at run time (mypy reads it so)
if TYPE_CHECKING:
    from types import FrameType
    from typing import IO

_out_lock = threading.Lock()


def _forward(stream: IO[bytes]) -> None:
    """Copy one rank's output line by line (as mpirun does), so ranks never interleave mid-line."""
    out = sys.stdout.buffer
    for line in iter(stream.readline, b""):
        with _out_lock:
            out.write(line if line.endswith(b"\n") else line + b"\n")
            out.flush()
    stream.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--np", type=int, required=True, help="ranks on this host")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--node-rank", type=int, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.command[1:] if args.command and args.command[0] == "--" else args.command
    world = args.np * args.nodes
    procs: list[subprocess.Popen[bytes]] = []
    for local in range(args.np):
        rank = args.node_rank * args.np + local
        env = dict(os.environ)
        env.update({
            "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(world),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(local), "OMPI_COMM_WORLD_LOCAL_SIZE": str(args.np),
            "OMPI_COMM_WORLD_NODE_RANK": str(args.node_rank),
            "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(args.np), "GROUP_RANK": str(args.node_rank),
        })
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=_forward, args=(proc.stdout,), daemon=True).start()
        procs.append(proc)

    def forward(signum: int, _frame: FrameType | None) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            forward(signal.SIGTERM, None)
            deadline = time.time() + 10
            while time.time() < deadline and any(p.poll() is None for p in procs):
                time.sleep(0.1)
            for p in procs:
                if p.poll() is None:
                    p.kill()
            return failed[0] if failed[0] > 0 else 128 - failed[0]
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
