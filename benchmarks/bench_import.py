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


def once(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": REPO},
                   capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    try:
        import airflow.sdk  # noqa: F401

        base_code = "import airflow.sdk"
    except ImportError:  # Airflow 2
        base_code = "import airflow.models"
    variants = [(f"`{base_code}` (baseline)", base_code)]
    for module in ("airflow_smdist", "airflow_smdist.operators.training", "airflow_smdist.triggers.training"):
        variants.append((f"+ import {module}", f"{base_code}; import {module}"))
    for dag in sorted(glob.glob(os.path.join(REPO, "dags", "*.py"))):
        variants.append((f"+ parse dags/{os.path.basename(dag)}", f"{base_code}; import runpy; runpy.run_path({dag!r})"))
    samples: dict[str, list[float]] = {label: [] for label, _ in variants}
    for _ in range(repeats):  # round-robin, so load on the machine hits every variant alike
        for label, code in variants:
            samples[label].append(once(code))
    base = statistics.median(samples[variants[0][0]])
    rows = [(label, f"{statistics.median(samples[label]):.2f} s", f"{statistics.median(samples[label]) / base:.2f}")
            for label, _ in variants]
    report("Provider import and DAG parse time", rows,
           note=f"median of {repeats} fresh interpreters each, sampled round-robin; heavy modules (torch, pyspark, "
                "sagemaker SDK, optuna, scikit-learn) are imported only inside tasks.")


if __name__ == "__main__":
    main()
