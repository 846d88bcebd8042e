"""Fixed cost of a local 1-host training job through the operator, against running its script directly.

Two scripts: a trivial one (prints a line) and one that burns about 2 CPU-seconds. Baseline: ``python
script.py`` in a fresh interpreter. Ours: ``SageMakerDistributedTrainingOperator.execute`` on the local
backend with ``instance_count=1`` and the default ``poll_interval`` (10 s): submit (validation, source upload),
the supervisor, the simulated host, model.tar.gz, and the blocking wait. Runs are interleaved so the
machine's load hits both alike; medians are reported, with the phases of the last local run (from the job's
state transitions) so the overhead can be located. A third way runs the same job with ``insight=False``
(no convergence/utilization digest and insight.png after the job), to show what the insight costs; the fastest
run of each way is reported too (the least disturbed on a shared machine).
Usage: python benchmarks/bench_local_overhead.py [repeats]
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
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

from _common import load_note, report

SCRIPTS = {
    "trivial": "print('hello')\n",
    "2 CPU-s": ("import time\nt = time.process_time()\nx = 0\nwhile time.process_time() - t < 2.0:\n"
                "    x += sum(range(1000))\nprint('done', x > 0)\n"),
}


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    work = tempfile.mkdtemp(prefix="smdist-bench-overhead-")
    os.environ["SMDIST_LOCAL_ROOT"] = os.path.join(work, "jobs")
    os.environ.setdefault("SMDIST_LOCAL_RUNTIME", "worker")  # an own image: run in this interpreter
    from airflow_smdist.backends.local import LocalBackend
    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    dirs = {}
    for label, code in SCRIPTS.items():
        d = os.path.join(work, label.replace(" ", "_"))
        os.makedirs(d)
        with open(os.path.join(d, "train.py"), "w") as f:
            f.write(code)
        dirs[label] = d

    def direct(label):
        subprocess.run([sys.executable, os.path.join(dirs[label], "train.py")], check=True, capture_output=True)

    def local(label, insight=True):
        op = SageMakerDistributedTrainingOperator(
            task_id=f"t{uuid.uuid4().hex[:6]}", entry_point="train.py", source_dir=dirs[label],
            image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", instance_count=1,
            output_path=f"file://{work}/out", print_logs=True, insight=insight)
        ti = SimpleNamespace(dag_id="bench", task_id=op.task_id, map_index=-1, try_number=1,
                             xcom_push=lambda **kw: None)
        result = op.execute({"ti": ti, "run_id": uuid.uuid4().hex})
        assert result["status"] == "Completed", result
        return result["job_name"]

    times = {(label, way): [] for label in SCRIPTS for way in ("direct", "local", "local, insight off")}
    last_job = None
    for _ in range(repeats):
        for label in SCRIPTS:
            t = time.perf_counter()
            direct(label)
            times[(label, "direct")].append(time.perf_counter() - t)
            t = time.perf_counter()
            last_job = local(label)
            times[(label, "local")].append(time.perf_counter() - t)
            t = time.perf_counter()
            local(label, insight=False)
            times[(label, "local, insight off")].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    fast = {k: min(v) for k, v in times.items()}
    rows = []
    for label in SCRIPTS:
        b, o, n = med[(label, "direct")], med[(label, "local")], med[(label, "local, insight off")]
        fb, fo, fn = fast[(label, "direct")], fast[(label, "local")], fast[(label, "local, insight off")]
        rows += [(f"{label} script run directly (baseline), median / fastest", f"{b:.2f} s / {fb:.2f} s", "1.00"),
                 (f"{label} script as a local 1-host job through the operator, median / fastest",
                  f"{o:.2f} s / {fo:.2f} s", f"{o / b:.2f} / {fo / fb:.2f}"),
                 (f"{label} script, same job with insight=False, median / fastest",
                  f"{n:.2f} s / {fn:.2f} s", f"{n / b:.2f} / {fn / fb:.2f}")]
    state = json.loads((LocalBackend().job_dir("training", last_job) / "state.json").read_text())
    phases = [(t["status"], round((t.get("end") or t["start"]) - t["start"], 3)) for t in state["transitions"]]
    report("Local job fixed cost: 1-host training job through the operator vs the script run directly", rows,
           note=f"median and fastest of {repeats}, interleaved; default poll_interval (10 s). {load_note()} Phases of the last "
                f"local job (secondary status, seconds): {phases}. Runs: "
                + json.dumps({f"{k[0]}/{k[1]}": [round(x, 2) for x in v] for k, v in times.items()}))


if __name__ == "__main__":
    main()
