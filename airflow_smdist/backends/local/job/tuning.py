"""The supervisor of one local tuning job: ``python -m airflow_smdist.backends.local.job.tuning <job dir>``.

The search runs for real. Every trial is a local training job (:mod:`.training`), submitted through
``LocalBackend.submit("training", ..., parent=<tuning job>)`` and named as SageMaker names them,
``<tuning-job>-NNN-<8 hex>``; at most ``MaxParallelTrainingJobs`` run at once. A trial's objective is the
last value of the objective metric its MetricDefinitions regex found in its logs (FinalMetricDataList);
intermediate values are read from the trial's ``metrics.jsonl`` as they arrive, every objective-regex match
being one resource unit (an epoch), which is what Hyperband and ``TrainingJobEarlyStoppingType=Auto`` act on.

Strategies:

* ``Random``: Optuna's RandomSampler over the ranges, seeded with RandomSeed.
* ``Bayesian``: a real Bayesian optimiser, Optuna's GPSampler (Gaussian process, expected improvement;
  SageMaker's Bayesian search is Gaussian-process based too), with running trials taken into account so
  parallel trials do not repeat one another; Optuna's TPESampler where GPSampler's dependencies (torch,
  scipy) are missing, or with ``SMDIST_LOCAL_BAYESIAN_SAMPLER=tpe``.
* ``Hyperband``: configurations sampled at random (seeded), trials report each objective value to Optuna's
  HyperbandPruner (asynchronous successive halving over brackets, reduction factor 3, from MinResource to
  MaxResource); a trial it prunes is stopped at once with StopTrainingJob. No trial is stopped before
  MinResource; one that reports more than MaxResource values is stopped there.
* ``Grid``: every combination of the categorical ranges, each exactly once.

Scaling types map onto Optuna's distributions: Linear (and Auto, which locally means Linear) uniform,
Logarithmic ``log=True``, ReverseLogarithmic log-uniform in ``1 - x`` (values crowd towards 1, as SageMaker
defines it for ranges within [0, 1)). Warm start reads each parent tuning job's trials (hyperparameters and
objective) from the local store and adds those that fit the new ranges to the Optuna study.

Completion: the budget (MaxNumberOfTrainingJobs), MaxRuntimeInSeconds (running trials are stopped, the job
completes), TuningJobCompletionCriteria (TargetObjectiveMetricValue; BestObjectiveNotImproving: that many
finished trials in a row without improving the best by 1%; ConvergenceDetected: locally, the best improved
less than 0.1% over the last max(5, MaxNumberOfTrainingJobs / 5) trials). The job fails when no trial
produces an objective value (and stops early when its first trials all fail).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any
from typing import TYPE_CHECKING, Literal, TypeAlias

from airflow_smdist.backends.base import TERMINAL_STATES, JobNotFound
from airflow_smdist.backends.local import dt, last_modified
from airflow_smdist.backends.local.store import read_jsonl
from airflow_smdist.backends.local.job.supervisor import JobSupervisor, stop_grace
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.tuning import check_tuning_request, grid_combinations, infer_max_resource

if TYPE_CHECKING:
    import optuna

    from airflow_smdist.backends.local import LocalBackend

OPERATION = "CreateHyperParameterTuningJob"
POLL = 0.25
#: the relative improvement that counts as "improving" for BestObjectiveNotImproving (DG: 1% or greater)
IMPROVEMENT = 0.01
CONVERGENCE = 0.001
HYPERBAND_REDUCTION_FACTOR = 3


# ---- what runs locally -------------------------------------------------------------------------------------
def objective_of(request: dict[str, Any]) -> dict[str, Any]:
    objective: dict[str, Any] = request["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
    return objective


def check_request(request: dict[str, Any]) -> None:
    """What the local backend cannot run, refused before anything is written, with the way out."""
    from airflow_smdist.backends.local.job import training

    check_tuning_request(request)
    cfg = request["HyperParameterTuningJobConfig"]
    if request.get("TrainingJobDefinitions"):
        raise SpecError("TrainingJobDefinitions", "several training job definitions are not run by the local backend.",
                        "give one TrainingJobDefinition locally, or use backend='sagemaker'.")
    if request.get("Autotune"):
        raise SpecError("Autotune", "SageMaker's Autotune chooses ranges and strategy itself, which needs SageMaker.",
                        "give explicit ranges and a strategy locally, or use backend='sagemaker'.")
    if (cfg.get("ParameterRanges") or {}).get("AutoParameters"):
        raise SpecError("HyperParameterTuningJobConfig.ParameterRanges.AutoParameters",
                        "AutoParameters (ranges SageMaker infers from a hint) need SageMaker.",
                        "give integer, continuous or categorical ranges locally.")
    if not cfg.get("HyperParameterTuningJobObjective"):
        raise SpecError("HyperParameterTuningJobConfig.HyperParameterTuningJobObjective", "is required locally.",
                        "give the objective metric and type.")
    if cfg["Strategy"] != "Grid":
        import importlib.util

        if importlib.util.find_spec("optuna") is None:
            raise SpecError("HyperParameterTuningJobConfig.Strategy",
                            f"the local backend's {cfg['Strategy']} search runs on Optuna, "
                            "which is not installed here.",
                            "pip install 'airflow-smdist[local]' (or optuna), use strategy='Grid', or "
                            "backend='sagemaker'.")
    definition = request["TrainingJobDefinition"]
    if definition.get("HyperParameterTuningResourceConfig"):
        raise SpecError("TrainingJobDefinition.HyperParameterTuningResourceConfig",
                        "instance fallback lists are not run locally.", "give ResourceConfig.")
    if definition.get("HyperParameterRanges"):
        raise SpecError("TrainingJobDefinition.HyperParameterRanges", "is for TrainingJobDefinitions.",
                        "give the ranges in HyperParameterTuningJobConfig.ParameterRanges.")
    sample = trial_request(request, f"{request['HyperParameterTuningJobName']}-000-00000000", {})
    try:
        training.check_request(sample)
    except SpecError as exc:  # a member of the definition is named as the tuning request has it
        if exc.field.split(".")[0].split("[")[0] not in definition:
            raise
        raise SpecError(f"TrainingJobDefinition.{exc.field}", exc.problem, exc.fix) from None


def trial_name(tuning_name: str, number: int) -> str:
    return f"{tuning_name}-{number:03d}-{uuid.uuid4().hex[:8]}"


def trial_request(request: dict[str, Any], name: str, tuned: dict[str, str]) -> dict[str, Any]:
    """The CreateTrainingJob request of one trial: the definition, the static hyperparameters plus this
    trial's values, and ``_tuning_objective_metric`` (the service adds it; the training toolkit drops it)."""
    d = request["TrainingJobDefinition"]
    hps = dict(d.get("StaticHyperParameters") or {})
    hps.update(tuned)
    hps["_tuning_objective_metric"] = objective_of(request)["MetricName"]
    out: dict[str, Any] = {"TrainingJobName": name, "AlgorithmSpecification": dict(d["AlgorithmSpecification"]),
                           "HyperParameters": hps}
    for key in ("RoleArn", "InputDataConfig", "VpcConfig", "OutputDataConfig", "ResourceConfig", "StoppingCondition",
                "EnableNetworkIsolation", "EnableInterContainerTrafficEncryption", "EnableManagedSpotTraining",
                "CheckpointConfig", "RetryStrategy", "Environment"):
        if key in d:
            out[key] = d[key]
    if request.get("Tags"):
        out["Tags"] = list(request["Tags"])  # SageMaker propagates the tuning job's tags to its trials
    return out


