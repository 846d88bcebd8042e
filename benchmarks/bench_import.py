"""Provider import and example-DAG parse time, as ratios to ``import airflow.sdk`` alone (same run).

Each measure is the median of fresh interpreters, so import caches do not carry over between samples.
Usage: python benchmarks/bench_import.py [repeats]
"""

from __future__ import annotations

import glob
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from _common import report  # noqa: E402


def sample(code: str, repeats: int) -> float:
    times = []
    env = {**os.environ, "PYTHONPATH": REPO}
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    try:
        import airflow.sdk  # noqa: F401

        base_code = "import airflow.sdk"
    except ImportError:  # Airflow 2
        base_code = "import airflow.models"
    base = sample(base_code, repeats)
    rows = [(f"`{base_code}` (baseline)", f"{base:.2f} s", "1.00")]
    for module in ("airflow_smdist", "airflow_smdist.operators.training", "airflow_smdist.triggers.training"):
        t = sample(f"{base_code}; import {module}", repeats)
        rows.append((f"+ import {module}", f"{t:.2f} s", f"{t / base:.2f}"))
    for dag in sorted(glob.glob(os.path.join(REPO, "dags", "*.py"))):
        t = sample(f"{base_code}; import runpy; runpy.run_path({dag!r})", repeats)
        rows.append((f"+ parse dags/{os.path.basename(dag)}", f"{t:.2f} s", f"{t / base:.2f}"))
    report("Provider import and DAG parse time", rows,
           note=f"median of {repeats} fresh interpreters each; heavy modules (torch, pyspark, sagemaker SDK) "
                "are imported only inside tasks.")


if __name__ == "__main__":
    main()
