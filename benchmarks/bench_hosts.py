"""What simulated hosts cost, as ratios against baselines measured in the same run.

1. Host setup + teardown: a host whose entry point is ``true``, started and ended as the supervisor does it,
   in both modes (fallback: hostinit only; namespaces: bridge, unshare, mounts, veth, hostinit, bridge
   removal; ``namespace+nat`` also the gateway and the nftables table), against a plain ``subprocess`` start
   of ``true`` (what a host was before: one process tree).
2. An mpi4py allreduce on 2 hosts x 2 processes as a local training job, against the same script started
   directly with ``mpirun -np 4`` on this machine.
3. A DDP job (tests/fixtures/ddp, 2 hosts) as a local training job, against ``torchrun --nproc_per_node 2``
   of the same script.

    sudo .venv/bin/python benchmarks/bench_hosts.py [--repeat 20]

Job times include everything a local job does (supervisor start, staging, packing model.tar.gz), so
ratios 2 and 3 bound what the simulated hosts add from above.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import hostnet, launcher, mpi
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


def cpu() -> float:
    """CPU seconds of this process and its reaped children: what a start costs, whatever the machine's load."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measured(fn, *args) -> tuple[float, float]:
    """(wall, CPU) seconds of one call."""
    c, t = cpu(), time.perf_counter()
    fn(*args)
    return time.perf_counter() - t, cpu() - c


def plain_start(tmp: str) -> None:
    subprocess.Popen(["true"], cwd=tmp, stdin=subprocess.DEVNULL).wait()


def host_start(tmp: str, isolation: str) -> None:
    """One host started and ended; ``namespace+nat`` adds the job's gateway and nftables table (and their
    removal), as a job without network isolation gets them."""
    host_dir = os.path.join(tmp, "hosts", "algo-1")
    os.makedirs(os.path.join(host_dir, "code"), exist_ok=True)
    net = None
    if isolation.startswith("namespace"):
        net, _why = hostnet.JobNetwork.allocate(os.path.join(tmp, uuid.uuid4().hex), 0, nat=isolation.endswith("nat"))
        isolation = "namespace"
    proc = launcher.spawn_host(["true"], env={"PATH": os.defpath}, cwd="/opt/ml/code" if net else host_dir,
                               stdout=None, isolation=isolation, host_dir=host_dir, hostname="algo-1",
                               etc_hosts=None, keep=[tmp])
    if net is not None:
        proc.wait_ready()
        net.settle()
        net.plug(1, proc.pid)
    proc.go()
    proc.proc.wait()
    os.close(proc.lifeline)
    if net is not None:
        net.remove()


def run_job(tmp: str, source: str, entry: str, distribution: dict, hps: dict | None = None) -> float:
    data = Path(tmp, "data")
    data.mkdir(exist_ok=True)
    for i in range(2):
        (data / f"part-{i}.csv").write_text("".join(f"{i},{j},{2 * i + j}\n" for j in range(20)))
    backend = LocalBackend(Path(tmp, "jobs"))
    name = f"bench-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp}/out", entry_point=entry,
                          source_dir=source, image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                          instance_type="ml.m5.xlarge", instance_count=2, hyperparameters=hps or {},
                          distribution=distribution, inputs={"train": f"file://{data}"})
    upload_source(plan.source_dir, entry, plan.source_uri)
    t = time.perf_counter()
    backend.submit("training", plan.request)
    while backend.describe("training", name)["TrainingJobStatus"] not in ("Completed", "Failed", "Stopped"):
        time.sleep(0.05)
    elapsed = time.perf_counter() - t
    status = backend.describe("training", name)
    assert status["TrainingJobStatus"] == "Completed", status.get("FailureReason")
    return elapsed


def direct(cmd: list[str], cwd: str, env: dict | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, env=env)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2, help="runs of each job and of its direct baseline")
    args = parser.parse_args()
    os.environ.setdefault("SMDIST_LOCAL_RUNTIME", "worker")
    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as tmp:
        modes = ["none"] + (["namespace"] if launcher.namespace_prefix() else [])
        if launcher.namespace_prefix() and hostnet.nat_unavailable() is None:
            modes.append("namespace+nat")
        host_start(tmp, modes[-1])  # imports once, as a supervisor does
        runs = [measured(plain_start, tmp) for _ in range(args.repeat)]
        base = [statistics.median(x) for x in zip(*runs)]
        print(f"host start+end, plain process (baseline): {base[0] * 1000:.1f} ms wall, {base[1] * 1000:.1f} ms CPU "
              f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        for mode in modes:
            runs = [measured(host_start, tmp, mode) for _ in range(args.repeat)]
            wall, used = (statistics.median(x) for x in zip(*runs))
            print(f"host start+end, {mode:13s}: {wall * 1000:.1f} ms wall (ratio {wall / base[0]:.0f}x), "
                  f"{used * 1000:.1f} ms CPU (ratio {used / max(base[1], 1e-4):.0f}x)")
        if not launcher.namespace_prefix():
            print(f"(namespaces unavailable here: {launcher.namespaces_available()})")

        mpi_src = str(REPO / "tests" / "fixtures" / "mpi")
        if mpi.missing() is None:
            job = min(run_job(tmp, mpi_src, "allreduce.py", {"mpi": {"enabled": True, "processes_per_host": 2}})
                      for _ in range(args.jobs))
            ref = min(direct([mpi.mpirun_path(), "--allow-run-as-root", "--host", "localhost:4", "-np", "4",
                              "--bind-to", "none", sys.executable, "-m", "mpi4py", "allreduce.py"], mpi_src)
                      for _ in range(args.jobs))
            print(f"mpi4py allreduce 2x2: local job {job:.2f} s, mpirun directly {ref:.2f} s, ratio {job / ref:.2f}x")
        else:
            print(f"MPI skipped: {mpi.missing()}")

        ddp_src = str(REPO / "tests" / "fixtures" / "ddp")
        data = Path(tmp, "data")
        job = min(run_job(tmp, ddp_src, "train.py", {"torch_distributed": {"enabled": True}}, {"epochs": 1})
                  for _ in range(args.jobs))
        env = dict(os.environ, SM_MODEL_DIR=tmp, SM_CHANNEL_TRAIN=str(data), SM_CURRENT_HOST="localhost")
        ref = min(direct([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py",
                          "--epochs", "1"], ddp_src, env) for _ in range(args.jobs))
        print(f"DDP 2 ranks: local job (2 hosts) {job:.2f} s, torchrun directly {ref:.2f} s, ratio {job / ref:.2f}x")


if __name__ == "__main__":
    main()