def better(a: float, b: float, maximize: bool) -> bool:
    return a > b if maximize else a < b


# ---- the search space ----------------------------------------------------------------------------------------
class Space:
    """ParameterRanges as Optuna distributions, and Optuna's values back as hyperparameter strings."""

    def __init__(self, ranges: dict[str, Any]) -> None:
        import optuna

        d = optuna.distributions
        self.kinds: dict[str, str] = {}
        self.reverse: set[str] = set()
        self.distributions: dict[str, Any] = {}
        self.values: dict[str, list[str]] = {}
        for r in ranges.get("ContinuousParameterRanges", []):
            lo, hi, scale = float(r["MinValue"]), float(r["MaxValue"]), r.get("ScalingType", "Auto")
            self.kinds[r["Name"]] = "continuous"
            if scale == "ReverseLogarithmic":  # log-uniform in 1 - x: dense near 1
                self.reverse.add(r["Name"])
                self.distributions[r["Name"]] = d.FloatDistribution(1.0 - hi, 1.0 - lo, log=True)
            else:
                self.distributions[r["Name"]] = d.FloatDistribution(lo, hi, log=scale == "Logarithmic")
        for r in ranges.get("IntegerParameterRanges", []):
            lo, hi = int(float(r["MinValue"])), int(float(r["MaxValue"]))
            self.kinds[r["Name"]] = "integer"
            self.distributions[r["Name"]] = d.IntDistribution(lo, hi, log=r.get("ScalingType") == "Logarithmic")
        for r in ranges.get("CategoricalParameterRanges", []):
            self.kinds[r["Name"]] = "categorical"
            self.values[r["Name"]] = list(r["Values"])
            self.distributions[r["Name"]] = d.CategoricalDistribution(list(r["Values"]))

    def to_hyperparameters(self, params: dict[str, Any]) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in params.items():
            kind = self.kinds[name]
            if kind == "continuous":
                dist = self.distributions[name]
                x = 1.0 - value if name in self.reverse else value
                lo, hi = (1.0 - dist.high, 1.0 - dist.low) if name in self.reverse else (dist.low, dist.high)
                out[name] = repr(min(max(float(x), lo), hi))
            elif kind == "integer":
                out[name] = str(int(value))
            else:
                out[name] = str(value)
        return out

    def to_params(self, hyperparameters: dict[str, str]) -> dict[str, Any] | None:
        """Optuna parameters for a parent trial's values, or None when one does not fit the ranges."""
        params: dict[str, Any] = {}
        for name, dist in self.distributions.items():
            if name not in hyperparameters:
                return None
            raw = hyperparameters[name]
            try:
                if self.kinds[name] == "categorical":
                    if raw in self.values[name]:
                        value: Any = raw
                    else:  # "0.1" vs '"0.1"': compare decoded values
                        decoded = _decode(raw)
                        value = next(v for v in self.values[name] if _decode(v) == decoded)
                elif self.kinds[name] == "integer":
                    value = int(float(_decode(raw)))
                else:
                    value = float(_decode(raw))
                    if name in self.reverse:
                        value = 1.0 - value
            except (StopIteration, TypeError, ValueError):
                return None
            if not dist._contains(dist.to_internal_repr(value)):
                return None
            params[name] = value
        return params


