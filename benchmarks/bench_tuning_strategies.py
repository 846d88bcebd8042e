"""Bayesian vs Random search at equal trials over several seeds, as local tuning jobs on a known objective.

    python benchmarks/bench_tuning_strategies.py [--trials 12] [--parallel 2] [--seeds 0,1,2] [--noise 0.02]
        [--record]   # also append the table to benchmarks/results.md

Every trial is a real local training job of a pure-Python objective script (about half a second) with two
continuous hyperparameters: ``f(lr, m) = (log10(lr) + 1.5)^2 + 4 (m - 0.7)^2`` over lr in [1e-4, 1]
(Logarithmic) and m in [0, 1] (Linear), minimum 0 at lr = 0.0316, m = 0.7. The script reports ``f`` plus
Gaussian noise (``--noise``, drawn from a generator seeded by the hyperparameters, so the same point always
reports the same value). Both strategies get the same MaxNumberOfTrainingJobs, MaxParallelTrainingJobs and
RandomSeed; the two jobs of a seed run at the same time, in the worker's interpreter
(SMDIST_LOCAL_RUNTIME=worker unless set). Per job: the best trial the tuner picked (by the
noisy objective it saw) and its gap to the optimum, the noise-free ``f`` at that trial's hyperparameters.
The ratio Bayesian / Random of the mean gap is the measure (below 1: Bayesian gets closer with the budget).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _common import load_note, report

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
METRIC = "val:loss"
RANGES = {"learning_rate": {"type": "continuous", "min": 1e-4, "max": 1.0, "scaling": "Logarithmic"},
          "momentum": {"type": "continuous", "min": 0.0, "max": 1.0, "scaling": "Linear"}}
STRATEGIES = ("Bayesian", "Random")

OBJECTIVE_PY = '''
import argparse, json, math, os, random
p = argparse.ArgumentParser()
p.add_argument("--learning_rate", type=float, required=True)
p.add_argument("--momentum", type=float, required=True)
p.add_argument("--noise", type=float, default=0.0)
a, _ = p.parse_known_args()
f = (math.log10(a.learning_rate) + 1.5) ** 2 + 4.0 * (a.momentum - 0.7) ** 2
noisy = f + random.Random(f"{a.learning_rate!r},{a.momentum!r}").gauss(0.0, a.noise)
print(f"val_loss={noisy:.9f} true_f={f:.9f}", flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as out:
    json.dump({"learning_rate": a.learning_rate, "momentum": a.momentum, "f": f}, out)
'''


def true_f(lr: float, m: float) -> float:
    return (math.log10(lr) + 1.5) ** 2 + 4.0 * (m - 0.7) ** 2


def start(backend, work: str, source: str, *, strategy: str, seed: int, trials: int, parallel: int,
          noise: float) -> str:
    from airflow_smdist.sourcedir import upload_source
    from airflow_smdist.specs.tuning import build_tuning

    name = f"{strategy[:3].lower()}{seed}-{uuid.uuid4().hex[:6]}"
    plan = build_tuning(job_name=name, role=ROLE, output_path=f"file://{work}/out", entry_point="objective.py",
                        source_dir=source, image_uri=IMAGE, instance_type="ml.m5.large",
                        hyperparameters={"noise": noise},
                        metric_definitions=[{"Name": METRIC, "Regex": r"val_loss=(-?[0-9.]+)"}],
                        objective_metric_name=METRIC, objective_type="Minimize", strategy=strategy,
                        hyperparameter_ranges=RANGES, max_jobs=trials, max_parallel_jobs=parallel, random_seed=seed)
    upload_source(plan.source_dir, "objective.py", plan.source_uri)
    backend.submit("tuning", plan.request)
    return name


def wait(backend, name: str, timeout: float = 900) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        d = backend.describe("tuning", name)
        if d["HyperParameterTuningJobStatus"] in ("Completed", "Failed", "Stopped"):
            return d
        if time.monotonic() > deadline:
            raise SystemExit(f"tuning job {name} still {d['HyperParameterTuningJobStatus']} after {timeout} s")
        backend.wait_for_change("tuning", name, 5.0)


def best_of(d: dict, trials: int) -> tuple[float, float]:
    """(gap of the picked trial to the optimum, the noisy objective the tuner saw for it)."""
    if d["HyperParameterTuningJobStatus"] != "Completed" or d["TrainingJobStatusCounters"]["Completed"] != trials:
        raise SystemExit(f"{d['HyperParameterTuningJobName']}: {d['HyperParameterTuningJobStatus']} "
                         f"{d['TrainingJobStatusCounters']} {d.get('FailureReason', '')}")
    best = d["BestTrainingJob"]
    hp = best["TunedHyperParameters"]
    return (true_f(float(hp["learning_rate"]), float(hp["momentum"])),
            best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])


def summary_rows(gaps: dict[str, list[float]], seen: dict[str, list[float]]) -> list[tuple[str, str, str]]:
    base_mean, base_median = statistics.mean(gaps["Random"]), statistics.median(gaps["Random"])
    rows = []
    for strategy in ("Random", *[s for s in STRATEGIES if s != "Random"]):
        g = gaps[strategy]
        mean, median = statistics.mean(g), statistics.median(g)
        tag = " (baseline)" if strategy == "Random" else ""
        rows.append((f"{strategy}{tag}: gap to the optimum, mean", f"{mean:.4f}", f"{mean / base_mean:.2f}"))
        rows.append((f"{strategy}{tag}: gap to the optimum, median", f"{median:.4f}",
                     f"{median / base_median:.2f}" if base_median else "n/a"))
        rows.append((f"{strategy}: best objective the tuner saw, mean / median",
                     f"{statistics.mean(seen[strategy]):.4f} / {statistics.median(seen[strategy]):.4f}", ""))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=12, help="MaxNumberOfTrainingJobs of every tuning job")
    p.add_argument("--parallel", type=int, default=2, help="MaxParallelTrainingJobs")
    p.add_argument("--seeds", default="0,1,2", help="RandomSeed values, comma-separated")
    p.add_argument("--noise", type=float, default=0.02, help="standard deviation of the reported objective's noise")
    p.add_argument("--record", action="store_true", help="append the table to benchmarks/results.md")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]

    os.environ.setdefault("SMDIST_LOCAL_RUNTIME", "worker")  # trials run in this interpreter (no image runtime)
    from airflow_smdist.backends.local import LocalBackend

    print(f"start: {load_note()}", flush=True)
    t0 = time.perf_counter()
    gaps: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    seen: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    with tempfile.TemporaryDirectory(prefix="smdist-bench-tuning-") as work:
        source = os.path.join(work, "src")
        os.makedirs(source)
        with open(os.path.join(source, "objective.py"), "w") as f:
            f.write(OBJECTIVE_PY)
        backend = LocalBackend(os.path.join(work, "jobs"))
        for seed in seeds:
            names = {s: start(backend, work, source, strategy=s, seed=seed, trials=args.trials,
                              parallel=args.parallel, noise=args.noise) for s in STRATEGIES}
            for strategy, name in names.items():
                gap, value = best_of(wait(backend, name), args.trials)
                gaps[strategy].append(gap)
                seen[strategy].append(value)
                print(f"seed {seed} {strategy}: best objective seen {value:.4f}, gap to the optimum {gap:.4f}",
                      flush=True)
    elapsed = time.perf_counter() - t0
    rows = summary_rows(gaps, seen)
    note = (f"{args.trials} trials ({args.parallel} at a time) per job, seeds {seeds}, noise sd {args.noise}; "
            f"per-seed gaps: " + ", ".join(f"{s} {[round(g, 4) for g in gaps[s]]}" for s in STRATEGIES)
            + f". {elapsed:.0f} s wall. End: {load_note()}")
    title = "Tuning: Bayesian vs Random at equal trials (local backend, known optimum)"
    if args.record:
        report(title, rows, note=note)
    else:
        print("\n".join([f"## {title}", "", "| measure | value | ratio to baseline |", "|---|---|---|"]
                        + [f"| {a} | {b} | {c} |" for a, b, c in rows] + ["", note]))


if __name__ == "__main__":
    main()
