"""The local backend tunes for real: every trial a local training job of a tiny objective script.

The objective is known: ``f(lr, depth) = (log10(lr) + 1.5)^2 + 0.15 (depth - 6)^2`` (minimum 0 at lr=0.0316,
depth=6); with ``epochs`` > 1 the script reports ``f + 1/epoch`` after every epoch, a learning curve. The
trial script is pure Python (no torch), so a trial costs about half a second.
"""

from __future__ import annotations

import json
import logging
import math
import tarfile
import time
import uuid
from types import SimpleNamespace

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.backends.local.job.tuning import list_training_jobs_for_tuning_job
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.tuning import build_tuning
from jobs import wait

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
METRIC = "val:loss"
RANGES = {"learning_rate": {"type": "continuous", "min": 1e-4, "max": 1.0, "scaling": "Logarithmic"},
          "depth": {"type": "integer", "min": 1, "max": 12}}

OBJECTIVE_PY = '''
import argparse, json, math, os, sys, time
p = argparse.ArgumentParser()
p.add_argument("--learning_rate", type=float, required=True)
p.add_argument("--depth", type=int, required=True)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--fail", type=int, default=0)
a, _ = p.parse_known_args()
if a.fail:
    print("simulated failure", file=sys.stderr)
    sys.exit(3)
f = (math.log10(a.learning_rate) + 1.5) ** 2 + 0.15 * (a.depth - 6) ** 2
for epoch in range(1, a.epochs + 1):
    time.sleep(a.sleep)
    print(f"epoch={epoch} val_loss={f + (1.0 / epoch if a.epochs > 1 else 0.0):.9f}", flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as out:
    json.dump({"learning_rate": a.learning_rate, "depth": a.depth, "f": f}, out)
'''


def f(lr: float, depth: int) -> float:
    return (math.log10(lr) + 1.5) ** 2 + 0.15 * (depth - 6) ** 2


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("objective")
    (d / "objective.py").write_text(OBJECTIVE_PY)
    return str(d)


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(tmp_path / "jobs")


def start(backend, tmp_path, source, *, name, strategy, ranges=RANGES, max_jobs=None, parallel=2, seed=None,
          epochs=1, sleep=0.0, fail=0, metric=METRIC, **kw):
    plan = build_tuning(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point="objective.py",
                        source_dir=source, image_uri=IMAGE, instance_type="ml.m5.large",
                        hyperparameters={"epochs": epochs, "sleep": sleep, "fail": fail},
                        metric_definitions=[{"Name": metric, "Regex": r"val_loss=([0-9.]+)"}],
                        objective_metric_name=metric, objective_type="Minimize", strategy=strategy,
                        hyperparameter_ranges=ranges, max_jobs=max_jobs, max_parallel_jobs=parallel,
                        random_seed=seed, **kw)
    upload_source(plan.source_dir, "objective.py", plan.source_uri)
    backend.submit("tuning", plan.request)
    return plan.request




def trials(backend, name):
    return sorted(list_training_jobs_for_tuning_job(backend, name), key=lambda s: s["TrainingJobName"])


def objective(s):
    return s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]


def units_of(backend, trial_name) -> int:
    """Resource units a trial used: objective reports in its own log (independent of the tuner's count)."""
    events, _ = backend.log_events("training", trial_name)
    return sum(1 for e in events if "val_loss=" in e.message)


def max_concurrent(backend, name) -> int:
    """The most trials of the tuning job that were running at one moment (from their own state files)."""
    spans = []
    for s in trials(backend, name):
        st = json.loads((backend.job_dir("training", s["TrainingJobName"]) / "state.json").read_text())
        spans.append((st["created"], st["ended"]))
    return max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)


def check_shape(operation, response):
    """A response in the operation's output shape, by botocore's own validator."""
    from botocore.validate import ParamValidator

    from airflow_smdist.specs.validate import operation_model

    report = ParamValidator().validate(response, operation_model(operation).output_shape)
    assert not report.has_errors(), report.generate_report()