def _decode(raw: Any) -> Any:
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return raw


# ---- searches ---------------------------------------------------------------------------------------------------
class GridSearch:
    """Every combination of the categorical ranges, once each."""

    description = "every combination of the categorical ranges"

    def __init__(self, ranges: dict[str, Any]) -> None:
        self.combinations = grid_combinations(ranges)
        self.next = 0

    @property
    def total(self) -> int:
        return len(self.combinations)

    def ask(self) -> tuple[Any, dict[str, str]] | None:
        if self.next >= len(self.combinations):
            return None
        combo = self.combinations[self.next]
        self.next += 1
        return None, dict(combo)

    def report(self, handle: Any, step: int, value: float) -> bool:
        return False

    def tell(self, handle: Any, value: float | None, state: str) -> None:
        pass

    def add_warm_start(self, trials: list[tuple[dict[str, str], float]]) -> int:
        return 0


class OptunaSearch:
    """Random, Bayesian and Hyperband through one Optuna study, driven by ask / report / tell."""

    def __init__(self, request: dict[str, Any], space: Space) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        cfg = request["HyperParameterTuningJobConfig"]
        self.space = space
        self.strategy = cfg["Strategy"]
        seed = cfg.get("RandomSeed")
        max_jobs = cfg["ResourceLimits"].get("MaxNumberOfTrainingJobs") or 10
        pruner: Any = optuna.pruners.NopPruner()
        if self.strategy == "Bayesian":
            startup = max(2, min(10, max_jobs // 4))
            sampler, self.description = bayesian_sampler(seed, startup)
        else:
            sampler = optuna.samplers.RandomSampler(seed=seed)
            self.description = f"Optuna RandomSampler (seed {seed})"
        if self.strategy == "Hyperband":
            hb = (cfg.get("StrategyConfig") or {}).get("HyperbandStrategyConfig") or {}
            self.min_resource, self.max_resource = hyperband_resources(request)
            pruner = optuna.pruners.HyperbandPruner(min_resource=self.min_resource, max_resource=self.max_resource,
                                                    reduction_factor=HYPERBAND_REDUCTION_FACTOR)
            self.description += (f" with Optuna HyperbandPruner (MinResource {hb.get('MinResource', 1)}, "
                                 f"MaxResource {self.max_resource}, reduction factor {HYPERBAND_REDUCTION_FACTOR})")
        maximize = objective_of(request)["Type"] == "Maximize"
        direction: Literal["maximize", "minimize"] = "maximize" if maximize else "minimize"
        self.study = optuna.create_study(direction=direction, sampler=sampler, pruner=pruner)
        self.total = None

    def ask(self) -> tuple[optuna.trial.Trial, dict[str, str]]:
        trial = self.study.ask(self.space.distributions)
        return trial, self.space.to_hyperparameters(trial.params)

    def report(self, trial: optuna.trial.Trial, step: int, value: float) -> bool:
        """One intermediate objective value at ``step`` (resource units so far). True: stop the trial."""
        if self.strategy != "Hyperband":
            return False
        trial.report(value, step)
        return trial.should_prune()

    def tell(self, trial: optuna.trial.Trial, value: float | None, state: str) -> None:
        import optuna

        states = {"complete": optuna.trial.TrialState.COMPLETE, "pruned": optuna.trial.TrialState.PRUNED,
                  "fail": optuna.trial.TrialState.FAIL}
        if state == "complete" and value is None:
            state = "fail"
        if state == "complete":
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=states[state])

    def add_warm_start(self, trials: list[tuple[dict[str, str], float]]) -> int:
        import optuna

        added = 0
        for hps, value in trials:
            params = self.space.to_params(hps)
            if params is None:
                continue
            self.study.add_trial(optuna.trial.create_trial(params=params, distributions=self.space.distributions,
                                                           value=value))
            added += 1
        return added


def bayesian_sampler(seed: int | None, startup: int) -> tuple[optuna.samplers.BaseSampler, str]:
    """(sampler, description): Optuna's GPSampler where torch and scipy import, else TPESampler."""
    import optuna

    choice = os.environ.get("SMDIST_LOCAL_BAYESIAN_SAMPLER", "gp").lower()
    if choice == "gp":
        try:
            import scipy  # noqa: F401
            import torch

            torch.set_num_threads(1)  # the trials need the cores more than the model of them
            return (optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup, deterministic_objective=False),
                    f"Optuna GPSampler (Gaussian process, {startup} random start-up trials, seed {seed})")
        except ImportError:
            pass
    return (optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True, constant_liar=True),
            f"Optuna TPESampler (multivariate, constant liar, {startup} random start-up trials, seed {seed})")


