"""Does scaling pay? The same training job over a grid of instance types and counts, compared.

Distributed training does not always scale linearly (communication, input pipelines, smaller per-host
shards), so the advice is to *experiment with combinations of instance types and counts*. :func:`scaling_study`
makes that one DAG-level building block: a TaskGroup with one real training job per configuration (each
short: bounded by ``max_run`` or by the script's own epochs), the learning rate rescaled per configuration by
the linear scaling rule (``lr_scaling``, as every training operator does), and a report task that compares

* **speed-up** over the baseline (the configuration with the fewest hosts): throughput ratio when the
  script reports one (``throughput_metric``, e.g. samples/s), else the ratio of training wall times;
* **scaling efficiency** = speed-up / (hosts / baseline hosts) (1.0: linear; 0.5: half of each added host
  is wasted);
* **time to a target metric** (``target_metric`` reaching ``target_value``), from each job's metric time
  series (:mod:`airflow_smdist.insight`);
* **cost per run** from the instance prices the DAG author supplies (``prices={"ml.p4d.24xlarge": 32.77}``
  in $/hour; nothing is looked up over the network).

The report logs a table, draws speed-up and efficiency against hosts (one line per instance type) as a PNG
next to the jobs' output, and returns the rows and the recommended configuration in XCom: the fastest (to
target, else overall) whose efficiency is at least ``min_efficiency``, ties broken by cost.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any, Sequence

from airflow_smdist._compat import BaseOperator

#: result keys of a training task that the report reads
_TIME_KEYS = ("start_time", "end_time", "training_time_seconds", "billable_time_seconds")


def config_task_id(config: dict[str, Any]) -> str:
    kind = re.sub(r"[^a-zA-Z0-9]+", "_", str(config.get("instance_type", "default"))).strip("_")
    return f"{kind}_x{config.get('instance_count', 1)}"


def scaling_study(group_id: str, *, configurations: Sequence[dict[str, Any]], throughput_metric: str | None = None,
                  target_metric: str | None = None, target_value: float | None = None,
                  prices: dict[str, float] | None = None, min_efficiency: float = 0.7,
                  report_uri: str | None = None, **common: Any) -> Any:
    """A TaskGroup ``group_id``: one :class:`SageMakerDistributedTrainingOperator` per configuration
    (``{"instance_type": ..., "instance_count": ...}``; other keys override ``common`` for that job), then
    ``report`` (:class:`ScalingReportOperator`), which runs even if some configurations failed."""
    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
    from airflow_smdist.specs.errors import SpecError

    try:
        from airflow.sdk import TaskGroup
    except ImportError:  # Airflow 2
        from airflow.utils.task_group import TaskGroup  # type: ignore[no-redef]
    if not configurations:
        raise SpecError("configurations", "is empty.",
                        "give at least two, e.g. [{'instance_count': 1}, {'instance_count': 2}].")
    ids = [config_task_id({"instance_type": common.get("instance_type", "ml.m5.xlarge"), **c}) for c in configurations]
    if len(set(ids)) != len(ids):
        raise SpecError("configurations", f"repeat a configuration ({ids}).", "give each instance type and count once.")
    with TaskGroup(group_id=group_id) as group:
        jobs = [SageMakerDistributedTrainingOperator(task_id=task_id, **{**common, **config})
                for task_id, config in zip(ids, configurations)]
        report = ScalingReportOperator(
            task_id="report", job_task_ids=[j.task_id for j in jobs], throughput_metric=throughput_metric,
            target_metric=target_metric, target_value=target_value, prices=prices, min_efficiency=min_efficiency,
            report_uri=report_uri or _default_report_uri(common.get("output_path"), group_id),
            backend=common.get("backend"), smdist_conn_id=common.get("smdist_conn_id", "smdist_default"),
            trigger_rule="all_done")
        jobs >> report
    return group


def _default_report_uri(output_path: Any, group_id: str) -> str | None:
    if not output_path:
        return None
    return f"{str(output_path).rstrip('/')}/{group_id}/{{{{ run_id | replace(':', '-') | replace('+', '-') }}}}"


# -- the comparison (pure) -------------------------------------------------------------------------------
def _seconds(result: dict[str, Any]) -> float | None:
    start, end = result.get("start_time"), result.get("end_time")
    if start and end:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    value = result.get("training_time_seconds")
    return float(value) if value is not None else None


def time_to_target(summary: dict[str, Any] | None, metric: str | None, target: float | None) -> float | None:
    """Seconds from the job's start until ``metric`` first reached ``target`` (insight series), or None."""
    if not (summary and metric and target is not None):
        return None
    m = summary.get("metrics", {}).get(metric)
    if not m:
        return None
    points = sorted(p for series in m["series"].values() for p in series)
    for t, v in points:
        if (v <= target) if m.get("lower_is_better", True) else (v >= target):
            return float(t)
    return None


