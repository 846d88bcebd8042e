"""SmdistTuningOperator: SageMaker automatic model tuning (Random, Bayesian, Hyperband, Grid) in a DAG.

Named ``Smdist...`` because the Amazon provider already has a ``SageMakerTuningOperator`` (which takes a raw
config); this one takes the arguments of :class:`~airflow_smdist.operators.training.
SageMakerDistributedTrainingOperator` (through their common base, :class:`~airflow_smdist.operators.training.
TrainingSpecOperator`) plus the search (:class:`airflow_smdist.specs.tuning.TuningSearch`), and runs on either
backend.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import TYPE_CHECKING, Any, Sequence

from airflow_smdist.operators._arguments import take_arguments, with_arguments
from airflow_smdist.operators.base import NAME_LIMIT, isoformat, stable_job_name
from airflow_smdist.operators.links import BASE_AWS_CONSOLE_LINK, LocalJobPageLink, SmdistConsoleLink
from airflow_smdist.operators.training import (
    OPERATOR_DEFAULTS,
    TRAINING_ARGS,
    TRAINING_OPERATOR_ARGS,
    TrainingSpecOperator,
)
from airflow_smdist.specs.arguments import TUNING

if TYPE_CHECKING:  # imported where a job is built, not where a DAG file is parsed
    from airflow_smdist.backends.base import Backend
    from airflow_smdist.specs.tuning import TuningPlan

log = logging.getLogger(__name__)

TUNING_NAME_LIMIT = 32  # HyperParameterTuningJobName: its trials are named <name>-NNN-<8 hex>
#: the search's arguments (:class:`airflow_smdist.specs.tuning.TuningSearch`), which the operator takes and
#: templates besides the training ones, and passes to build_tuning
TUNING_ARGS: tuple[str, ...] = tuple(a.name for a in TUNING)
assert NAME_LIMIT >= TUNING_NAME_LIMIT


class SageMakerTuningJobLink(SmdistConsoleLink):
    name = "SageMaker tuning job"
    key = "smdist_tuning_job"
    format_str = BASE_AWS_CONSOLE_LINK + "/sagemaker/home?region={region_name}#/hyper-tuning-jobs/{job_name}"


class SmdistTuningOperator(TrainingSpecOperator):
    """Tune a training job's hyperparameters with SageMaker automatic model tuning.

    Training arguments are the training operator's (``entry_point``, ``source_dir``, ``image_uri`` or
    ``framework``, ``instance_type``, ``hyperparameters`` (static), ``inputs``, ``metric_definitions``,
    ``max_run`` per trial, ...). The search (see :func:`airflow_smdist.specs.tuning.build_tuning`):
    ``objective_metric_name`` (one of ``metric_definitions``) and ``objective_type`` (Maximize|Minimize);
    ``hyperparameter_ranges`` ({"learning_rate": {"type": "continuous", "min": 1e-3, "max": 0.3,
    "scaling": "Logarithmic"}, "max_depth": {"type": "integer", "min": 2, "max": 8}, "loss": ["a", "b"]});
    ``strategy`` Bayesian | Random | Hyperband (``hyperband_min_resource`` / ``hyperband_max_resource``) |
    Grid; ``max_jobs``, ``max_parallel_jobs``, ``max_runtime`` (of the whole tuning job);
    ``early_stopping_type`` Off | Auto; ``warm_start_parents`` + ``warm_start_type``; completion criteria
    ``target_objective_value``, ``max_jobs_not_improving``, ``complete_on_convergence``; ``random_seed``.

    On the ``local`` backend the search runs here for real, every trial a local training job. Returns
    (XCom): ``best_training_job``, ``best_hyperparameters``, ``best_objective_value``, ``model_artifacts``
    (the best trial's model.tar.gz, for a downstream transform or deploy task), ``training_image`` /
    ``entry_point`` / ``source_uri`` of that trial, the counters, and ``plot_uri`` / ``results_uri``: a
    PNG of the objective per trial with the best-so-far line, and every trial as JSON, written next to
    the trials' output (``results_path``, default ``<output_path>/<tuning job>/tuning-results``;
    ``plot=False`` writes neither).
    """

    kind = "tuning"
    name_prefix = "hpo"
    template_fields: Sequence[str] = ("job_name", "backend", "deferrable", *TRAINING_ARGS, *TUNING_ARGS, "results_path")
    template_fields_renderers = {**TrainingSpecOperator.template_fields_renderers, "hyperparameter_ranges": "json"}
    operator_extra_links = (SageMakerTuningJobLink(), LocalJobPageLink())
    name_limit = TUNING_NAME_LIMIT
    ui_color = "#f9cb9c"

    @with_arguments((*TUNING, *TRAINING_OPERATOR_ARGS), OPERATOR_DEFAULTS)
    def __init__(self, *, plot: bool = True, results_path: str | None = None, **kwargs: Any) -> None:
        search = take_arguments(kwargs, TUNING)
        super().__init__(**kwargs)
        for name, value in search.items():  # the search (TUNING_ARGS), one attribute each
            setattr(self, name, value)
        self.plot = plot
        self.results_path = results_path

    def base_job_name(self, context: Any) -> str:
        if self.job_name:
            return str(self.job_name)
        ti = context["ti"]
        return stable_job_name(self.name_prefix, ti.dag_id, ti.task_id, context["run_id"], getattr(ti, "map_index", -1),
                               limit=TUNING_NAME_LIMIT)

    def search_arguments(self) -> dict[str, Any]:
        """The search's arguments (:data:`TUNING_ARGS`) as this task renders them."""
        return {name: getattr(self, name) for name in TUNING_ARGS}

    def build_plan(self, job_name: str, local_uris: bool) -> TuningPlan:
        from airflow_smdist.specs.tuning import build_tuning

        return build_tuning(job_name=job_name, region=self.hook.region_name, allow_local_uris=local_uris,
                            **self.training_arguments(), **self.search_arguments())

    def draws_after_job(self) -> bool:
        return bool(self.plot)  # the objective per trial (write_results); a tuning job has no insight.png

    def result(self, description: dict[str, Any]) -> dict[str, Any]:
        backend = self.get_backend()
        out = tuning_result(description, backend)
        if self.plot and description["HyperParameterTuningJobStatus"] in ("Completed", "Stopped", "Failed"):
            try:
                out.update(write_results(backend, description, self.results_path))
                self.log.info("Objective per trial (PNG): %s; trials: %s", out["plot_uri"], out["results_uri"])
            except Exception as e:  # noqa: BLE001 - the plot is a by-product; the result stands without it
                self.log.warning("Could not write the tuning results and plot: %s", e)
        if out.get("best_training_job"):
            self.log.info("Best training job %s: %s=%s with %s", out["best_training_job"], out["objective_metric"],
                          out["best_objective_value"], out["best_hyperparameters"])
        return out