def hyperband_resources(request: dict[str, Any]) -> tuple[int, int]:
    cfg = request["HyperParameterTuningJobConfig"]
    hb = (cfg.get("StrategyConfig") or {}).get("HyperbandStrategyConfig") or {}
    low = int(hb.get("MinResource", 1))
    high = hb.get("MaxResource")
    if high is None:
        inferred = infer_max_resource(request["TrainingJobDefinition"].get("StaticHyperParameters") or {})
        if inferred is None:  # check_tuning_request refuses such a request at submit
            raise RuntimeError("ValidationException: HyperbandStrategyConfig.MaxResource is missing and cannot be "
                               "inferred from the static hyperparameters")
        high = inferred[0]
    return low, int(high)


class MedianStopping:
    """``TrainingJobEarlyStoppingType=Auto`` as the DG describes it: after each epoch, take every earlier
    finished trial's running average of the objective up to that epoch, and stop the trial if its value is
    worse than the median of those averages. Needs at least 3 earlier trials that reached that epoch."""

    def __init__(self, maximize: bool, min_trials: int = 3) -> None:
        self.maximize = maximize
        self.min_trials = min_trials
        self.curves: list[list[float]] = []

    def should_stop(self, curve: list[float]) -> bool:
        k = len(curve)
        averages = [sum(c[:k]) / k for c in self.curves if len(c) >= k]
        if k < 1 or len(averages) < self.min_trials:
            return False
        return better(statistics.median(averages), curve[-1], self.maximize)

    def finished(self, curve: list[float]) -> None:
        if curve:
            self.curves.append(list(curve))


class Completion:
    """TuningJobCompletionCriteria, fed with each finished trial's objective in finishing order."""

    def __init__(self, request: dict[str, Any], maximize: bool) -> None:
        cfg = request["HyperParameterTuningJobConfig"]
        criteria = cfg.get("TuningJobCompletionCriteria") or {}
        self.maximize = maximize
        self.target = criteria.get("TargetObjectiveMetricValue")
        self.not_improving_limit = (criteria.get("BestObjectiveNotImproving") or {}).get(
            "MaxNumberOfTrainingJobsNotImproving")
        self.convergence = (criteria.get("ConvergenceDetected") or {}).get("CompleteOnConvergence") == "Enabled"
        max_jobs = cfg["ResourceLimits"].get("MaxNumberOfTrainingJobs") or 25
        self.window = max(5, max_jobs // 5)
        self.best: float | None = None
        self.history: list[float] = []  # best after each finished trial
        self.not_improving = 0
        self.converged_at: float | None = None

    def add(self, value: float) -> None:
        if self.best is None:
            self.best = value
        else:
            margin = IMPROVEMENT * abs(self.best)
            improved = (value > self.best + margin) if self.maximize else (value < self.best - margin)
            if margin == 0:
                improved = better(value, self.best, self.maximize)
            self.not_improving = 0 if improved else self.not_improving + 1
            if better(value, self.best, self.maximize):
                self.best = value
        self.history.append(self.best)

    def met(self) -> str | None:
        if self.best is None:
            return None
        if self.target is not None and not better(float(self.target), self.best, self.maximize):
            return f"the objective reached TargetObjectiveMetricValue {self.target} ({self.best})"
        if self.not_improving_limit and self.not_improving >= self.not_improving_limit:
            return (f"{self.not_improving} training jobs in a row did not improve the best objective by 1% "
                    f"(BestObjectiveNotImproving {self.not_improving_limit})")
        if self.convergence and len(self.history) > self.window:
            then, now = self.history[-self.window - 1], self.history[-1]
            if abs(now - then) <= CONVERGENCE * max(abs(then), 1e-12):
                self.converged_at = self.converged_at or time.time()
                return f"convergence detected: the best objective moved less than 0.1% over {self.window} training jobs"
        return None


# ---- the supervisor -------------------------------------------------------------------------------------------
class Trial:
    def __init__(self, number: int, name: str, tuned: dict[str, str], handle: Any) -> None:
        self.number = number
        self.name = name
        self.tuned = tuned
        self.handle = handle
        self.curve: list[float] = []  # every objective value reported so far (one per resource unit)
        self.curve_final: float | None = None  # the objective the search was told
        self.offset = 0
        self.stop_reason: str | None = None
        self.told = False
        self.status = "InProgress"

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "number": self.number, "tuned": self.tuned, "units": len(self.curve),
                "stop_reason": self.stop_reason, "status": self.status}


#: the search a tuning job drives (ask / report / tell)
Search: TypeAlias = "GridSearch | OptunaSearch"