def _row(task_id: str, result: dict[str, Any] | None, summary: dict[str, Any] | None,
         study: dict[str, Any]) -> dict[str, Any]:
    if not result or result.get("status") != "Completed":
        return {"task_id": task_id, "status": (result or {}).get("status", "Failed")}
    seconds = _seconds(result)
    row: dict[str, Any] = {"task_id": task_id, "status": "Completed", "job_name": result.get("job_name"),
                           "instance_type": result.get("instance_type"),
                           "instance_count": int(result.get("instance_count") or 1), "seconds": seconds}
    metric = study.get("throughput_metric")
    if metric:
        row["throughput"] = (result.get("final_metrics") or {}).get(metric)
    row["time_to_target"] = time_to_target(summary, study.get("target_metric"), study.get("target_value"))
    price = (study.get("prices") or {}).get(row["instance_type"])
    # BillableTimeInSeconds is one instance's: SageMaker bills it times InstanceCount (API reference)
    billable = float(result.get("billable_time_seconds") or seconds or 0) * row["instance_count"]
    row["cost"] = round(price * billable / 3600, 4) if price is not None else None
    return row


def _speedup(row: dict[str, Any], base: dict[str, Any]) -> float | None:
    if row.get("throughput") and base.get("throughput"):
        return float(row["throughput"]) / float(base["throughput"])
    if row.get("seconds") and base.get("seconds"):
        return float(base["seconds"]) / float(row["seconds"])
    return None


def _recommend(rows: list[dict[str, Any]], min_efficiency: float) -> dict[str, Any] | None:
    """Among completed configurations at or above the efficiency floor (the baseline always is): those that
    reached the target first, by time to target; else the highest speed-up. Ties: the cheaper."""
    done = [r for r in rows if r["status"] == "Completed" and r.get("speedup") is not None]
    ok = [r for r in done if r["efficiency"] >= min_efficiency] or done[:1]
    reached = [r for r in ok if r.get("time_to_target") is not None]

    def cost(r: dict[str, Any]) -> float:
        return r["cost"] if r.get("cost") is not None else 0.0

    if reached:
        return min(reached, key=lambda r: (r["time_to_target"], cost(r)))
    return min(ok, key=lambda r: (-r["speedup"], cost(r))) if ok else None


def compare(rows: list[dict[str, Any]], min_efficiency: float = 0.7) -> dict[str, Any]:
    """Speed-up and efficiency of each completed row over the baseline (fewest hosts, first given)."""
    done = [r for r in rows if r["status"] == "Completed"]
    if not done:
        return {"configurations": rows, "baseline": None, "recommended": None,
                "verdict": "No configuration completed: nothing to compare."}
    base = min(done, key=lambda r: r["instance_count"])
    for r in done:
        r["speedup"] = _speedup(r, base)
        hosts = r["instance_count"] / base["instance_count"]
        r["efficiency"] = round(r["speedup"] / hosts, 4) if r["speedup"] is not None else None
        if r["speedup"] is not None:
            r["speedup"] = round(r["speedup"], 4)
    best = _recommend(rows, min_efficiency)
    return {"configurations": rows, "baseline": base["task_id"], "recommended": best,
            "verdict": verdict(rows, base, best, min_efficiency)}


def verdict(rows: list[dict[str, Any]], base: dict[str, Any], best: dict[str, Any] | None,
            min_efficiency: float) -> str:
    if best is None:
        return "No configuration could be timed."
    missed = [r["task_id"] for r in rows if r["status"] == "Completed" and "time_to_target" in r
              and r["time_to_target"] is None and best.get("time_to_target") is not None]
    tail = f" ({', '.join(missed)} never reached the target: a larger global batch may need more epochs " \
           f"or a longer warm-up)" if missed else ""
    if best is base:
        worst = min((r for r in rows if r.get("efficiency") is not None and r is not base),
                    key=lambda r: r["efficiency"], default=None)
        fell = (f" (efficiency fell to {worst['efficiency']:.2f} at {worst['instance_count']} hosts)"
                if worst else "")
        return (f"Scaling out did not pay{fell}: keep {base['task_id']}, or scale up (a larger instance) "
                f"before scaling out.{tail}")
    how = (f"reached the target in {best['time_to_target']:.0f} s, " if best.get("time_to_target") is not None
           else "")
    return (f"Recommended: {best['task_id']} ({how}{best['speedup']:.2f}x the baseline at efficiency "
            f"{best['efficiency']:.2f}; the efficiency floor is {min_efficiency:.2f}).{tail}")


def table(study: dict[str, Any]) -> str:
    head = f"{'configuration':<28}{'status':<11}{'seconds':>9}{'speed-up':>10}{'efficiency':>12}" \
           f"{'to target':>11}{'cost $':>9}"
    lines = [head, "-" * len(head)]

    def fmt(value: Any, spec: str) -> str:
        return format(value, spec) if isinstance(value, (int, float)) else "-"

    for r in study["configurations"]:
        lines.append(f"{r['task_id']:<28}{r['status']:<11}{fmt(r.get('seconds'), '9.1f'):>9}"
                     f"{fmt(r.get('speedup'), '10.2f'):>10}{fmt(r.get('efficiency'), '12.2f'):>12}"
                     f"{fmt(r.get('time_to_target'), '11.1f'):>11}{fmt(r.get('cost'), '9.4f'):>9}")
    return "\n".join(lines)