# ---- trials of a tuning job, on either backend ------------------------------------------------------------------
def list_training_jobs_for_tuning_job(backend: Backend, name: str, *, status_equals: str | None = None,
                                      sort_by: str | None = None,
                                      sort_order: str | None = None) -> list[dict[str, Any]]:
    """Every HyperParameterTrainingJobSummary of tuning job ``name`` (ListTrainingJobsForHyperParameterTuningJob,
    all pages), on either backend: both implement the call. Throttling backs off as the lifecycle's calls do."""
    from airflow_smdist.lifecycle import call_with_backoff

    return call_with_backoff(lambda: backend.list_training_jobs_for_tuning_job(
        name, status_equals=status_equals, sort_by=sort_by, sort_order=sort_order), what="list")


def _decoded(tuned: dict[str, str] | None) -> dict[str, Any]:
    out = {}
    for k, v in (tuned or {}).items():
        try:
            out[k] = json.loads(v)
        except (TypeError, ValueError):
            out[k] = v
    return out


def tuning_result(description: dict[str, Any], backend: Backend) -> dict[str, Any]:
    """The small, JSON-safe XCom result of a tuning job: the best trial, its values and model artifact."""
    cfg = description["HyperParameterTuningJobConfig"]
    objective = cfg.get("HyperParameterTuningJobObjective") or {}
    best = description.get("BestTrainingJob") or {}
    out: dict[str, Any] = {
        "job_name": description["HyperParameterTuningJobName"],
        "job_arn": description.get("HyperParameterTuningJobArn"),
        "status": description["HyperParameterTuningJobStatus"],
        "backend": backend.name,
        "strategy": cfg.get("Strategy"),
        "objective_metric": objective.get("MetricName"),
        "objective_type": objective.get("Type"),
        "best_training_job": best.get("TrainingJobName"),
        "best_hyperparameters": _decoded(best.get("TunedHyperParameters")),
        "best_objective_value": (best.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value"),
        "model_artifacts": None,
        "training_job_status_counters": dict(description.get("TrainingJobStatusCounters") or {}),
        "objective_status_counters": dict(description.get("ObjectiveStatusCounters") or {}),
        "end_time": isoformat(description.get("HyperParameterTuningEndTime")),
    }
    out["trials"] = sum(out["training_job_status_counters"].values())
    if description.get("OverallBestTrainingJob"):
        overall = description["OverallBestTrainingJob"]
        out["overall_best_training_job"] = overall.get("TrainingJobName")
        out["overall_best_objective_value"] = (
            overall.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value")
    if description.get("FailureReason"):
        out["failure_reason"] = description["FailureReason"]
    if best.get("TrainingJobName"):
        from airflow_smdist.wire import decode_hyperparameters
        from airflow_smdist.lifecycle import call_with_backoff

        # with the lifecycle's throttling backoff: the operator's result and the sensor's come through here
        trained = call_with_backoff(lambda: backend.describe("training", best["TrainingJobName"]), what="describe")
        hps = decode_hyperparameters(trained.get("HyperParameters") or {})
        out["model_artifacts"] = (trained.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
        out["training_image"] = (trained.get("AlgorithmSpecification") or {}).get("TrainingImage")
        out["entry_point"] = hps.get("sagemaker_program")
        out["source_uri"] = hps.get("sagemaker_submit_directory")
    return out


# ---- results and plot ------------------------------------------------------------------------------------------
def trial_rows(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trials in launch order as JSON-safe rows (number, name, status, objective, hyperparameters)."""
    ordered = sorted(summaries, key=lambda s: (isoformat(s.get("CreationTime")) or "", s["TrainingJobName"]))
    rows = []
    for i, s in enumerate(ordered, start=1):
        metric = s.get("FinalHyperParameterTuningJobObjectiveMetric") or {}
        rows.append({"number": i, "training_job": s["TrainingJobName"], "status": s["TrainingJobStatus"],
                     "objective": metric.get("Value"), "objective_status": s.get("ObjectiveStatus"),
                     "hyperparameters": _decoded(s.get("TunedHyperParameters")),
                     "start_time": isoformat(s.get("TrainingStartTime")),
                     "end_time": isoformat(s.get("TrainingEndTime")),
                     "failure_reason": s.get("FailureReason")})
    return rows


def best_so_far(values: list[float | None], maximize: bool) -> list[float | None]:
    out: list[float | None] = []
    best = None
    for v in values:
        if v is not None and (best is None or (v > best if maximize else v < best)):
            best = v
        out.append(best)
    return out


#: hyperparameters drawn against the objective (one panel each, under the trials' panel)
MAX_HYPERPARAMETER_PANELS = 4


def _tuned_names(rows: list[dict[str, Any]]) -> list[str]:
    """The hyperparameters whose value differs between trials, in the order the first trial lists them."""
    names: list[str] = []
    for r in rows:
        names += [n for n in (r.get("hyperparameters") or {}) if n not in names]
    return [n for n in names if len({str((r.get("hyperparameters") or {}).get(n)) for r in rows}) > 1]


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _hyperparameter_panel(ax: Any, rows: list[dict[str, Any]], name: str, metric: str) -> None:
    """The objective against one hyperparameter's values: numbers on a numeric axis (logarithmic where they
    span two decades or more, as learning rates do), categories at a tick each."""
    scored = [r for r in rows if r["objective"] is not None and name in (r.get("hyperparameters") or {})]
    values = [r["hyperparameters"][name] for r in scored]
    numbers = [_number(v) for v in values]
    if all(n is not None for n in numbers):
        xs: list[Any] = numbers
        positive = [n for n in numbers if n is not None and n > 0]
        if len(positive) == len(numbers) and positive and max(positive) / min(positive) >= 100:
            ax.set_xscale("log")
    else:
        categories = sorted({str(v) for v in values})
        xs = [categories.index(str(v)) for v in values]
        ax.set_xticks(range(len(categories)), categories)
    colors = {"Completed": "tab:blue", "Stopped": "tab:orange", "Failed": "tab:red"}
    ax.scatter(xs, [r["objective"] for r in scored], color=[colors.get(r["status"], "grey") for r in scored],
               zorder=3)
    ax.set_xlabel(name)
    ax.set_ylabel(metric)
    ax.grid(True, alpha=0.3)


def draw_objective(rows: list[dict[str, Any]], *, metric: str, maximize: bool, title: str) -> Any:
    """The tuning Figure: the objective of every trial (by status) and the best-so-far line; under it, the
    objective against each tuned hyperparameter (which values did well). matplotlib's Agg canvas, imported
    here only (no pyplot, so no global backend is switched)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tuned = _tuned_names(rows)[:MAX_HYPERPARAMETER_PANELS]
    fig = Figure(figsize=(8, 4.5 + (3.2 if tuned else 0)), dpi=110)
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2 if tuned else 1, max(len(tuned), 1), height_ratios=[4.5, 3.2] if tuned else None)
    ax = fig.add_subplot(grid[0, :])
    styles = {"Completed": ("o", "tab:blue", "completed"), "Stopped": ("v", "tab:orange", "stopped (early)"),
              "Failed": ("x", "tab:red", "failed")}
    for status, (marker, color, label) in styles.items():
        pts = [(r["number"], r["objective"]) for r in rows if r["status"] == status and r["objective"] is not None]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, color=color, label=label, zorder=3)
    failed = [r["number"] for r in rows if r["objective"] is None]
    numbers = [r["number"] for r in rows]
    line = best_so_far([r["objective"] for r in rows], maximize)
    pts = [(n, b) for n, b in zip(numbers, line) if b is not None]
    if pts:
        ax.step(*zip(*pts), where="post", color="tab:green", label="best so far", zorder=2)
    scored = [r for r in rows if r["objective"] is not None]
    if scored:
        top = (max if maximize else min)(scored, key=lambda r: r["objective"])
        ax.scatter([top["number"]], [top["objective"]], marker="*", s=220, color="gold", edgecolors="black",
                   label=f"best: trial {top['number']} ({top['objective']:.4g})", zorder=4)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial (launch order)")
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if failed:
        ax.text(0.01, 0.01, f"{len(failed)} trial(s) without an objective value", transform=ax.transAxes, fontsize=8)
    ax.legend(loc="best", fontsize=8)
    for i, name in enumerate(tuned):
        _hyperparameter_panel(fig.add_subplot(grid[1, i]), rows, name, metric)
    fig.tight_layout()
    return fig


def plot_objective(rows: list[dict[str, Any]], *, metric: str, maximize: bool, title: str, path: str) -> None:
    """The tuning PNG (:func:`draw_objective`)."""
    draw_objective(rows, metric=metric, maximize=maximize, title=title).savefig(path, format="png")


def write_results(backend: Backend, description: dict[str, Any], results_path: str | None = None) -> dict[str, str]:
    """Write ``trials.json`` and ``objective.png`` under ``results_path`` (default
    ``<S3OutputPath>/<tuning job>/tuning-results``); returns their URIs."""
    from airflow_smdist.storage import Storage, join_uri

    name = description["HyperParameterTuningJobName"]
    cfg = description["HyperParameterTuningJobConfig"]
    objective = cfg.get("HyperParameterTuningJobObjective") or {}
    if not results_path:
        definition = description.get("TrainingJobDefinition") or (description.get("TrainingJobDefinitions") or [{}])[0]
        results_path = join_uri(definition["OutputDataConfig"]["S3OutputPath"], name, "tuning-results")
    rows = trial_rows(list_training_jobs_for_tuning_job(backend, name))
    storage = Storage.for_backend(backend)  # on SageMaker: the connection's S3 client, not a default one
    results_uri, plot_uri = join_uri(results_path, "trials.json"), join_uri(results_path, "objective.png")
    document = {"tuning_job": name, "strategy": cfg.get("Strategy"), "objective": objective,
                "status": description["HyperParameterTuningJobStatus"],
                "best_training_job": (description.get("BestTrainingJob") or {}).get("TrainingJobName"),
                "trials": rows}
    storage.write_bytes(json.dumps(document, indent=1).encode(), results_uri)
    with tempfile.TemporaryDirectory(prefix="smdist-plot-") as tmp:
        png = os.path.join(tmp, "objective.png")
        plot_objective(rows, metric=objective.get("MetricName", "objective"),
                       maximize=objective.get("Type") == "Maximize",
                       title=f"{name}: {cfg.get('Strategy')} search, {len(rows)} trials", path=png)
        storage.upload(png, plot_uri)
    return {"results_uri": results_uri, "plot_uri": plot_uri}