class TuningSupervisor(JobSupervisor):
    kind = "tuning"

    def __init__(self, job_dir: Path) -> None:
        super().__init__(job_dir)
        from airflow_smdist.backends.local import LocalBackend

        self.backend = LocalBackend(self.state.get("root") or self.store.root, region_name=self.state.get("region"),
                                    s3_endpoint_url=self.state.get("s3_endpoint_url"),
                                    local_runtimes=self.state.get("runtimes"),
                                    local_spot_interruptions=(self.state.get("rehearsal") or {}).get("spot"),
                                    local_instance_failures=(self.state.get("rehearsal") or {}).get("failures"))
        cfg = self.request["HyperParameterTuningJobConfig"]
        self.cfg = cfg
        self.objective = objective_of(self.request)
        self.maximize = self.objective["Type"] == "Maximize"
        self.trials: list[Trial] = []
        self.running: list[Trial] = []

    # -- trial bookkeeping ----------------------------------------------------------------------------------
    def persist(self, **changes: Any) -> None:
        # host_pids: the running trials' supervisors, ended by the backend should this supervisor die
        values = {"trials": [t.record() for t in self.trials], "modified": time.time(),
                  "host_pids": {t.name: self.backend._supervisor_pid(self.backend.job_dir("training", t.name))
                                for t in self.running}}
        values.update(changes)
        self.save(**values)

    def launch(self, search: Search) -> bool:
        asked = search.ask()
        if asked is None:
            return False
        handle, tuned = asked
        number = len(self.trials) + 1
        name = trial_name(self.name, number)
        trial = Trial(number, name, tuned, handle)
        self.backend.submit("training", trial_request(self.request, name, tuned), parent=self.name)
        self.trials.append(trial)
        self.running.append(trial)
        self.say(f"{name} started: " + ", ".join(f"{k}={v}" for k, v in sorted(tuned.items())))
        self.persist()
        return True

    def new_values(self, trial: Trial) -> list[float]:
        """Objective values the trial reported since the last call (its metrics.jsonl, complete lines)."""
        points, trial.offset = read_jsonl(self.backend.job_dir("training", trial.name) / "metrics.jsonl",
                                          trial.offset)
        return [float(p["value"]) for p in points if p["name"] == self.objective["MetricName"]]

    def stop_trial(self, trial: Trial, reason: str) -> None:
        if trial.stop_reason is None:
            trial.stop_reason = reason
        try:
            self.backend.stop("training", trial.name)
        except JobNotFound:
            pass

    def final_objective(self, trial: Trial, description: dict[str, Any]) -> float | None:
        for m in description.get("FinalMetricDataList") or []:
            if m["MetricName"] == self.objective["MetricName"]:
                return float(m["Value"])
        return trial.curve[-1] if trial.curve else None

    # -- main ----------------------------------------------------------------------------------------------
    def warm_start(self, search: Search) -> None:
        warm = self.request.get("WarmStartConfig")
        if not warm:
            return
        trials: list[tuple[dict[str, str], float]] = []
        for parent in warm["ParentHyperParameterTuningJobs"]:
            pname = parent["HyperParameterTuningJobName"]
            try:
                preq = self.backend.store.request("tuning", pname)
                pdesc = self.backend.describe("tuning", pname)
            except JobNotFound:
                raise RuntimeError(f"ValidationException: parent tuning job {pname!r} does not exist") from None
            if pdesc["HyperParameterTuningJobStatus"] not in TERMINAL_STATES:
                raise RuntimeError(f"ValidationException: parent tuning job {pname!r} is "
                                   f"{pdesc['HyperParameterTuningJobStatus']}; warm start needs parents that are "
                                   "Completed, Stopped or Failed")
            if objective_of(preq)["MetricName"] != self.objective["MetricName"]:
                raise RuntimeError(f"ValidationException: parent tuning job {pname!r} optimises "
                                   f"{objective_of(preq)['MetricName']!r}, not {self.objective['MetricName']!r}; "
                                   "warm start needs the same objective metric")
            static = preq["TrainingJobDefinition"].get("StaticHyperParameters") or {}
            for s in list_training_jobs_for_tuning_job(self.backend, pname):
                metric = s.get("FinalHyperParameterTuningJobObjectiveMetric")
                if metric is None:
                    continue
                trials.append(({**static, **s["TunedHyperParameters"]}, float(metric["Value"])))
        added = search.add_warm_start(trials)
        self.say(f"warm start ({warm['WarmStartType']}): {added} of {len(trials)} parent training jobs with an "
                 "objective value fit the ranges and inform the search")

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        (self.dir / "logs").mkdir(exist_ok=True)
        started = time.time()
        self.save(status="InProgress", started=started)
        status, reason = "Failed", None
        try:
            status, reason = self.search_loop(started)
        except Exception as e:  # noqa: BLE001 - any platform error fails the job with its reason
            self.log.write(traceback.format_exc())
            text = str(e)
            status, reason = "Failed", text if text.startswith(("ValidationException", "ClientError")) else \
                f"{type(e).__name__}: {text}"
            for t in list(self.running):
                self.stop_trial(t, "tuning-failed")
            self.wait_for_running()
        finally:
            self.store.release_block(f"tuning/{self.name}")
        self.say(f"Tuning job {status}" + (f": {reason}" if reason else ""))
        self.persist(status=status, failure_reason=reason or None, ended=time.time(),
                     host_pids={})
        return 0 if status == "Completed" else 1

    def wait_for_running(self, search: Search | None = None) -> None:
        deadline = time.time() + stop_grace() + 120
        while self.running and time.time() < deadline:
            self.poll(search, allow_decisions=False)
            time.sleep(POLL)

    def make_search(self) -> Search:
        ranges = self.cfg["ParameterRanges"]
        if self.cfg["Strategy"] == "Grid":
            return GridSearch(ranges)
        return OptunaSearch(self.request, Space(ranges))

    def search_loop(self, started: float) -> tuple[str, str | None]:
        limits = self.cfg["ResourceLimits"]
        search = self.make_search()
        max_jobs = limits.get("MaxNumberOfTrainingJobs") or search.total or 10 ** 9
        parallel = int(limits["MaxParallelTrainingJobs"])
        max_runtime = limits.get("MaxRuntimeInSeconds")
        self.early = MedianStopping(self.maximize) if self.cfg.get("TrainingJobEarlyStoppingType") == "Auto" else None
        self.completion = Completion(self.request, self.maximize)
        self.say(f"{self.cfg['Strategy']} search, {search.description}: up to {max_jobs} training jobs, {parallel} at "
                 f"a time; objective: {self.objective['Type']} {self.objective['MetricName']}")
        self.warm_start(search)
        fail_fast = min(max_jobs, max(3, parallel))
        ending: str | None = None  # why no more trials start
        while True:
            if self.stop_requested or (self.dir / "stop").exists():
                self.say("StopHyperParameterTuningJob: stopping the running training jobs")
                self.save(status="Stopping")
                self.stop_running(search, "tuning-stopped")
                return "Stopped", None
            self.poll(search)
            if ending is None:
                ending = self.check_ending(started, max_runtime)
                failed = None if ending else self.failing_fast(search, fail_fast)
                if failed:
                    return "Failed", failed
            if ending is None:
                while len(self.running) < parallel and len(self.trials) < max_jobs:
                    if not self.launch(search):
                        max_jobs = len(self.trials)
                        break
            if not self.running and (ending is not None or len(self.trials) >= max_jobs):
                break
            time.sleep(POLL)
        if self.succeeded() == 0:
            failures = [t for t in self.trials if t.status == "Failed"]
            detail = ""
            if failures:
                detail = (f"; {failures[0].name}: "
                          + self.backend.describe("training", failures[0].name).get("FailureReason", ""))
            return "Failed", (f"ClientError: none of the {len(self.trials)} training jobs reported the "
                              f"objective metric {self.objective['MetricName']!r}" + detail)
        if self.completion.converged_at:
            self.persist(convergence_time=self.completion.converged_at)
        return "Completed", None

    def stop_running(self, search: Search, reason: str) -> None:
        for t in list(self.running):
            self.stop_trial(t, reason)
        self.wait_for_running(search)

    def failing_fast(self, search: Search, fail_fast: int) -> str | None:
        """The FailureReason when the first ``fail_fast`` trials all failed without an objective (the
        running ones are stopped), else None."""
        finished = [t for t in self.trials if t.status in TERMINAL_STATES]
        if not (len(finished) >= fail_fast and self.succeeded() == 0 and all(t.status == "Failed" for t in finished)):
            return None
        first = self.backend.describe("training", finished[0].name).get("FailureReason", "")
        self.stop_running(search, "tuning-failed")
        return (f"ClientError: the first {len(finished)} training jobs failed, none reported the "
                f"objective metric; {finished[0].name}: {first}")

    def check_ending(self, started: float, max_runtime: Any) -> str | None:
        """Why no more trials start (the running ones are stopped then), or None to go on."""
        ending = None
        if max_runtime and time.time() - started > float(max_runtime):
            ending = f"MaxRuntimeInSeconds={max_runtime} reached"
        elif self.completion.met():
            ending = self.completion.met()
        if ending:
            self.say(f"No more training jobs: {ending}; stopping the running ones")
            for t in list(self.running):
                self.stop_trial(t, "completion")
            self.persist(completion_reason=ending)
        return ending

    def succeeded(self) -> int:
        return sum(1 for t in self.trials
                   if t.told and t.status in ("Completed", "Stopped") and t.curve_final is not None)

    def poll(self, search: Search | None, allow_decisions: bool = True) -> None:
        """Read new intermediate values of every running trial; stop losers; finish trials that ended."""
        for trial in list(self.running):
            for value in self.new_values(trial):
                trial.curve.append(value)
                if allow_decisions and search is not None and not trial.stop_reason and not trial.told:
                    self.stop_early_if_losing(search, trial, value)
            try:
                desc = self.backend.describe("training", trial.name)
            except JobNotFound:
                continue
            if desc["TrainingJobStatus"] in TERMINAL_STATES:
                self.finish_trial(search, trial, desc)

    def stop_early_if_losing(self, search: Search, trial: Trial, value: float) -> None:
        """After a new intermediate value: stop the trial early (Hyperband, or the median rule) or let it run."""
        units = len(trial.curve)
        if isinstance(search, OptunaSearch) and search.strategy == "Hyperband":
            if units > search.max_resource:
                self.say(f"{trial.name} reported more than MaxResource={search.max_resource} values: "
                         "stopping it")
                self.stop_trial(trial, "max-resource")
            elif units < search.max_resource and search.report(trial.handle, units, value):
                self.say(f"{trial.name} stopped early by Hyperband after {units} resource unit(s): "
                         f"{self.objective['MetricName']}={value:g}")
                self.stop_trial(trial, "early-stopped")
                search.tell(trial.handle, value, "pruned")
                trial.told = True
                trial.curve_final = value
        elif self.early is not None and self.early.should_stop(trial.curve):
            self.say(f"{trial.name} stopped early (median rule) after {units} epoch(s): "
                     f"{self.objective['MetricName']}={value:g}")
            self.stop_trial(trial, "early-stopped")

    def finish_trial(self, search: Search | None, trial: Trial, desc: dict[str, Any]) -> None:
        """A trial ended: its final objective told to the search, the completion criteria and the log."""
        for value in self.new_values(trial):  # lines that landed with the end
            trial.curve.append(value)
        trial.status = desc["TrainingJobStatus"]
        final = self.final_objective(trial, desc)
        if not trial.told:
            trial.curve_final = final if trial.status in ("Completed", "Stopped") else None
            if search is not None:
                state = "complete" if trial.curve_final is not None else "fail"
                if trial.status == "Stopped" and trial.stop_reason == "early-stopped":
                    state = "pruned"
                search.tell(trial.handle, trial.curve_final, state)
            trial.told = True
        if self.early is not None and trial.status == "Completed":
            self.early.finished(trial.curve)
        if trial.curve_final is not None:
            self.completion.add(trial.curve_final)
        self.running.remove(trial)
        shown = f"{self.objective['MetricName']}={trial.curve_final:g}" if trial.curve_final is not None else \
            "no objective value"
        best = self.completion.best
        self.say(f"{trial.name} {trial.status} after {len(trial.curve)} objective report(s): {shown}"
                 + (f" (best so far {best:g})" if best is not None else ""))
        self.persist(not_improving=self.completion.not_improving)


