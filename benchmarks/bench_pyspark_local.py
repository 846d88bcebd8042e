"""Local PySpark processing job wall time vs the same app under plain ``spark-submit``, in one run.

The app: dags/scripts/pyspark/preprocess.py (+ features.py as --py-files) over a generated churn CSV
(default 200,000 rows in 4 objects), writing train / validation splits. Local backend: a PySparkProcessor
request on ``instance_count`` simulated hosts (default 2): code and configuration uploaded, the job
directory and every host's /opt/ml tree staged (the primary downloads the FullyReplicated input, the idle
hosts link to its copy), spark-submit on the primary with master local[hosts x cores per host], the splits
uploaded at the end. Baseline: the pyspark package's ``spark-submit`` with the same master, --py-files and
--conf, reading the CSV where it lies and writing the splits straight to their destination.

Besides the totals it reports CPU (user + system of each process tree, and of the job's supervisor alone)
and the local job's fixed cost phase by phase: the job's state.json transitions, and the Spark marks (first
log line, SparkContext started, SparkContext stopped) in the host's log and in spark-submit's own output,
each side from its own start. On a shared machine the app phases swing with the load; the CPU ratio and the
platform's phases (submit, Starting, Downloading, Uploading) are the steady measures.

Usage: python benchmarks/bench_pyspark_local.py [repeats] [rows] [instance_count]
"""

from __future__ import annotations

import json
import math
import os
import random
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

SCRIPTS = os.path.join(REPO, "dags", "scripts", "pyspark")
CONF = {"spark.sql.shuffle.partitions": "8", "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false"}


