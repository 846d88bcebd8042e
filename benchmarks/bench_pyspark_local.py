"""Local PySpark processing job wall time vs the same app under plain ``spark-submit``, in one run.

The app: dags/scripts/pyspark/preprocess.py (+ features.py as --py-files) over a generated churn CSV
(default 200,000 rows in 4 objects), writing train / validation splits. Local backend: a PySparkProcessor
request on ``instance_count`` simulated hosts (default 2): code and configuration uploaded, the job
directory and both hosts' /opt/ml trees staged (every host downloads the FullyReplicated input), spark-submit
on the primary with master local[hosts x cores per host], the splits uploaded at the end. Baseline: the
pyspark package's ``spark-submit`` with the same master, --py-files and --conf, reading the CSV where it
lies and writing the splits straight to their destination.

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

from _common import report  # noqa: E402

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
                f.write(f"{part}-{i},{age},{tenure},{charges},{calls},{plan},{int(rng.random() < 1 / (1 + math.exp(-z)))}\n")


def split_rows(directory: str) -> int:
    n = 0
    for dirpath, _dirs, files in os.walk(directory):
        for f in files:
            if f.startswith("part-") and f.endswith(".csv"):
                with open(os.path.join(dirpath, f)) as fh:
                    n += sum(1 for _ in fh)
    return n


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    hosts = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    from airflow_smdist.backends.local import LocalBackend
    from airflow_smdist.backends.local.processing import spark_home
    from airflow_smdist.specs.processing import build_pyspark_processing, upload_plan

    work = tempfile.mkdtemp(prefix="smdist-bench-spark-")
    raw = os.path.join(work, "raw")
    generate(raw, rows, 4)
    slots = hosts * max(1, (os.cpu_count() or 1) // hosts)  # what the local backend gives the app
    backend = LocalBackend(os.path.join(work, "jobs"))
    spark_submit = os.path.join(spark_home(), "bin", "spark-submit")

    def plain() -> int:
        out = os.path.join(work, "plain", uuid.uuid4().hex[:8])
        cmd = [spark_submit, "--master", f"local[{slots}]", "--py-files", os.path.join(SCRIPTS, "features.py")]
        for k, v in sorted(CONF.items()):
            cmd += ["--conf", f"{k}={v}"]
        cmd += [os.path.join(SCRIPTS, "preprocess.py"), "--input", raw, "--train-output", f"{out}/train",
                "--validation-output", f"{out}/validation"]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        subprocess.run(cmd, check=True, env=env, capture_output=True)
        return split_rows(out)

    def local() -> int:
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
        upload_plan(plan)
        backend.submit("processing", plan.request)
        while True:
            d = backend.describe("processing", name)
            if d["ProcessingJobStatus"] in ("Completed", "Failed", "Stopped"):
                break
            time.sleep(0.1)
        assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
        return split_rows(out[len("file://"):])

    base, ours = [], []
    for _ in range(repeats):  # interleaved, so load on the machine hits both alike
        t = time.perf_counter(); n_plain = plain(); base.append(time.perf_counter() - t)  # noqa: E702
        t = time.perf_counter(); n_local = local(); ours.append(time.perf_counter() - t)  # noqa: E702
        assert n_plain == n_local == rows, (n_plain, n_local, rows)  # the same work, the same result
    b, o = statistics.median(base), statistics.median(ours)
    bmin, omin = min(base), min(ours)
    report(f"Local PySpark processing job vs plain spark-submit ({rows:,} rows, same app and master)", [
        (f"plain spark-submit --master local[{slots}] (baseline), median", f"{b:.2f} s", "1.00"),
        (f"local backend, {hosts} simulated hosts, master local[{slots}], median", f"{o:.2f} s", f"{o / b:.2f}"),
        ("baseline, fastest run", f"{bmin:.2f} s", "1.00"),
        ("local backend, fastest run", f"{omin:.2f} s", f"{omin / bmin:.2f}"),
    ], note=f"median and fastest of {repeats}, interleaved (the fastest run is the one least disturbed by other "
            f"load on the machine); both wrote {rows:,} rows of splits. The local job adds the "
            "supervisor, uploading app/dependency/configuration, staging every host's copy of the input, "
            "SPARK_CONF_DIR and event-log setup, and uploading the splits. "
            + json.dumps({"baseline_runs": [round(x, 2) for x in base], "local_runs": [round(x, 2) for x in ours]}))


if __name__ == "__main__":
    main()