# ---- Describe / List ----------------------------------------------------------------------------------------------
def _summary(backend: LocalBackend, request: dict[str, Any], record: dict[str, Any]) -> dict[str, Any] | None:
    """HyperParameterTrainingJobSummary of one trial, from its live DescribeTrainingJob."""
    try:
        d = backend.describe("training", record["name"])
    except JobNotFound:
        return None
    objective = objective_of(request)
    s: dict[str, Any] = {
        "TrainingJobName": d["TrainingJobName"],
        "TrainingJobArn": d["TrainingJobArn"],
        "TuningJobName": request["HyperParameterTuningJobName"],
        "CreationTime": d["CreationTime"],
        "TrainingJobStatus": d["TrainingJobStatus"],
        "TunedHyperParameters": dict(record["tuned"]),
    }
    for key in ("TrainingStartTime", "TrainingEndTime", "FailureReason"):
        if d.get(key):
            s[key] = d[key]
    if d["TrainingJobStatus"] in TERMINAL_STATES:
        value = None
        if d["TrainingJobStatus"] != "Failed":
            for m in d.get("FinalMetricDataList") or []:
                if m["MetricName"] == objective["MetricName"]:
                    value = float(m["Value"])
        if value is not None:
            s["FinalHyperParameterTuningJobObjectiveMetric"] = {"Type": objective["Type"],
                                                                "MetricName": objective["MetricName"], "Value": value}
            s["ObjectiveStatus"] = "Succeeded"
        else:
            s["ObjectiveStatus"] = "Failed"
    else:
        s["ObjectiveStatus"] = "Pending"
    return s