def draw_study(study: dict[str, Any]) -> Any:
    """Speed-up and efficiency against hosts, one line per instance type, with the linear ideal; a tick at
    each host count measured (whole hosts only), and the study's verdict as the title."""
    import textwrap

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.6), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in study["configurations"]:
        if r.get("speedup") is not None:
            by_type.setdefault(str(r["instance_type"]), []).append(r)
    base_hosts = min((r["instance_count"] for rows in by_type.values() for r in rows), default=1)
    for itype, rows in sorted(by_type.items()):
        rows.sort(key=lambda r: r["instance_count"])
        hosts = [r["instance_count"] for r in rows]
        ax1.plot(hosts, [r["speedup"] for r in rows], marker="o", label=itype)
        ax2.plot(hosts, [r["efficiency"] for r in rows], marker="o", label=itype)
    all_hosts = sorted({r["instance_count"] for rows in by_type.values() for r in rows}) or [1]
    ax1.plot(all_hosts, [h / base_hosts for h in all_hosts], linestyle="--", color="grey", label="linear")
    ax2.axhline(1.0, linestyle="--", color="grey")
    ax1.set(title="speed-up over the baseline", xlabel="hosts", ylabel="speed-up")
    ax2.set(title="scaling efficiency (speed-up / hosts)", xlabel="hosts", ylabel="efficiency")
    for ax in (ax1, ax2):
        ax.set_xticks(all_hosts)  # hosts come whole: no 1.5 or 2.5
        ax.legend(fontsize="small")
    fig.suptitle("\n".join(textwrap.wrap(study.get("verdict") or "", 110)), fontsize="medium")
    return fig


def plot_study(study: dict[str, Any], path: str) -> str:
    """The study's PNG (:func:`draw_study`)."""
    draw_study(study).savefig(path, dpi=80)
    return path


class ScalingReportOperator(BaseOperator):
    """Compare the training tasks ``job_task_ids`` of a :func:`scaling_study` (their XCom results)."""

    template_fields: Sequence[str] = ("report_uri", "target_value", "prices", "min_efficiency")

    def __init__(self, *, job_task_ids: Sequence[str], throughput_metric: str | None = None,
                 target_metric: str | None = None, target_value: float | None = None,
                 prices: dict[str, float] | None = None, min_efficiency: float = 0.7, report_uri: str | None = None,
                 backend: str | None = None, smdist_conn_id: str | None = "smdist_default",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.smdist_conn_id = smdist_conn_id
        self.job_task_ids = list(job_task_ids)
        self.throughput_metric = throughput_metric
        self.target_metric = target_metric
        self.target_value = target_value
        self.prices = prices
        self.min_efficiency = min_efficiency
        self.report_uri = report_uri
        self.backend = backend

    def storage(self) -> Any:
        """Storage of the jobs' backend (its S3 endpoint and credentials, or file:// locally)."""
        from airflow_smdist.hooks.smdist import SmdistHook
        from airflow_smdist.storage import Storage

        return Storage.for_backend(SmdistHook(self.smdist_conn_id).get_backend(self.backend))

    def _summary(self, result: dict[str, Any] | None) -> dict[str, Any] | None:
        uri = ((result or {}).get("insight") or {}).get("summary_uri")
        if not (uri and self.target_metric):
            return None
        try:
            summary: dict[str, Any] = json.loads(self.storage().read_bytes(uri))
            return summary
        except Exception as exc:  # noqa: BLE001 - a missing summary only costs the time-to-target column
            self.log.warning("could not read %s: %s", uri, exc)
            return None

    def execute(self, context: Any) -> dict[str, Any]:
        ti = context["ti"]
        study_args = {"throughput_metric": self.throughput_metric, "target_metric": self.target_metric,
                      "target_value": None if self.target_value is None else float(self.target_value),
                      "prices": self.prices}
        rows = []
        for task_id in self.job_task_ids:
            result = ti.xcom_pull(task_ids=task_id)
            rows.append(_row(task_id.rsplit(".", 1)[-1], result, self._summary(result), study_args))
        study = compare(rows, float(self.min_efficiency))
        self.log.info("Scaling study:\n%s", table(study))
        self.log.info("%s", study["verdict"])
        study["plot_uri"] = self._store(study)
        return study

    def _store(self, study: dict[str, Any]) -> str | None:
        if not self.report_uri:
            return None
        import os
        import tempfile

        storage = self.storage()
        base = str(self.report_uri).rstrip("/")
        storage.write_bytes(json.dumps(study, indent=1, default=str).encode(), f"{base}/scaling.json")
        with tempfile.TemporaryDirectory(prefix="smdist-scaling-") as tmp:
            storage.upload(plot_study(study, os.path.join(tmp, "scaling.png")), f"{base}/scaling.png")
        self.log.info("Scaling plot: %s/scaling.png", base)
        return f"{base}/scaling.png"