# ---- the search space ------------------------------------------------------------------------------------------
def test_scaling_types_map_onto_optuna_as_sagemaker_defines_them():
    """Linear uniform, Logarithmic log-uniform, ReverseLogarithmic log-uniform in 1 - x (dense near 1);
    values come back as the strings SageMaker passes, inside the range; parent values map back."""
    import statistics

    import optuna

    from airflow_smdist.backends.local.job.tuning import Space

    space = Space({"ContinuousParameterRanges": [
        {"Name": "lin", "MinValue": "0", "MaxValue": "1", "ScalingType": "Linear"},
        {"Name": "log", "MinValue": "0.0001", "MaxValue": "1", "ScalingType": "Logarithmic"},
        {"Name": "rev", "MinValue": "0.9", "MaxValue": "0.9999", "ScalingType": "ReverseLogarithmic"}],
        "IntegerParameterRanges": [{"Name": "n", "MinValue": "1", "MaxValue": "1000", "ScalingType": "Logarithmic"}],
        "CategoricalParameterRanges": [{"Name": "opt", "Values": ['"adam"', '"sgd"']}]})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    draws = [space.to_hyperparameters(study.ask(space.distributions).params) for _ in range(2000)]
    col = {k: [float(d[k]) for d in draws] for k in ("lin", "log", "rev", "n")}
    assert 0 <= min(col["lin"]) and max(col["lin"]) <= 1 and abs(statistics.median(col["lin"]) - 0.5) < 0.05
    assert 1e-4 <= min(col["log"]) and max(col["log"]) <= 1
    assert abs(math.log10(statistics.median(col["log"])) + 2) < 0.2  # half the draws below 10^-2: log-uniform
    assert 0.9 <= min(col["rev"]) and max(col["rev"]) <= 0.9999 and max(col["rev"]) < 1
    assert abs(math.log10(1 - statistics.median(col["rev"])) + 2.5) < 0.2  # log-uniform in 1 - x
    assert all(d["n"] == str(int(d["n"])) for d in draws) and abs(math.log10(statistics.median(col["n"])) - 1.5) < 0.2
    assert {d["opt"] for d in draws} == {'"adam"', '"sgd"'}
    # a parent's values map back into the space (warm start), and values outside it do not
    back = space.to_params({"lin": "0.25", "log": "0.01", "rev": "0.99", "n": "10", "opt": '"sgd"'})
    assert back["rev"] == pytest.approx(0.01) and back["n"] == 10 and back["opt"] == '"sgd"'
    assert space.to_params({"lin": "2", "log": "0.01", "rev": "0.99", "n": "10", "opt": '"sgd"'}) is None
    assert space.to_params({"lin": "0.5", "log": "0.01", "rev": "0.99", "n": "10", "opt": "sgd"})["opt"] == '"sgd"'


# ---- Bayesian vs random --------------------------------------------------------------------------------------
SEEDS = (0, 1, 2)
BUDGET = 15


