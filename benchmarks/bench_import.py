"""Provider import and example-DAG parse time, as ratios to a trivial DAG file (same run).

A DAG file is loaded the way Airflow's DagBag loads it (``importlib.util.spec_from_file_location`` +
``exec_module``, bytecode cached) in a fresh interpreter, after ``import airflow.sdk`` — the dag processor has
Airflow imported already, so what a DAG file costs is what it adds on top. Bytecode is compiled once before
sampling (``compileall``; a wheel install does the same), so this repository's modules are not compiled from
source in every sample while Airflow's come from ``.pyc`` (``PYTHONDONTWRITEBYTECODE`` is dropped here).

Two baselines: a trivial DAG file with one ``EmptyOperator``, and a trivial TaskFlow DAG file (``DAG``,
``Param`` and one ``@task``, the Airflow features the example DAGs use). Each measure is the median of fresh
interpreters, sampled round-robin so machine load hits every variant alike; the time is measured inside the
interpreter (the DAG file's load only), so interpreter start-up noise does not dilute the ratio.
Usage: python benchmarks/bench_import.py [repeats]
"""

from __future__ import annotations

import compileall
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from _common import load_note, report

TRIVIAL = '''
import pendulum
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("trivial", start_date=pendulum.datetime(2026, 1, 1), schedule=None):
    EmptyOperator(task_id="noop")
'''
TRIVIAL_TASKFLOW = '''
import pendulum
from airflow.sdk import DAG, Param, task

with DAG("trivial_taskflow", start_date=pendulum.datetime(2026, 1, 1), schedule=None,
         params={"n": Param(1, type="integer")}):
    @task
    def noop(n: int) -> int:
        return n

    noop("{{ params.n }}")
'''
LOAD = '''
import sys, time, importlib.util
import airflow.sdk
t = time.perf_counter()
spec = importlib.util.spec_from_file_location("dagfile", sys.argv[1])
spec.loader.exec_module(importlib.util.module_from_spec(spec))
print(time.perf_counter() - t)
'''
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": REPO}


def once(path: str) -> float:
    out = subprocess.run([sys.executable, "-c", LOAD, path], check=True, env=ENV, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    compileall.compile_dir(os.path.join(REPO, "airflow_smdist"), quiet=1)
    tmp = tempfile.mkdtemp(prefix="smdist-bench-import-")
    variants = []
    for label, code in (("trivial DAG file, one EmptyOperator (baseline)", TRIVIAL),
                        ("trivial TaskFlow DAG file, DAG + Param + one @task (baseline 2)", TRIVIAL_TASKFLOW)):
        path = os.path.join(tmp, f"{len(variants)}.py")
        with open(path, "w") as f:
            f.write(code)
        variants.append((label, path))
    for dag in sorted(glob.glob(os.path.join(REPO, "dags", "*.py"))):
        variants.append((f"dags/{os.path.basename(dag)}", dag))
    samples: dict[str, list[float]] = {label: [] for label, _ in variants}
    for _, path in variants:  # warm-up: writes each DAG file's bytecode, as the dag processor's first parse does
        once(path)
    for _ in range(repeats):
        for label, path in variants:
            samples[label].append(once(path))
    med = {label: statistics.median(v) for label, v in samples.items()}
    base, base2 = med[variants[0][0]], med[variants[1][0]]
    rows = [(label, f"{med[label] * 1000:.0f} ms", f"{med[label] / base:.2f} / {med[label] / base2:.2f}")
            for label, _ in variants]
    report("Example DAG parse time vs a trivial DAG file (ratios: to baseline / to baseline 2)", rows,
           note=f"median of {repeats} fresh interpreters each (after `import airflow.sdk`, which is not counted), "
                f"sampled round-robin. {load_note()} Samples (ms): "
                + json.dumps({k: [round(x * 1000) for x in v] for k, v in samples.items()}))


if __name__ == "__main__":
    main()
