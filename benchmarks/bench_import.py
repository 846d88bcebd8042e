"""Provider import and example-DAG parse time, as ratios to a trivial DAG file (same run).

A DAG file is loaded the way Airflow's DagBag loads it (``importlib.util.spec_from_file_location`` +
``exec_module``, bytecode cached) in a fresh interpreter, after ``import airflow.sdk`` — the dag processor has
Airflow imported already, so what a DAG file costs is what it adds on top. Bytecode is compiled once before
sampling (``compileall``; a wheel install does the same), so this repository's modules are not compiled from
source in every sample while Airflow's come from ``.pyc`` (``PYTHONDONTWRITEBYTECODE`` is dropped here).

Two baselines: a trivial DAG file with one ``EmptyOperator``, and a trivial TaskFlow DAG file (``DAG``,
``Param`` and one ``@task``, the Airflow features the example DAGs use). Each measure is the median of fresh
interpreters, sampled round-robin so machine load hits every variant alike. Times are CPU times (the machine
is shared: wall time mostly measures the wait for a core): the DAG file's load alone, measured inside the
interpreter, and the whole parse (interpreter start + ``import airflow.sdk`` + the DAG file, the child's CPU
time), which is what a fresh parse of one file costs. Also reported: what a DAG file imports beyond the
trivial TaskFlow DAG file's modules (``tests/compat/test_provider_and_dags.py`` keeps that list short).
Usage: python benchmarks/bench_import.py [repeats] [--compare DIR]  (DIR: another checkout, e.g. an export of
main, whose example DAG files are sampled in the same rounds with its own provider code)
"""

from __future__ import annotations

import compileall
import glob
import json
import os
import resource
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
before = len(sys.modules)
t = time.process_time()
spec = importlib.util.spec_from_file_location("dagfile", sys.argv[1])
spec.loader.exec_module(importlib.util.module_from_spec(spec))
print(time.process_time() - t, len(sys.modules) - before)
'''


def env_for(repo: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": repo}


def once(path: str, repo: str = REPO) -> tuple[float, float, int]:
    """(CPU s of the DAG file's load, CPU s of the whole interpreter, modules the DAG file imported)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", LOAD, path], check=True, env=env_for(repo), capture_output=True,
                         text=True, cwd=repo)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    whole = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    load, modules = out.stdout.strip().splitlines()[-1].split()
    return float(load), whole, int(modules)


def main() -> None:
    args = sys.argv[1:]
    compare = None
    if "--compare" in args:
        compare = os.path.abspath(args.pop(args.index("--compare") + 1))
        args.remove("--compare")
    repeats = int(args[0]) if args else 7
    for repo in (REPO, compare) if compare else (REPO,):
        compileall.compile_dir(os.path.join(repo, "airflow_smdist"), quiet=1)
    tmp = tempfile.mkdtemp(prefix="smdist-bench-import-")
    variants = []
    for label, code in (("trivial DAG file, one EmptyOperator (baseline)", TRIVIAL),
                        ("trivial TaskFlow DAG file, DAG + Param + one @task (baseline 2)", TRIVIAL_TASKFLOW)):
        path = os.path.join(tmp, f"{len(variants)}.py")
        with open(path, "w") as f:
            f.write(code)
        variants.append((label, path, REPO))
    for dag in sorted(glob.glob(os.path.join(REPO, "dags", "*.py"))):
        variants.append((f"dags/{os.path.basename(dag)}", dag, REPO))
    if compare:
        for dag in sorted(glob.glob(os.path.join(compare, "dags", "*.py"))):
            variants.append((f"{os.path.basename(compare)}: dags/{os.path.basename(dag)}", dag, compare))
    samples: dict[str, list[tuple[float, float, int]]] = {label: [] for label, _, _ in variants}
    for _, path, repo in variants:  # warm-up: writes each DAG file's bytecode, as the dag processor's first parse does
        once(path, repo)
    for _ in range(repeats):
        for label, path, repo in variants:
            samples[label].append(once(path, repo))
    load = {label: statistics.median(x[0] for x in v) for label, v in samples.items()}
    whole = {label: statistics.median(x[1] for x in v) for label, v in samples.items()}
    modules = {label: v[0][2] for label, v in samples.items()}
    empty, taskflow = variants[0][0], variants[1][0]
    rows = [(label, f"{load[label] * 1000:.0f} ms file / {whole[label] * 1000:.0f} ms whole, {modules[label]} modules",
             f"file {load[label] / load[empty]:.2f} / {load[label] / load[taskflow]:.2f}; "
             f"whole {whole[label] / whole[empty]:.3f} / {whole[label] / whole[taskflow]:.3f}")
            for label, _, _ in variants]
    report("Example DAG parse CPU time vs a trivial DAG file (ratios: to baseline / to baseline 2)", rows,
           note=f"CPU time, median of {repeats} fresh interpreters each, sampled round-robin. 'file': the DAG file's "
                "load after `import airflow.sdk` (not counted); 'whole': the interpreter's CPU time (start + "
                f"airflow.sdk + the DAG file). {load_note()} Samples (file ms, whole ms): "
                + json.dumps({k: [(round(a * 1000), round(b * 1000)) for a, b, _ in v] for k, v in samples.items()}))

if __name__ == "__main__":
    main()