@pytest.mark.slow
def test_bayesian_beats_random_on_a_known_objective(backend, tmp_path, source):
    """Same budget (15 trials, 2 at a time), same seeds: Optuna's Gaussian-process search finds a lower
    minimum than random search on average, and on most seeds."""
    names = {}
    for seed in SEEDS:
        for strategy in ("Bayesian", "Random"):
            names[(strategy, seed)] = name = unique(f"{strategy[:3].lower()}{seed}")
            start(backend, tmp_path, source, name=name, strategy=strategy, max_jobs=BUDGET, seed=seed)
    best = {}
    for (strategy, seed), name in names.items():
        d = wait(backend, "tuning", name)
        assert d["HyperParameterTuningJobStatus"] == "Completed", d.get("FailureReason")
        assert d["TrainingJobStatusCounters"]["Completed"] == BUDGET
        assert d["ObjectiveStatusCounters"] == {"Succeeded": BUDGET, "Pending": 0, "Failed": 0}
        listed = trials(backend, name)
        assert len(listed) == BUDGET
        for s in listed:  # the objective is the one the script computed from these very hyperparameters
            hp = s["TunedHyperParameters"]
            lr, depth = float(hp["learning_rate"]), int(hp["depth"])
            assert 1e-4 <= lr <= 1.0 and 1 <= depth <= 12
            assert objective(s) == pytest.approx(f(lr, depth), abs=1e-6)
            assert s["TrainingJobName"].startswith(f"{name}-") and len(s["TrainingJobName"].split("-")[-1]) == 8
        assert d["BestTrainingJob"]["TrainingJobName"] == min(listed, key=objective)["TrainingJobName"]
        assert max_concurrent(backend, name) <= 2  # MaxParallelTrainingJobs
        best[(strategy, seed)] = objective(d["BestTrainingJob"])
    bayes = [best[("Bayesian", s)] for s in SEEDS]
    rand = [best[("Random", s)] for s in SEEDS]
    print(f"\nbest objective after {BUDGET} trials, seeds {SEEDS}: Bayesian {bayes} (mean {sum(bayes) / 3:.4f}), "
          f"Random {rand} (mean {sum(rand) / 3:.4f})")
    assert sum(bayes) < sum(rand)
    assert sum(b < r for b, r in zip(bayes, rand)) >= 2


@pytest.mark.slow
def test_random_seed_makes_the_search_reproducible(backend, tmp_path, source):
    a, b, c = unique("seed-a"), unique("seed-b"), unique("seed-c")
    start(backend, tmp_path, source, name=a, strategy="Random", max_jobs=4, seed=11)
    start(backend, tmp_path, source, name=b, strategy="Random", max_jobs=4, seed=11)
    start(backend, tmp_path, source, name=c, strategy="Random", max_jobs=4, seed=12)
    picks = {}
    for name in (a, b, c):
        assert wait(backend, "tuning", name)["HyperParameterTuningJobStatus"] == "Completed"
        picks[name] = [s["TunedHyperParameters"] for s in trials(backend, name)]  # trial NNN order
    assert picks[a] == picks[b]
    assert picks[a] != picks[c]


# ---- Hyperband ---------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_hyperband_stops_trials_early_and_uses_fewer_resource_units_than_random(backend, tmp_path, source):
    """12 trials of 9 epochs each. Random runs every trial to the end; Hyperband (Optuna's HyperbandPruner,
    MinResource 2, MaxResource from the 'epochs' static hyperparameter) stops losers once their reported
    values lose at a rung. Both sample the same configurations (same seed), so they find the same best."""
    hb, rnd = unique("hb"), unique("rnd")
    start(backend, tmp_path, source, name=hb, strategy="Hyperband", max_jobs=12, seed=0, epochs=9, sleep=0.25,
          hyperband_min_resource=2)
    start(backend, tmp_path, source, name=rnd, strategy="Random", max_jobs=12, seed=0, epochs=9, sleep=0.25)
    dh, dr = wait(backend, "tuning", hb), wait(backend, "tuning", rnd)
    assert dh["HyperParameterTuningJobStatus"] == dr["HyperParameterTuningJobStatus"] == "Completed"
    assert dh["HyperParameterTuningJobConfig"]["StrategyConfig"]["HyperbandStrategyConfig"] == {
        "MinResource": 2, "MaxResource": 9}
    units_h = {s["TrainingJobName"]: units_of(backend, s["TrainingJobName"]) for s in trials(backend, hb)}
    units_r = {s["TrainingJobName"]: units_of(backend, s["TrainingJobName"]) for s in trials(backend, rnd)}
    assert set(units_r.values()) == {9} and len(units_r) == 12
    stopped = [s for s in trials(backend, hb) if s["TrainingJobStatus"] == "Stopped"]
    print(f"\nresource units: Hyperband {sum(units_h.values())} ({len(stopped)} of 12 trials stopped early), "
          f"Random {sum(units_r.values())}")
    assert stopped, "Hyperband stopped no trial"
    assert dh["TrainingJobStatusCounters"]["Stopped"] == len(stopped)
    for s in stopped:
        assert units_h[s["TrainingJobName"]] >= 2  # never before MinResource
        assert s["ObjectiveStatus"] == "Succeeded"  # its last reported value is its objective
    # stopped before the end (a stop lands within an epoch or so of the decision, which the log records)
    assert any(units_h[s["TrainingJobName"]] < 9 for s in stopped)
    assert sum(units_h.values()) < sum(units_r.values())
    assert max_concurrent(backend, hb) <= 2 and max_concurrent(backend, rnd) <= 2
    log = (backend.job_dir("tuning", hb) / "supervisor.log").read_text()
    assert "stopped early by Hyperband" in log
    # same configurations in the same order; the best one is never pruned (its curve leads at every rung)
    assert ([s["TunedHyperParameters"] for s in trials(backend, hb)]
            == [s["TunedHyperParameters"] for s in trials(backend, rnd)])
    assert dh["BestTrainingJob"]["TunedHyperParameters"] == dr["BestTrainingJob"]["TunedHyperParameters"]
    assert dh["BestTrainingJob"]["TrainingJobStatus"] == "Completed"