def generate(raw: str, rows: int, files: int) -> None:
    rng = random.Random(42)
    os.makedirs(raw)
    per_file = -(-rows // files)
    for part in range(files):
        with open(os.path.join(raw, f"part-{part:04d}.csv"), "w") as f:
            f.write("customer_id,age,tenure_months,monthly_charges,support_calls,plan,churned\n")
            for i in range(min(per_file, rows - part * per_file)):
                age, tenure = rng.randint(18, 90), rng.randint(0, 72)
                charges, calls = round(rng.uniform(10, 120), 2), rng.randint(0, 9)
                plan = rng.choice(("basic", "standard", "premium"))
                z = -1.5 + 0.35 * calls - 0.04 * tenure + 0.01 * (charges - 60) + (0.6 if plan == "basic" else 0.0)
                f.write(f"{part}-{i},{age},{tenure},{charges},{calls},{plan},"
                        f"{int(rng.random() < 1 / (1 + math.exp(-z)))}\n")


def split_rows(directory: str) -> int:
    n = 0
    for dirpath, _dirs, files in os.walk(directory):
        for f in files:
            if f.startswith("part-") and f.endswith(".csv"):
                with open(os.path.join(dirpath, f)) as fh:
                    n += sum(1 for _ in fh)
    return n


#: log lines that mark a Spark run's phases, in both runs' output (spark-submit's stderr, the host's log)
MARKS = {"spark_context": "SparkContext: Running Spark version", "context_stopped": "Successfully stopped SparkContext"}


def marks_of(lines: list[tuple[float, str]]) -> dict[str, float]:
    """When the run's first line came and when each of :data:`MARKS` first showed, from (time, line) pairs."""
    found = {"first_line": lines[0][0]} if lines else {}
    for t, line in lines:
        for key, text in MARKS.items():
            if key not in found and text in line:
                found[key] = t
    return found


def cpu_of(pid: int) -> float:
    """Wait for a child; its CPU seconds and those of the descendants it waited for (user + system)."""
    _pid, _status, usage = os.wait4(pid, 0)
    return usage.ru_utime + usage.ru_stime


def own_cpu(pid: int) -> float | None:
    """A live process's own CPU seconds (user + system, not its children's), from /proc; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spark_phases(start: float, m: dict[str, float], end: float) -> dict[str, float]:
    """Seconds from ``start`` (spark-submit starts; the job's Processing status) to the first log line, to
    SparkContext, to the app's end (SparkContext stopped) and to the end (the process's; Processing's)."""
    return {"spark-submit start (Processing) -> first log line": m["first_line"] - start,
            "first log line -> SparkContext": m["spark_context"] - m["first_line"],
            "the app (SparkContext -> stopped)": m["context_stopped"] - m["spark_context"],
            "SparkContext stopped -> process end (Processing end)": end - m["context_stopped"]}


def median_phases(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    hosts = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    from airflow_smdist.backends.local import LocalBackend
    from airflow_smdist.backends.local.job.processing import spark_home
    from airflow_smdist.specs.processing import build_pyspark_processing, upload_plan

    work = tempfile.mkdtemp(prefix="smdist-bench-spark-")
    raw = os.path.join(work, "raw")
    generate(raw, rows, 4)
    slots = hosts * max(1, (os.cpu_count() or 1) // hosts)  # what the local backend gives the app
    backend = LocalBackend(os.path.join(work, "jobs"))
    spark_submit = os.path.join(spark_home(), "bin", "spark-submit")

    def plain() -> tuple[int, dict[str, float], float]:
        out = os.path.join(work, "plain", uuid.uuid4().hex[:8])
        cmd = [spark_submit, "--master", f"local[{slots}]", "--py-files", os.path.join(SCRIPTS, "features.py")]
        for k, v in sorted(CONF.items()):
            cmd += ["--conf", f"{k}={v}"]
        cmd += [os.path.join(SCRIPTS, "preprocess.py"), "--input", raw, "--train-output", f"{out}/train",
                "--validation-output", f"{out}/validation"]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        t0 = time.time()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        lines = [(time.time(), raw_line.decode("utf-8", "replace")) for raw_line in iter(proc.stdout.readline, b"")]
        cpu = cpu_of(proc.pid)
        end = time.time()
        proc.returncode = 0  # reaped above
        assert any("summary " in x for _t, x in lines), "\n".join(x for _t, x in lines[-30:])
        return split_rows(out), {**spark_phases(t0, marks_of(lines), end), "total": end - t0}, cpu

    def local() -> tuple[int, dict[str, float], float, float]:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        out = f"file://{work}/local/{name}"
        plan = build_pyspark_processing(
            job_name=name, role="arn:aws:iam::123456789012:role/R", submit_app=os.path.join(SCRIPTS, "preprocess.py"),
            submit_py_files=[os.path.join(SCRIPTS, "features.py")], framework_version="3.5", instance_count=hosts,
            code_location=f"file://{work}/code",
            inputs={"raw": {"source": f"file://{raw}/", "destination": "/opt/ml/processing/input/raw"}},
            outputs={"train": f"{out}/train", "validation": f"{out}/validation"},
            arguments=["--input", "/opt/ml/processing/input/raw", "--train-output", "/opt/ml/processing/output/train",
                       "--validation-output", "/opt/ml/processing/output/validation"],
            configuration=[{"Classification": "spark-defaults", "Properties": CONF}])
        t0 = time.time()
        upload_plan(plan)
        t_submit = time.time()
        backend.submit("processing", plan.request)
        job = os.path.join(work, "jobs", "processing", name)
        with open(os.path.join(job, "supervisor.pid")) as f:
            supervisor = int(f.read().split()[0])
        supervisor_cpu = 0.0
        while True:
            supervisor_cpu = own_cpu(supervisor) or supervisor_cpu  # the last reading before it exits
            d = backend.describe("processing", name)
            if d["ProcessingJobStatus"] in ("Completed", "Failed", "Stopped"):
                break
            time.sleep(0.1)
        seen = time.time()
        assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
        cpu = cpu_of(supervisor)
        with open(os.path.join(job, "state.json")) as f:
            state = json.load(f)
        tr = {t["status"]: t for t in state["transitions"]}
        with open(os.path.join(job, "logs", "algo-1.jsonl")) as f:
            lines = [(x["t"], x["m"]) for x in map(json.loads, f)]
        m = marks_of(lines)
        proc_start, proc_end = tr["Processing"]["start"], tr["Processing"]["end"]
        phases = {"upload app, dependencies, configuration": t_submit - t0,
                  "submit (check, job directory, supervisor spawn)": state["created"] - t_submit,
                  "Starting (supervisor start, hosts' network)": tr["Starting"]["end"] - state["created"],
                  "Downloading (staging every host, runtime)": tr["Downloading"]["end"] - tr["Downloading"]["start"],
                  **spark_phases(proc_start, m, proc_end),
                  "Uploading (the splits)": tr["Uploading"]["end"] - tr["Uploading"]["start"],
                  "Completed -> seen by describe": seen - tr["Uploading"]["end"], "total": seen - t0}
        return split_rows(out[len("file://"):]), phases, cpu, supervisor_cpu

    load_start = os.getloadavg()
    base, ours, base_cpu, ours_cpu, sup_cpu = [], [], [], [], []
    for _ in range(repeats):  # interleaved, so load on the machine hits both alike
        n_plain, phases, cpu = plain()
        base.append(phases)
        base_cpu.append(cpu)
        n_local, phases, cpu, own = local()
        ours.append(phases)
        ours_cpu.append(cpu)
        sup_cpu.append(own)
        assert n_plain == n_local == rows, (n_plain, n_local, rows)  # the same work, the same result
    load_end = os.getloadavg()
    b, o = statistics.median(r["total"] for r in base), statistics.median(r["total"] for r in ours)
    bmin, omin = min(r["total"] for r in base), min(r["total"] for r in ours)
    bc, oc = statistics.median(base_cpu), statistics.median(ours_cpu)
    pb, po = median_phases(base), median_phases(ours)
    phase_rows = [(f"phase: {k}", f"{pb.get(k, 0.0):.2f} s -> {v:.2f} s", f"{v - pb.get(k, 0.0):+.2f} s")
                  for k, v in po.items() if k != "total"]
    report(f"Local PySpark processing job vs plain spark-submit ({rows:,} rows, same app and master)", [
        (f"plain spark-submit --master local[{slots}] (baseline), median", f"{b:.2f} s", "1.00"),
        (f"local backend, {hosts} simulated hosts, master local[{slots}], median", f"{o:.2f} s", f"{o / b:.2f}"),
        ("baseline, fastest run", f"{bmin:.2f} s", "1.00"),
        ("local backend, fastest run", f"{omin:.2f} s", f"{omin / bmin:.2f}"),
        ("CPU s (user+sys, the process tree), median: baseline -> local job", f"{bc:.2f} s -> {oc:.2f} s",
         f"{oc / bc:.2f}"),
        ("of which the job's supervisor itself (not its hosts), median", f"{statistics.median(sup_cpu):.2f} s",
         f"{statistics.median(sup_cpu) / bc:.2f}"),
        *phase_rows,
    ], note=f"median and fastest of {repeats}, interleaved (the fastest run is the one least disturbed by other "
            f"load on the machine); both wrote {rows:,} rows of splits. Phases: medians, baseline -> local job, "
            "and the difference (the local job's fixed cost, phase by phase; the app phase is the same Spark "
            "work on both sides). Load average (1 min) "
            f"{load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end. "
            + json.dumps({"baseline_runs": [round(r["total"], 2) for r in base],
                          "local_runs": [round(r["total"], 2) for r in ours],
                          "baseline_cpu": [round(x, 2) for x in base_cpu], "local_cpu": [round(x, 2) for x in ours_cpu],
                          "supervisor_cpu": [round(x, 2) for x in sup_cpu]}))


if __name__ == "__main__":
    main()
