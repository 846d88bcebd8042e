"""What a job's image runtime costs: a local 1-host training job on the scikit-learn 1.2-1 image, timed from
submit to Completed, in three ways, against ``SMDIST_LOCAL_RUNTIME=worker`` (the worker's interpreter) as
the baseline of the same run:

* cold: the first use of the runtime (an empty runtime cache: uv builds it; uv's own download cache is warm,
  so a first-ever build on a machine also downloads the packages);
* warm: the runtime is in the cache (every later job);
* warm + requirements.txt: the same with a one-package requirements.txt (the job's own layer install).

The warm-cache overhead per job (warm minus worker) must stay under 1 s, plus the job's own requirements.

The script imports scikit-learn: on the worker its own release, in the runtime the image's (1.2.1, with the
image's scipy and numpy), which take longer to import; that difference is the image's, not the runtime's (a
SageMaker container imports the same). So a second pair runs a script that imports only the standard library:
warm runtime against worker there is what the runtime itself costs a job (issue 29's target: <= 1.10x).
Runs are interleaved (round-robin) so the machine's load hits every variant alike; medians are reported.
Usage: python benchmarks/bench_runtimes.py [repeats]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

from _common import load_note, report

IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
SCRIPT = "import sklearn\nprint('sklearn', sklearn.__version__)\n"
#: interleaved pairs of the standard-library job per round (each is a fraction of a second)
STDLIB_PAIRS = 7
STDLIB_SCRIPT = "import json, sys\nprint(json.dumps({'python': sys.version.split()[0]}))\n"


def run_job(backend, work: str, source: str, mode: str, cache: str) -> float:
    from airflow_smdist.sourcedir import upload_source
    from airflow_smdist.specs.training import build_training

    os.environ["SMDIST_LOCAL_RUNTIME"] = mode
    os.environ["SMDIST_RUNTIME_CACHE"] = cache
    plan = build_training(job_name=f"bench-{uuid.uuid4().hex[:8]}", role="arn:aws:iam::123456789012:role/R",
                          output_path=f"file://{work}/out", entry_point="train.py", source_dir=source,
                          image_uri=IMAGE, instance_type="ml.m5.xlarge", instance_count=1)
    upload_source(plan.source_dir, "train.py", plan.source_uri)
    started = time.perf_counter()
    name = backend.submit("training", plan.request)
    while True:
        d = backend.describe("training", name)
        if d["TrainingJobStatus"] in ("Completed", "Failed", "Stopped"):
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    if d["TrainingJobStatus"] != "Completed":
        raise SystemExit(f"{mode}: {d.get('FailureReason')}")
    return elapsed


def main() -> None:
    import logging

    logging.disable(logging.WARNING)  # the builders' best-practice warnings
    from airflow_smdist.backends.local import LocalBackend

    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    work = tempfile.mkdtemp(prefix="smdist-bench-runtimes-")
    backend = LocalBackend(os.path.join(work, "jobs"))
    plain, reqs, stdlib = os.path.join(work, "plain"), os.path.join(work, "reqs"), os.path.join(work, "stdlib")
    for d in (plain, reqs, stdlib):
        os.makedirs(d)
        with open(os.path.join(d, "train.py"), "w") as f:
            f.write(STDLIB_SCRIPT if d == stdlib else SCRIPT)
    with open(os.path.join(reqs, "requirements.txt"), "w") as f:
        f.write("tabulate==0.9.0\n")
    warm_cache = os.path.join(work, "cache-warm")
    run_job(backend, work, plain, "image", warm_cache)  # fills the warm cache (not measured)
    run_job(backend, work, plain, "worker", warm_cache)  # first supervisor start (not measured)
    samples: dict[str, list[float]] = {"worker": [], "cold": [], "warm": [], "warm+req": [], "worker-stdlib": [],
                                       "warm-stdlib": []}
    for i in range(repeats):
        for _ in range(STDLIB_PAIRS):  # short jobs: more samples for the same confidence
            samples["worker-stdlib"].append(run_job(backend, work, stdlib, "worker", warm_cache))
            samples["warm-stdlib"].append(run_job(backend, work, stdlib, "image", warm_cache))
        samples["worker"].append(run_job(backend, work, plain, "worker", warm_cache))
        samples["cold"].append(run_job(backend, work, plain, "image", os.path.join(work, f"cache-cold-{i}")))
        samples["warm"].append(run_job(backend, work, plain, "image", warm_cache))
        samples["warm+req"].append(run_job(backend, work, reqs, "image", warm_cache))
    med = {k: statistics.median(v) for k, v in samples.items()}
    base = med["worker"]
    rows = [("job on the worker's interpreter (SMDIST_LOCAL_RUNTIME=worker, baseline)", f"{base:.2f} s", "1.00"),
            ("job, runtime's first use (cold runtime cache: built by uv)", f"{med['cold']:.2f} s",
             f"{med['cold'] / base:.2f}"),
            ("job, runtime in the cache (warm)", f"{med['warm']:.2f} s", f"{med['warm'] / base:.2f}"),
            ("job, warm, with a 1-package requirements.txt", f"{med['warm+req']:.2f} s",
             f"{med['warm+req'] / base:.2f}"),
            ("warm-cache overhead per job (warm - worker; target < 1 s)", f"{med['warm'] - base:+.2f} s", ""),
            ("job importing the standard library only, worker's interpreter (second baseline)",
             f"{med['worker-stdlib']:.2f} s", "1.00"),
            ("the same, runtime in the cache (what the runtime costs; target <= 1.10)",
             f"{med['warm-stdlib']:.2f} s", f"{med['warm-stdlib'] / med['worker-stdlib']:.2f}"),
            ("requirements.txt layer (warm+req - warm)", f"{med['warm+req'] - med['warm']:+.2f} s", "")]
    report("Local image runtimes: cold and warm cache vs the worker's interpreter", rows,
           f"scikit-learn 1.2-1 image, 1 host, medians of {repeats} interleaved runs ({repeats * STDLIB_PAIRS} for "
           "the standard-library pair). " + load_note())


if __name__ == "__main__":
    main()