@pytest.mark.slow
def test_early_stopping_auto_stops_trials_worse_than_the_median(backend, tmp_path, source):
    name = unique("auto")
    start(backend, tmp_path, source, name=name, strategy="Random", max_jobs=10, seed=4, epochs=6, sleep=0.25,
          early_stopping_type="Auto")
    d = wait(backend, "tuning", name)
    assert d["HyperParameterTuningJobStatus"] == "Completed", d.get("FailureReason")
    listed = trials(backend, name)
    stopped = [s for s in listed if s["TrainingJobStatus"] == "Stopped"]
    assert stopped and any(units_of(backend, s["TrainingJobName"]) < 6 for s in stopped)
    assert all(units_of(backend, s["TrainingJobName"]) == 6 for s in listed if s["TrainingJobStatus"] == "Completed")
    assert "stopped early (median rule)" in (backend.job_dir("tuning", name) / "supervisor.log").read_text()


# ---- Grid ---------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_grid_covers_the_grid_exactly_and_describe_has_the_api_shape(backend, tmp_path, source):
    grid = {"learning_rate": [0.001, 0.03, 0.3], "depth": [2, 6, 9]}
    name = unique("grid")
    request = start(backend, tmp_path, source, name=name, strategy="Grid", ranges=grid)
    assert request["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxNumberOfTrainingJobs"] == 9
    d = wait(backend, "tuning", name)
    assert d["HyperParameterTuningJobStatus"] == "Completed"
    listed = trials(backend, name)
    # categorical values reach the trials as the text of each value ("0.03"), as the SDK sends them for the
    # user's own image
    seen = [(float(json.loads(s["TunedHyperParameters"]["learning_rate"])),
             int(json.loads(s["TunedHyperParameters"]["depth"]))) for s in listed]
    expected = {(lr, depth) for lr in grid["learning_rate"] for depth in grid["depth"]}
    assert len(seen) == 9 and set(seen) == expected  # every combination, each once
    assert max_concurrent(backend, name) <= 2
    lr, depth = min(expected, key=lambda c: f(*c))
    assert float(json.loads(d["BestTrainingJob"]["TunedHyperParameters"]["learning_rate"])) == lr
    assert objective(d["BestTrainingJob"]) == pytest.approx(f(lr, depth), abs=1e-6)
    # DescribeHyperParameterTuningJob and ListTrainingJobsForHyperParameterTuningJob shapes, by botocore
    check_shape("DescribeHyperParameterTuningJob", d)
    check_shape("ListTrainingJobsForHyperParameterTuningJob", {"TrainingJobSummaries": listed})
    assert d["TrainingJobStatusCounters"] == {"Completed": 9, "InProgress": 0, "RetryableError": 0,
                                              "NonRetryableError": 0, "Stopped": 0}
    assert d["HyperParameterTuningEndTime"] >= d["CreationTime"] and d["ConsumedResources"]["RuntimeInSeconds"] >= 0
    assert d["TrainingJobDefinition"] == request["TrainingJobDefinition"]
    ordered = list_training_jobs_for_tuning_job(backend, name, sort_by="FinalObjectiveMetricValue")
    assert [objective(s) for s in ordered] == sorted(objective(s) for s in listed)
    assert ordered[0]["TrainingJobName"] == d["BestTrainingJob"]["TrainingJobName"]
    desc = list_training_jobs_for_tuning_job(backend, name, sort_by="Name", sort_order="Descending")
    assert [s["TrainingJobName"] for s in desc] == [s["TrainingJobName"] for s in reversed(listed)]
    assert list_training_jobs_for_tuning_job(backend, name, status_equals="Failed") == []
    # each trial is a real training job of the definition, named <tuning job>-NNN-<8 hex>
    first = backend.describe("training", listed[0]["TrainingJobName"])
    assert listed[0]["TrainingJobName"].startswith(f"{name}-001-")
    assert first["HyperParameters"]["_tuning_objective_metric"] == METRIC
    assert first["HyperParameters"]["epochs"] == "1" and first["ResourceConfig"]["InstanceType"] == "ml.m5.large"
    assert first["ModelArtifacts"]["S3ModelArtifacts"] == \
        f"file://{tmp_path}/out/{listed[0]['TrainingJobName']}/output/model.tar.gz"


