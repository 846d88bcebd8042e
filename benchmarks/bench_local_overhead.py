"""Fixed cost of a local 1-host training job through the operator, against running its script directly.

Two scripts: a trivial one (prints a line) and one that burns about 2 CPU-seconds. Baseline: ``python
script.py`` in a fresh interpreter. Ours: ``SageMakerDistributedTrainingOperator.execute`` on the local
backend with ``instance_count=1`` and the default ``poll_interval`` (10 s): submit (validation, source upload),
the supervisor, the simulated host, model.tar.gz, and the blocking wait. Runs are interleaved so the
machine's load hits both alike; medians are reported, with the phases of the last local run (from the job's
state transitions) so the overhead can be located. A third way runs the same job with ``insight=False``
(no convergence/utilization digest and insight.png after the job), to show what the insight costs; the fastest
run of each way is reported too (the least disturbed on a shared machine).

``--fresh`` runs each job as a real Airflow task does (``airflow tasks run``): in a fresh interpreter of its
own, which imports the provider and whatever the task needs after the job (matplotlib for insight.png) every
time. It reports each way's wall time, the task process's own CPU time (the job's processes excluded) and its
tail: from the job's end (its last state transition) until ``execute`` returned (the wait's latency, the
result and the insight).
Usage: python benchmarks/bench_local_overhead.py [repeats] [--fresh]
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

#: one task in a fresh interpreter: argv = repo, source dir, output path, insight (0/1); prints its numbers
TASK = """
import json, resource, sys, time, uuid
from types import SimpleNamespace
sys.path.insert(0, sys.argv[1])
from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
op = SageMakerDistributedTrainingOperator(
    task_id=f"t{uuid.uuid4().hex[:6]}", entry_point="train.py", source_dir=sys.argv[2],
    image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1", instance_count=1,
    output_path=sys.argv[3], print_logs=True, insight=sys.argv[4] == "1")
ti = SimpleNamespace(dag_id="bench", task_id=op.task_id, map_index=-1, try_number=1, xcom_push=lambda **kw: None)
result = op.execute({"ti": ti, "run_id": uuid.uuid4().hex})
returned = time.time()
assert result["status"] == "Completed", result
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"job": result["job_name"], "returned": returned, "cpu": usage.ru_utime + usage.ru_stime}))
"""

SCRIPTS = {
    "trivial": "print('hello')\n",
    "2 CPU-s": ("import time\nt = time.process_time()\nx = 0\nwhile time.process_time() - t < 2.0:\n"
                "    x += sum(range(1000))\nprint('done', x > 0)\n"),
}


def fresh_task(label_dir: str, output: str, insight: bool) -> dict:
    """One job as one task in a fresh interpreter: wall seconds, the task process's CPU seconds, its tail."""
    from airflow_smdist.backends.local import LocalBackend

    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", TASK, REPO, label_dir, output, "1" if insight else "0"],
                         check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t
    numbers = json.loads(out.stdout.strip().splitlines()[-1])
    state = json.loads((LocalBackend().job_dir("training", numbers["job"]) / "state.json").read_text())
    ended = state["transitions"][-1]["start"]
    return {"wall": wall, "cpu": numbers["cpu"], "tail": numbers["returned"] - ended}


def fresh(repeats: int, work: str, dirs: dict[str, str]) -> None:
    """Each job in its own interpreter (as ``airflow tasks run`` runs a task), insight on and off, against
    the script run directly; interleaved."""
    ways = ("direct", "task", "task, insight off")
    runs: dict[tuple[str, str], list[dict]] = {(label, way): [] for label in SCRIPTS for way in ways}
    for _ in range(repeats):
        for label in SCRIPTS:
            t = time.perf_counter()
            out = subprocess.run([sys.executable, os.path.join(dirs[label], "train.py")], check=True,
                                 capture_output=True)
            runs[(label, "direct")].append({"wall": time.perf_counter() - t})
            assert out.returncode == 0
            for way, insight in (("task", True), ("task, insight off", False)):
                runs[(label, way)].append(fresh_task(dirs[label], f"file://{work}/out", insight))
    rows = []
    for label in SCRIPTS:
        base = statistics.median(r["wall"] for r in runs[(label, "direct")])
        rows.append((f"{label} script run directly in a fresh interpreter (baseline), median wall", f"{base:.2f} s",
                     "1.00"))
        for way in ways[1:]:
            med = {k: statistics.median(r[k] for r in runs[(label, way)]) for k in ("wall", "cpu", "tail")}
            rows.append((f"{label} script as a local 1-host job, one fresh task process each ({way}): median wall / "
                         f"task CPU / tail after the job ended", f"{med['wall']:.2f} s / {med['cpu']:.2f} CPU-s / "
                         f"{med['tail']:.2f} s", f"{med['wall'] / base:.2f}"))
    report("Local job fixed cost, one fresh task process per job (as airflow tasks run)", rows,
           note=f"median of {repeats}, interleaved. {load_note()} Runs: " + json.dumps(
               {f"{k[0]}/{k[1]}": [{m: round(x, 2) for m, x in r.items()} for r in v] for k, v in runs.items()}))


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repeats = int(args[0]) if args else 5
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
    if "--fresh" in sys.argv:
        return fresh(repeats, work, dirs)

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
           note=f"median and fastest of {repeats}, interleaved; default poll_interval (10 s). {load_note()} "
                f"Phases of the last local job (secondary status, seconds): {phases}. Runs: "
                + json.dumps({f"{k[0]}/{k[1]}": [round(x, 2) for x in v] for k, v in times.items()}))


if __name__ == "__main__":
    main()
