"""Local distributed training wall time vs the same script under plain torchrun, in one run.

The job: tests/fixtures/ddp/train.py on 2 ranks. Local backend: 2 simulated hosts x 1 process
(torchrun per host, staging, supervisor, model.tar.gz). Baseline: `torchrun --nnodes 1
--nproc_per_node 2` of the same script over the same data, with only the variables it reads.
Usage: python benchmarks/bench_local_training.py [repeats]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

from _common import report

SCRIPT_DIR = os.path.join(REPO, "tests", "fixtures", "ddp")


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    from airflow_smdist.backends.local import LocalBackend
    from airflow_smdist.sourcedir import upload_source
    from airflow_smdist.specs.training import build_training

    work = tempfile.mkdtemp(prefix="smdist-bench-")
    data = os.path.join(work, "data")
    os.makedirs(data)
    for i in range(4):
        with open(os.path.join(data, f"part-{i}.csv"), "w") as f:
            f.writelines(f"{i * 0.1},{j * 0.01},{i + j * 0.5}\n" for j in range(2000))

    def plain():
        model = tempfile.mkdtemp(dir=work)
        env = {**os.environ, "SM_MODEL_DIR": model, "SM_CHANNEL_TRAIN": data, "SM_CURRENT_HOST": "localhost"}
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
                        "--master_addr", "127.0.0.1", "--master_port", "29517", os.path.join(SCRIPT_DIR, "train.py"),
                        "--epochs", "3"], check=True, env=env, capture_output=True)

    backend = LocalBackend(os.path.join(work, "jobs"))

    def local():
        name = f"bench-{uuid.uuid4().hex[:8]}"
        plan = build_training(job_name=name, role="arn:aws:iam::123456789012:role/R", output_path=f"file://{work}/out",
                              entry_point="train.py", source_dir=SCRIPT_DIR, instance_count=2,
                              image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1",
                              hyperparameters={"epochs": 3}, distribution={"torch_distributed": {"enabled": True}},
                              inputs={"train": {"s3_uri": f"file://{data}", "distribution": "FullyReplicated"}},
                              checkpoint_s3_uri=f"file://{work}/ckpt/{name}")
        upload_source(plan.source_dir, plan.entry_point, plan.source_uri)
        backend.submit("training", plan.request)
        while True:
            d = backend.describe("training", name)
            if d["TrainingJobStatus"] in ("Completed", "Failed", "Stopped"):
                break
            time.sleep(0.1)
        assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")

    base, ours = [], []
    for _ in range(repeats):  # interleaved, so load on the machine hits both alike
        t = time.perf_counter(); plain(); base.append(time.perf_counter() - t)  # noqa: E702
        t = time.perf_counter(); local(); ours.append(time.perf_counter() - t)  # noqa: E702
    b, o = statistics.median(base), statistics.median(ours)
    report("Local distributed training vs plain torchrun (2 ranks, same script and data)", [
        ("plain torchrun, 1 node x 2 procs (baseline)", f"{b:.2f} s", "1.00"),
        ("local backend, 2 simulated hosts x 1 proc", f"{o:.2f} s", f"{o / b:.2f}"),
    ], note=f"median of {repeats}, interleaved. The local job adds the supervisor, staging (per-host copies "
            "of the channel), one torchrun per host, checkpoint sync and model.tar.gz upload. "
            + json.dumps({"baseline_runs": [round(x, 2) for x in base], "local_runs": [round(x, 2) for x in ours]}))


if __name__ == "__main__":
    main()