# ---- completion, failure, stop, warm start -----------------------------------------------------------------------
@pytest.mark.slow
def test_target_objective_value_completes_before_the_budget(backend, tmp_path, source):
    name = unique("target")
    start(backend, tmp_path, source, name=name, strategy="Random", max_jobs=40, seed=3, target_objective_value=2.0)
    d = wait(backend, "tuning", name)
    assert d["HyperParameterTuningJobStatus"] == "Completed"
    n = sum(d["TrainingJobStatusCounters"].values())
    assert n < 40 and objective(d["BestTrainingJob"]) <= 2.0
    values = [objective(s) for s in trials(backend, name) if "FinalHyperParameterTuningJobObjectiveMetric" in s]
    first_hit = next(i for i, v in enumerate(values) if v <= 2.0)
    assert n <= first_hit + 1 + 2  # at most the trials already running when the target was reached


@pytest.mark.slow
def test_failing_trials_fail_the_tuning_job_with_the_reason(backend, tmp_path, source):
    name = unique("fails")
    start(backend, tmp_path, source, name=name, strategy="Random", max_jobs=8, seed=0, fail=1)
    d = wait(backend, "tuning", name)
    assert d["HyperParameterTuningJobStatus"] == "Failed"
    assert "training jobs failed" in d["FailureReason"] and "ExitCode 3" in d["FailureReason"]
    assert "simulated failure" in d["FailureReason"]
    counters = d["TrainingJobStatusCounters"]
    # the first trials all failed; a trial still running then is stopped (as SageMaker stops a failing tuning
    # job's training jobs), never completed
    assert counters["NonRetryableError"] >= 3 and counters["Completed"] == counters["InProgress"] == 0, counters
    assert counters["NonRetryableError"] + counters["Stopped"] == sum(counters.values()) < 8, counters
    assert d["ObjectiveStatusCounters"]["Failed"] >= 3 and "BestTrainingJob" not in d