def _summaries(backend: LocalBackend, request: dict[str, Any],
               state: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for record in state.get("trials") or []:
        s = _summary(backend, request, record)
        if s is not None:
            out.append((s, record))
    return out


def best_of(pairs: list[tuple[dict[str, Any], dict[str, Any]]], maximize: bool) -> dict[str, Any] | None:
    """The best training job: the best objective among trials that ran their course (Completed, or stopped
    at Hyperband's MaxResource); among early-stopped ones only when none did."""
    def tier(s: dict[str, Any], record: dict[str, Any]) -> int:
        return 0 if s["TrainingJobStatus"] == "Completed" or record.get("stop_reason") == "max-resource" else 1

    scored = [(tier(s, r), s) for s, r in pairs if s.get("ObjectiveStatus") == "Succeeded"]
    if not scored:
        return None
    top = min(t for t, _s in scored)
    candidates = [s for t, s in scored if t == top]
    pick = max if maximize else min
    return pick(candidates, key=lambda s: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])


def describe(backend: LocalBackend, request: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob's response for a local tuning job."""
    name = request["HyperParameterTuningJobName"]
    maximize = objective_of(request)["Type"] == "Maximize"
    pairs = _summaries(backend, request, state)
    counters = {"Completed": 0, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0, "Stopped": 0}
    objective_counters = {"Succeeded": 0, "Pending": 0, "Failed": 0}
    for s, _r in pairs:
        status = s["TrainingJobStatus"]
        key = {"Failed": "NonRetryableError", "Stopping": "InProgress"}.get(status, status)
        counters[key] = counters.get(key, 0) + 1
        objective_counters[s["ObjectiveStatus"]] += 1
    d: dict[str, Any] = {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobArn": backend.arn("tuning", name),
        "HyperParameterTuningJobConfig": request["HyperParameterTuningJobConfig"],
        "HyperParameterTuningJobStatus": state["status"],
        "CreationTime": dt(state.get("created")),
        "LastModifiedTime": dt(state.get("modified")) or last_modified(state),
        "TrainingJobStatusCounters": counters,
        "ObjectiveStatusCounters": objective_counters,
    }
    for key in ("TrainingJobDefinition", "TrainingJobDefinitions", "WarmStartConfig", "Autotune"):
        if request.get(key):
            d[key] = request[key]
    if state.get("ended"):
        d["HyperParameterTuningEndTime"] = dt(state["ended"])
    best = best_of(pairs, maximize)
    if best is not None:
        d["BestTrainingJob"] = best
    if request.get("WarmStartConfig"):
        overall: list[tuple[dict[str, Any], dict[str, Any]]] = [(best, {})] if best else []
        for parent in request["WarmStartConfig"]["ParentHyperParameterTuningJobs"]:
            try:
                pstate = backend._live_state("tuning", parent["HyperParameterTuningJobName"])
                preq = backend.store.request("tuning", parent["HyperParameterTuningJobName"])
            except JobNotFound:
                continue
            pbest = best_of(_summaries(backend, preq, pstate), maximize)
            if pbest is not None:
                overall.append((pbest, {}))
        top = best_of(overall, maximize)
        if top is not None:
            d["OverallBestTrainingJob"] = top
    if state.get("failure_reason"):
        d["FailureReason"] = state["failure_reason"]
    details: dict[str, Any] = {"NumberOfTrainingJobsObjectiveNotImproving": int(state.get("not_improving", 0))}
    if state.get("convergence_time"):
        details["ConvergenceDetectedTime"] = dt(state["convergence_time"])
    d["TuningJobCompletionDetails"] = details
    if state.get("started"):
        d["ConsumedResources"] = {"RuntimeInSeconds": int((state.get("ended") or time.time()) - state["started"])}
    return d


SORT_KEYS = ("Name", "CreationTime", "Status", "FinalObjectiveMetricValue")


def list_training_jobs_for_tuning_job(backend: LocalBackend, name: str, *, status_equals: str | None = None,
                                      sort_by: str | None = None,
                                      sort_order: str | None = None) -> list[dict[str, Any]]:
    """ListTrainingJobsForHyperParameterTuningJob for a local tuning job: every trial's
    HyperParameterTrainingJobSummary (all pages), optionally only those in ``status_equals``, sorted by
    ``sort_by`` (Name, the default, CreationTime, Status or FinalObjectiveMetricValue; trials without an
    objective value last) in ``sort_order`` (Ascending, the default, or Descending)."""
    sort_by = sort_by or "Name"
    sort_order = sort_order or "Ascending"
    if sort_by not in SORT_KEYS:
        raise SpecError("SortBy", f"{sort_by!r} is not one of {', '.join(SORT_KEYS)}.", f"use one of {SORT_KEYS}.")
    if sort_order not in ("Ascending", "Descending"):
        raise SpecError("SortOrder", f"{sort_order!r} is not Ascending or Descending.", "use Ascending or Descending.")
    request = backend.store.request("tuning", name)
    state = backend._live_state("tuning", name)
    summaries = [s for s, _r in _summaries(backend, request, state)
                 if status_equals is None or s["TrainingJobStatus"] == status_equals]
    reverse = sort_order == "Descending"
    if sort_by == "FinalObjectiveMetricValue":
        scored = [s for s in summaries if "FinalHyperParameterTuningJobObjectiveMetric" in s]
        rest = [s for s in summaries if "FinalHyperParameterTuningJobObjectiveMetric" not in s]
        scored.sort(key=lambda s: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"], reverse=reverse)
        return scored + sorted(rest, key=lambda s: s["TrainingJobName"])
    key = {"Name": lambda s: s["TrainingJobName"], "CreationTime": lambda s: s["CreationTime"],
           "Status": lambda s: s["TrainingJobStatus"]}[sort_by]
    return sorted(summaries, key=key, reverse=reverse)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return TuningSupervisor(Path(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main())