@pytest.mark.slow
def test_stop_ends_the_running_trials(backend, tmp_path, source):
    name = unique("stop")
    start(backend, tmp_path, source, name=name, strategy="Random", max_jobs=6, seed=0, epochs=300, sleep=0.2)
    deadline = time.time() + 60
    while time.time() < deadline:
        d = backend.describe("tuning", name)
        if d["TrainingJobStatusCounters"]["InProgress"] == 2 and all(
                backend.describe("training", s["TrainingJobName"])["SecondaryStatus"] == "Training"
                for s in trials(backend, name)):
            break
        time.sleep(0.2)
    assert d["HyperParameterTuningJobStatus"] == "InProgress" and d["ObjectiveStatusCounters"]["Pending"] == 2
    check_shape("DescribeHyperParameterTuningJob", d)
    backend.stop("tuning", name)
    assert backend.describe("tuning", name)["HyperParameterTuningJobStatus"] in ("Stopping", "Stopped")
    d = wait(backend, "tuning", name, timeout=90)
    assert d["HyperParameterTuningJobStatus"] == "Stopped"
    listed = trials(backend, name)
    assert len(listed) == 2 and {s["TrainingJobStatus"] for s in listed} == {"Stopped"}
    for s in listed:
        state = json.loads((backend.job_dir("training", s["TrainingJobName"]) / "state.json").read_text())
        for pid in state["host_pids"].values():
            assert launcher.tree(pid) == [], "a process of a stopped trial is still running"
    backend.stop("tuning", name)  # stopping a stopped job is a no-op


@pytest.mark.slow
def test_warm_start_informs_the_search_with_the_parents_trials(backend, tmp_path, source):
    parent, child, wrong = unique("parent"), unique("child"), unique("wrong")
    start(backend, tmp_path, source, name=parent, strategy="Random", max_jobs=6, seed=1)
    assert wait(backend, "tuning", parent)["HyperParameterTuningJobStatus"] == "Completed"
    start(backend, tmp_path, source, name=child, strategy="Bayesian", max_jobs=3, seed=1,
          warm_start_parents=[parent], warm_start_type="IdenticalDataAndAlgorithm")
    d = wait(backend, "tuning", child)
    assert d["HyperParameterTuningJobStatus"] == "Completed", d.get("FailureReason")
    log = (backend.job_dir("tuning", child) / "supervisor.log").read_text()
    assert "6 of 6 parent training jobs with an objective value fit the ranges and inform the search" in log
    everything = trials(backend, parent) + trials(backend, child)
    assert d["BestTrainingJob"]["TrainingJobName"] == min(trials(backend, child), key=objective)["TrainingJobName"]
    assert d["OverallBestTrainingJob"]["TrainingJobName"] == min(everything, key=objective)["TrainingJobName"]
    check_shape("DescribeHyperParameterTuningJob", d)
    # a parent with another objective metric is refused, with the reason
    start(backend, tmp_path, source, name=wrong, strategy="Bayesian", max_jobs=2, metric="val:other",
          warm_start_parents=[parent])
    d = wait(backend, "tuning", wrong)
    assert d["HyperParameterTuningJobStatus"] == "Failed"
    assert "needs the same objective metric" in d["FailureReason"] and parent in d["FailureReason"]


def test_what_cannot_run_locally_is_refused_before_anything_is_written(backend, tmp_path, source):
    # k-means has no local emulation (built-in XGBoost does: backends/local/inhost/builtin_xgboost.py)
    plan = build_tuning(job_name=unique("builtin"), role=ROLE, output_path=f"file://{tmp_path}/out",
                        algorithm="kmeans", instance_type="ml.m5.large",
                        hyperparameters={"k": 3, "feature_dim": 4}, objective_metric_name="test:msd",
                        objective_type="Minimize",
                        hyperparameter_ranges={"mini_batch_size": {"type": "integer", "min": 100, "max": 500}},
                        max_jobs=4)
    with pytest.raises(SpecError, match="runs its own container code"):
        backend.submit("tuning", plan.request)
    twice = json.loads(json.dumps(plan.request))
    twice["TrainingJobDefinitions"] = [twice.pop("TrainingJobDefinition")] * 2
    with pytest.raises(SpecError, match="several training job definitions"):
        backend.submit("tuning", twice)
    assert not backend.store.root.exists() or not list(backend.store.root.rglob("request.json"))


# ---- the operator and the sensor ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_operator_returns_the_best_trial_its_model_and_a_plot(tmp_path, source, monkeypatch):
    from airflow_smdist.operators.tuning import SmdistTuningOperator
    from airflow_smdist.sensors.tuning import SmdistTuningSensor

    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    op = SmdistTuningOperator(
        task_id="tune", entry_point="objective.py", source_dir=source, image_uri=IMAGE,
        output_path=f"file://{tmp_path}/out", hyperparameters={"epochs": 2}, instance_type="ml.m5.large",
        metric_definitions=[{"Name": METRIC, "Regex": r"val_loss=([0-9.]+)"}], objective_metric_name=METRIC,
        objective_type="Minimize", strategy="Random", max_jobs=5, max_parallel_jobs=2, random_seed=2,
        hyperparameter_ranges=RANGES, poll_interval=0.5, smdist_conn_id=None)
    ti = SimpleNamespace(dag_id="smdist_tests", task_id="tune", map_index=-1, xcom_push=lambda **kw: None)
    context = {"ti": ti, "run_id": unique("manual")}
    result = op.execute(context)
    assert result["status"] == "Completed" and result["backend"] == "local" and result["strategy"] == "Random"
    assert len(result["job_name"]) <= 32 and result["trials"] == 5
    backend = LocalBackend(tmp_path / "jobs")
    listed = trials(backend, result["job_name"])
    best = min(listed, key=objective)
    assert result["best_training_job"] == best["TrainingJobName"]
    assert result["best_objective_value"] == objective(best)
    assert result["best_hyperparameters"] == {"learning_rate": float(best["TunedHyperParameters"]["learning_rate"]),
                                              "depth": int(best["TunedHyperParameters"]["depth"])}
    # the model artifact is the best trial's, and was trained with its hyperparameters
    assert result["model_artifacts"] == f"file://{tmp_path}/out/{best['TrainingJobName']}/output/model.tar.gz"
    with tarfile.open(result["model_artifacts"][len("file://"):]) as tar:
        model = json.load(tar.extractfile("model.json"))
    assert model["learning_rate"] == result["best_hyperparameters"]["learning_rate"]
    assert model["depth"] == result["best_hyperparameters"]["depth"]
    assert result["entry_point"] == "objective.py" and result["training_image"] == IMAGE
    # the plot and the trials, written with the results
    assert result["plot_uri"] == f"file://{tmp_path}/out/{result['job_name']}/tuning-results/objective.png"
    png = open(result["plot_uri"][len("file://"):], "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    doc = json.loads(open(result["results_uri"][len("file://"):]).read())
    assert [r["training_job"] for r in doc["trials"]] == [s["TrainingJobName"] for s in listed]
    assert doc["best_training_job"] == best["TrainingJobName"]
    json.dumps(result)  # XCom-safe
    # a retry of the task reattaches to the finished job instead of starting another
    again = op.execute(context)
    assert again["job_name"] == result["job_name"] and again["best_training_job"] == result["best_training_job"]
    # the sensor returns the same result for the job
    sensor = SmdistTuningSensor(task_id="wait", job_name=result["job_name"], smdist_conn_id=None)
    poked = sensor.poke(context)
    assert poked.is_done and poked.xcom_value["best_training_job"] == result["best_training_job"]
    assert poked.xcom_value["model_artifacts"] == result["model_artifacts"]


@pytest.mark.slow
def test_sensor_waits_while_running_and_fails_on_a_failed_job(backend, tmp_path, source, monkeypatch):
    from airflow_smdist._compat import AirflowException
    from airflow_smdist.sensors.tuning import SmdistTuningSensor

    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(backend.store.root))
    name = unique("sensed")
    start(backend, tmp_path, source, name=name, strategy="Random", max_jobs=3, seed=0, fail=1, epochs=2, sleep=0.5)
    sensor = SmdistTuningSensor(task_id="wait", job_name=name, smdist_conn_id=None)
    assert sensor.poke({}) is False
    wait(backend, "tuning", name)
    with pytest.raises(AirflowException, match="ended Failed"):
        sensor.poke({})


@pytest.mark.slow
def test_deferred_tuning_waits_through_the_trigger_and_returns_the_same_result(tmp_path, source, monkeypatch):
    import asyncio

    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS
    from airflow_smdist.operators.tuning import SmdistTuningOperator

    TaskDeferred = __import__("airflow.sdk.exceptions" if AIRFLOW_V_3_0_PLUS else "airflow.exceptions",
                              fromlist=["TaskDeferred"]).TaskDeferred
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    op = SmdistTuningOperator(
        task_id="tune", entry_point="objective.py", source_dir=source, image_uri=IMAGE,
        output_path=f"file://{tmp_path}/out", hyperparameters={"epochs": 2}, instance_type="ml.m5.large",
        metric_definitions=[{"Name": METRIC, "Regex": r"val_loss=([0-9.]+)"}], objective_metric_name=METRIC,
        objective_type="Minimize", strategy="Random", max_jobs=2, max_parallel_jobs=2, random_seed=1,
        hyperparameter_ranges=RANGES, poll_interval=0.5, smdist_conn_id=None, deferrable=True)
    context = {"ti": SimpleNamespace(dag_id="smdist_tests", task_id="tune", map_index=-1, xcom_push=lambda **kw: None),
               "run_id": unique("manual")}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    path, kwargs = deferred.value.trigger.serialize()
    assert kwargs["kind"] == "tuning"
    trigger = type(deferred.value.trigger)(**kwargs)

    async def first_event():
        async for event in trigger.run():
            return event

    event = asyncio.run(asyncio.wait_for(first_event(), 180))
    assert event.payload["status"] == "success"
    result = op.execute_complete(context, event.payload)
    assert result["status"] == "Completed" and result["trials"] == 2 and result["best_training_job"]
    # the tuning job's logs are its own platform lines and every trial's hosts, prefixed by trial
    events, cursor = LocalBackend(tmp_path / "jobs").log_events("tuning", result["job_name"])
    hosts = {e.host for e in events}
    assert "platform" in hosts and {h for h in hosts if h.endswith("/algo-1")} and len(hosts) >= 3
    assert [e.timestamp for e in events] == sorted(e.timestamp for e in events)
    assert LocalBackend(tmp_path / "jobs").log_events("tuning", result["job_name"], cursor)[0] == []


@pytest.mark.slow
def test_a_failed_tuning_job_fails_its_task_with_the_reason_and_no_training_insight(tmp_path, source, monkeypatch,
                                                                                    caplog, capfd):
    """The tuning operator shares the training operator's arguments, not its insight (a tuning job has none:
    each trial is a training job of its own): a failed tuning job's task fails with the job's reason, and its
    log has no "No insight for job None" warning."""
    from airflow.exceptions import AirflowException

    from airflow_smdist.operators.tuning import SmdistTuningOperator

    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    op = SmdistTuningOperator(
        task_id="tune", entry_point="objective.py", source_dir=source, image_uri=IMAGE,
        output_path=f"file://{tmp_path}/out", hyperparameters={"epochs": 1, "fail": 1}, instance_type="ml.m5.large",
        metric_definitions=[{"Name": METRIC, "Regex": r"val_loss=([0-9.]+)"}], objective_metric_name=METRIC,
        objective_type="Minimize", strategy="Random", max_jobs=4, max_parallel_jobs=2, random_seed=2,
        hyperparameter_ranges=RANGES, poll_interval=0.5, smdist_conn_id=None)
    ti = SimpleNamespace(dag_id="smdist_tests", task_id="tune", map_index=-1, xcom_push=lambda **kw: None)
    caplog.set_level(logging.INFO)
    with pytest.raises(AirflowException, match="simulated failure"):
        op.execute({"ti": ti, "run_id": unique("manual")})
    text = caplog.text + capfd.readouterr().out  # the task logger: logging on Airflow 2, structlog on 3
    assert "Tuning job Failed" in text, text[-2000:]
    assert "No insight for job" not in text and "Insight of failed job" not in text, text[-2000:]
