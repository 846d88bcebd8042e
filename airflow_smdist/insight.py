"""Per-job insight: is this distributed job converging, and is every host pulling its weight?

After a training job ends, :func:`job_insight` gathers two kinds of time series, on either backend:

* the job's **metrics** (the ``MetricDefinitions`` values with their timestamps): locally the values the
  supervisor parsed from every host's log (``metrics.jsonl``); on SageMaker the job's metrics in CloudWatch
  (namespace ``/aws/sagemaker/TrainingJobs``, dimension ``TrainingJobName``, as the SageMaker SDK's
  ``TrainingJobAnalytics`` reads them);
* per-host **utilization**: locally CPU, memory and bytes read and written by each simulated host's
  processes, sampled with psutil (:mod:`airflow_smdist.backends.local.job.sampler`); on SageMaker the
  instance metrics ``CPUUtilization``, ``MemoryUtilization``, ``DiskUtilization`` and ``GPUUtilization``
  (dimension ``Host`` = ``<job>/algo-N``).

:func:`summarize` turns them into a small JSON summary with *findings* in plain words (uneven shards, idle
hosts, a diverging loss), :func:`plot` draws them (metric curves per host; CPU and cumulative reads per
host over time), and both are written next to the job's output
(``<S3OutputPath>/<job>/output/insight.json`` and ``insight.png``). The operator logs the reading and puts
the key numbers and the URIs in its XCom result. Pure functions except :func:`collect` and
:func:`job_insight`; matplotlib and boto3 are imported only when used. A task is a fresh process that pays
matplotlib's import every time: the operator starts it in the background while it waits for the job
(:func:`preload_plotting`), so that after the job only the drawing is left.
"""

from __future__ import annotations

import io
import json
import math
import sys
import threading
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from typing import Callable

#: CPU below this (percent of one core, summed over the host's processes) counts as idle
IDLE_CPU_PERCENT = 10.0
#: hosts whose read bytes differ more than this (1 - min/max) are uneven
UNEVEN_READ_FRACTION = 0.2
#: differences in reads are about the data only where each host's channel data is at least this share of the
#: least host's reads (the rest is imports and the like)
CHANNEL_SHARE_OF_READS = 0.5
#: hosts idle more than this fraction of their samples are reported
IDLE_FRACTION_REPORTED = 0.3
#: jobs shorter than this are not told their hosts were idle (their own start-up is most of them)
IDLE_MIN_SECONDS = 60.0
#: multi-host runs at least this long without a CheckpointConfig are told what a lost host would have cost
NO_CHECKPOINT_MIN_SECONDS = 600.0
#: a lower-is-better metric that ends above this multiple of its best value, and above its first, diverged
DIVERGENCE_FACTOR = 2.0
#: points per series kept in the summary (enough for the study's time-to-target and a plot)
MAX_SERIES_POINTS = 200
LOWER_IS_BETTER_WORDS = ("loss", "error", "rmse", "mse", "mae", "perplexity", "logloss")
CLOUDWATCH_NAMESPACE = "/aws/sagemaker/TrainingJobs"
INSTANCE_METRICS = {"CPUUtilization": "cpu_percent", "MemoryUtilization": "memory_percent",
                    "DiskUtilization": "disk_percent", "GPUUtilization": "gpu_percent"}


# -- collecting ------------------------------------------------------------------------------------------
def collect(backend: Any, description: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(metric points ``{name, value, t, host}``, utilization samples ``{t, host, cpu_percent, ...}``)."""
    name = description["TrainingJobName"]
    if backend.job_dir("training", name) is not None:  # a backend that keeps the job here: its own records
        return _collect_local(backend, name)
    return _collect_cloudwatch(backend, description)


def _collect_local(backend: Any, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from airflow_smdist.backends.local.job.sampler import read_utilization
    from airflow_smdist.backends.local.store import read_jsonl

    job_dir: Path = backend.job_dir("training", name)
    points, _ = read_jsonl(job_dir / "metrics.jsonl")
    return points, read_utilization(job_dir)


def _job_window(description: dict[str, Any]) -> tuple[datetime, datetime]:
    now = datetime.now(timezone.utc)
    start = description.get("TrainingStartTime") or description.get("CreationTime") or now - timedelta(hours=1)
    end = (description.get("TrainingEndTime") or now) + timedelta(minutes=1)
    return start, end


def cloudwatch_queries(description: dict[str, Any]) -> list[dict[str, Any]]:
    """GetMetricData queries: every MetricDefinitions name (dimension TrainingJobName) and every
    instance metric of every host (dimension Host = <job>/algo-N)."""
    name = description["TrainingJobName"]
    spec = description.get("AlgorithmSpecification") or {}
    queries = []
    for i, definition in enumerate(spec.get("MetricDefinitions") or []):
        queries.append({"Id": f"m{i}", "Label": f"metric|{definition['Name']}", "ReturnData": True, "MetricStat": {
            "Metric": {"Namespace": CLOUDWATCH_NAMESPACE, "MetricName": definition["Name"],
                       "Dimensions": [{"Name": "TrainingJobName", "Value": name}]},
            "Period": 60, "Stat": "Average"}})
    count = int((description.get("ResourceConfig") or {}).get("InstanceCount") or 1)
    for h in range(1, count + 1):
        for j, metric in enumerate(INSTANCE_METRICS):
            queries.append({"Id": f"h{h}i{j}", "Label": f"host|algo-{h}|{metric}", "ReturnData": True, "MetricStat": {
                "Metric": {"Namespace": CLOUDWATCH_NAMESPACE, "MetricName": metric,
                           "Dimensions": [{"Name": "Host", "Value": f"{name}/algo-{h}"}]},
                "Period": 60, "Stat": "Average"}})
    return queries


def _collect_cloudwatch(backend: Any, description: dict[str, Any]
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    queries = cloudwatch_queries(description)
    start, end = _job_window(description)
    client = backend.cloudwatch_client
    labels = {q["Id"]: q["Label"] for q in queries}
    results: list[dict[str, Any]] = []
    for i in range(0, len(queries), 500):  # GetMetricData takes up to 500 queries
        kwargs: dict[str, Any] = {"MetricDataQueries": queries[i:i + 500], "StartTime": start, "EndTime": end}
        while True:
            page = client.get_metric_data(**kwargs)
            results += page.get("MetricDataResults", [])
            if not page.get("NextToken"):
                break
            kwargs["NextToken"] = page["NextToken"]
    return _from_cloudwatch(results, labels)


def _from_cloudwatch(results: list[dict[str, Any]], labels: dict[str, str]
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    points: list[dict[str, Any]] = []
    samples: dict[tuple[str, float], dict[str, Any]] = {}
    for r in results:
        parts = labels.get(r["Id"], r.get("Label", "")).split("|")
        for ts, value in zip(r.get("Timestamps", []), r.get("Values", [])):
            t = ts.timestamp() if hasattr(ts, "timestamp") else float(ts)
            if parts[0] == "metric":
                points.append({"name": parts[1], "value": float(value), "t": t, "host": "all"})
            elif parts[0] == "host":
                sample = samples.setdefault((parts[1], t), {"t": t, "host": parts[1]})
                sample[INSTANCE_METRICS[parts[2]]] = float(value)
    return sorted(points, key=lambda p: p["t"]), sorted(samples.values(), key=lambda s: (s["t"], s["host"]))


# -- summarizing -----------------------------------------------------------------------------------------
def lower_is_better(metric: str) -> bool:
    return any(word in metric.lower() for word in LOWER_IS_BETTER_WORDS)


def _downsample(series: list[list[float]]) -> list[list[float]]:
    if len(series) <= MAX_SERIES_POINTS:
        return series
    step = len(series) / MAX_SERIES_POINTS
    kept = [series[int(i * step)] for i in range(MAX_SERIES_POINTS - 1)]
    return kept + [series[-1]]


def _divergence(metric: str, series: list[list[float]]) -> dict[str, Any] | None:
    """Where a lower-is-better metric went non-finite, or ended far above its best and above its start."""
    values = [v for _t, v in series]
    for t, v in series:
        if not math.isfinite(v):
            return {"at_seconds": t, "why": f"{metric} became {v}"}
    if not lower_is_better(metric) or len(values) < 3:
        return None
    best = min(values)
    best_at = values.index(best)
    last = values[-1]
    if last > values[0] and last > best + (DIVERGENCE_FACTOR - 1) * abs(best) and best_at < len(values) - 1:
        return {"at_seconds": series[best_at][0],
                "why": f"{metric} rose from its best {best:g} to {last:g} (it started at {values[0]:g})"}
    return None


def summarize_metrics(points: list[dict[str, Any]], t0: float) -> dict[str, dict[str, Any]]:
    by_name: dict[str, dict[str, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    for p in sorted(points, key=lambda p: p["t"]):
        by_name[p["name"]][p.get("host") or "all"].append([round(p["t"] - t0, 3), float(p["value"])])
    out = {}
    for metric, hosts in by_name.items():
        merged = sorted((pt for series in hosts.values() for pt in series), key=lambda pt: pt[0])
        values = [v for _t, v in merged]
        finite = [v for v in values if math.isfinite(v)] or [float("nan")]
        divergence = _divergence(metric, merged)
        out[metric] = {"first": values[0], "last": values[-1], "min": min(finite), "max": max(finite),
                       "points": len(values), "lower_is_better": lower_is_better(metric),
                       "diverged": divergence is not None, "divergence": divergence,
                       "series": {h: _downsample(s) for h, s in sorted(hosts.items())}}
    return out


def _host_summary(samples: list[dict[str, Any]], duration: float) -> dict[str, Any]:
    cpu = [s["cpu_percent"] for s in samples if "cpu_percent" in s]
    last = samples[-1]
    out: dict[str, Any] = {"samples": len(samples)}
    if cpu:
        out["cpu_mean_percent"] = round(sum(cpu) / len(cpu), 1)
        out["idle_fraction"] = round(sum(1 for c in cpu if c < IDLE_CPU_PERCENT) / len(cpu), 3)
    for key in ("read_bytes", "write_bytes", "cpu_seconds", "channel_bytes", "channels"):
        if key in last:
            out[key] = last[key]
    if "rss_bytes" in last:
        out["peak_rss_bytes"] = max(s.get("rss_bytes", 0) for s in samples)
    for key in ("memory_percent", "disk_percent", "gpu_percent"):
        values = [s[key] for s in samples if key in s]
        if values:
            out[f"{key.split('_')[0]}_mean_percent"] = round(sum(values) / len(values), 1)
    if "read_bytes" in out and duration > 0:
        out["read_mb_per_s"] = round(out["read_bytes"] / duration / 1e6, 3)
    return out


def summarize_hosts(samples: list[dict[str, Any]], t0: float, duration: float) -> dict[str, dict[str, Any]]:
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: s["t"]):
        by_host[s["host"]].append(s)
    return {host: _host_summary(rows, duration) for host, rows in sorted(by_host.items())}


def _mb(value: float) -> str:
    return f"{value / 1e6:.1f} MB" if value >= 1e6 else f"{value / 1e3:.0f} kB"


def _idle_text(host: dict[str, Any]) -> str:
    idle = host.get("idle_fraction")
    return f" and was idle {idle:.0%} of the time" if idle is not None and idle >= 0.1 else ""


def _uneven(values: dict[str, Any]) -> tuple[str, str, float] | None:
    """(least, most, 1 - least/most) when the hosts' values differ by more than UNEVEN_READ_FRACTION."""
    values = {h: v for h, v in values.items() if v is not None}
    if len(values) < 2 or max(values.values()) <= 0:
        return None
    most = max(values, key=lambda h: values[h])
    least = min(values, key=lambda h: values[h])
    fewer = 1 - values[least] / values[most]
    return (least, most, fewer) if fewer > UNEVEN_READ_FRACTION else None


def _shard_finding(hosts: dict[str, dict[str, Any]]) -> list[str]:
    """The channel data staged for each host (its shard) differs: the shards are uneven."""
    uneven = _uneven({h: v.get("channel_bytes") for h, v in hosts.items()})
    if uneven is None:
        return []
    least, most, fewer = uneven
    return [f"{least} was given {fewer:.0%} fewer channel bytes than {most} ({_mb(hosts[least]['channel_bytes'])} "
            f"vs {_mb(hosts[most]['channel_bytes'])} in /opt/ml/input/data){_idle_text(hosts[least])}: the shards "
            f"are uneven. Give ShardedByS3Key objects of similar size, in a multiple of the host count, so every "
            f"host gets the same share."]


def _read_finding(hosts: dict[str, dict[str, Any]]) -> list[str]:
    """The hosts read different amounts. Where their channel data is known, only when it is most of what the
    hosts read: reads count the interpreter's imports too (tens of MB for a deep-learning framework, more on
    some ranks than others), and next to a small shard those say nothing about the data. With equal shards,
    a difference in reads is the script reading its data more often on some hosts."""
    uneven = _uneven({h: v.get("read_bytes") for h, v in hosts.items()})
    if uneven is None:
        return []
    least, most, fewer = uneven
    extra = hosts[most]["read_bytes"] - hosts[least]["read_bytes"]
    channel = hosts[most].get("channel_bytes")
    text = (f"{least} read {fewer:.0%} fewer bytes than {most} ({_mb(hosts[least]['read_bytes'])} vs "
            f"{_mb(hosts[most]['read_bytes'])}){_idle_text(hosts[least])}")
    if not channel:
        return [f"{text}: the shards are uneven. Give ShardedByS3Key objects of similar size, in a multiple of the "
                f"host count, so every host gets the same share."]
    if min(v.get("channel_bytes") or 0 for v in hosts.values()) < CHANNEL_SHARE_OF_READS * hosts[least]["read_bytes"]:
        return []  # the reads are mostly not channel data
    return [f"{text}: {most} read {extra / channel:.1f} times its {_mb(channel)} of channel data more, with shards "
            f"of even size: its input pipeline reads the data more often (an extra pass or epoch, a cache that "
            f"misses). Give every host the same number of passes over its shard."]


def _io_findings(hosts: dict[str, dict[str, Any]]) -> list[str]:
    return _shard_finding(hosts) or _read_finding(hosts)


def _idle_findings(hosts: dict[str, dict[str, Any]], already: str, duration: float) -> list[str]:
    """Hosts idle most of the job. Not in a job shorter than IDLE_MIN_SECONDS: starting the interpreter, staging
    and the toolkit's setup are most of a short test, and say nothing about its input pipeline."""
    if duration < IDLE_MIN_SECONDS:
        return []
    waits = "input or on the other hosts" if len(hosts) > 1 else "input"
    share = " and its share of the data" if len(hosts) > 1 else ""
    out = []
    for host, v in hosts.items():
        idle = v.get("idle_fraction")
        if idle is not None and idle > IDLE_FRACTION_REPORTED and host not in already:
            out.append(f"{host} was idle {idle:.0%} of the time (CPU under {IDLE_CPU_PERCENT:g} %): it waits on "
                       f"{waits}. Check its data loading{share}.")
    return out


def _metric_findings(metrics: dict[str, dict[str, Any]], lr_scaled: bool) -> list[str]:
    out = []
    for name, m in metrics.items():
        if m["diverged"]:
            advice = ("lower base_learning_rate or lengthen the warm-up (warmup_epochs): the learning rate was "
                      "scaled up for the global batch" if lr_scaled else "lower the learning rate")
            out.append(f"{name} diverged after {m['divergence']['at_seconds']:.0f} s: "
                       f"{m['divergence']['why']}. {advice}.")
    return out


def _checkpoint_findings(hosts: dict[str, dict[str, Any]], duration: float, checkpointed: bool | None) -> list[str]:
    """A run long enough that losing it costs something, on several hosts (any one lost ends the job), without
    a CheckpointConfig: said after the run, when its length is known (a short test is not told)."""
    if checkpointed is not False or len(hosts) < 2 or duration < NO_CHECKPOINT_MIN_SECONDS:
        return []
    return [f"[no-checkpoint] this run took {duration / 60:.0f} min on {len(hosts)} hosts without "
            "checkpoint_s3_uri: a lost host would have lost all of it. Set checkpoint_s3_uri and checkpoint "
            "from one rank (rank 0) to /opt/ml/checkpoints, so a retried job resumes instead of starting over."]


def findings_of(metrics: dict[str, dict[str, Any]], hosts: dict[str, dict[str, Any]], *, lr_scaled: bool = False,
                duration: float = float("inf"), channels: bool | None = None,
                checkpointed: bool | None = None) -> list[str]:
    """``channels``: whether the job has input channels (None: unknown). A job without any (MPI, Ray, a
    script that makes its own data) has no shards: its hosts' reads differ for other reasons.
    ``checkpointed``: whether the job had a CheckpointConfig (None: unknown)."""
    io = _io_findings(hosts) if channels is not False else []
    return (_metric_findings(metrics, lr_scaled) + io + _idle_findings(hosts, " ".join(io), duration)
            + _checkpoint_findings(hosts, duration, checkpointed))


def reading(summary: dict[str, Any]) -> str:
    """One paragraph a person can act on."""
    parts = list(summary["findings"])
    hosts = summary["hosts"]
    if not parts:
        loads = ", ".join(f"{h} {v['cpu_mean_percent']:.0f} % CPU" for h, v in hosts.items()
                          if "cpu_mean_percent" in v)
        conv = ", ".join(f"{n} {m['first']:g} -> {m['last']:g}" for n, m in summary["metrics"].items())
        parts.append("No uneven shards, idle hosts or divergence seen"
                     + (f" ({loads})" if loads else "") + (f"; {conv}" if conv else "") + ".")
    return f"Job {summary['job_name']} ({len(hosts) or '?'} host(s), {summary['duration_seconds']:.0f} s): " \
        + " ".join(parts)


def summarize(job_name: str, points: list[dict[str, Any]], samples: list[dict[str, Any]], *, start: float | None = None,
              end: float | None = None, lr_scaled: bool = False, channels: bool | None = None,
              checkpointed: bool | None = None) -> dict[str, Any]:
    times = [p["t"] for p in points] + [s["t"] for s in samples]
    t0 = start if start is not None else (min(times) if times else 0.0)
    t1 = end if end is not None else (max(times) if times else t0)
    duration = max(t1 - t0, 0.0)
    metrics = summarize_metrics(points, t0)
    hosts = summarize_hosts(samples, t0, duration)
    summary = {"job_name": job_name, "start": t0, "duration_seconds": round(duration, 3), "metrics": metrics,
               "hosts": hosts, "findings": findings_of(metrics, hosts, lr_scaled=lr_scaled, duration=duration,
                                                       channels=channels, checkpointed=checkpointed)}
    summary["reading"] = reading(summary)
    return summary


# -- interruptions (managed spot, retries) ---------------------------------------------------------------
#: words that name a metric counting progress (the step or epoch a script reports)
PROGRESS_WORDS = ("step", "epoch", "iter", "batch")


def progress_metric(points: list[dict[str, Any]]) -> str | None:
    """The metric that counts progress: the first (by name) whose name says step, epoch, iteration or batch."""
    names: list[str] = sorted({p["name"] for p in points})
    for word in PROGRESS_WORDS:
        for name in names:
            if word in name.lower() and not lower_is_better(name):
                return name
    return None


def interruptions_of(description: dict[str, Any]) -> list[tuple[float, float | None, str]]:
    """(interrupted at, training again at or None, why) from SecondaryStatusTransitions: each ``Interrupted``
    (a spot interruption) and each ``Starting`` after ``Training`` (a retry after an internal failure)."""
    out: list[tuple[float, float | None, str]] = []
    previous = None
    for t in description.get("SecondaryStatusTransitions") or []:
        status, start = t["Status"], _epoch(t.get("StartTime"))
        if start is None:
            continue
        if status == "Interrupted" or (status == "Starting" and previous == "Training"):
            out.append((start, None, "spot interruption" if status == "Interrupted" else "instance failure"))
        elif status == "Training" and out and out[-1][1] is None:
            out[-1] = (out[-1][0], start, out[-1][2])
        previous = status
    return out


def _increment(values: list[float]) -> float:
    diffs = sorted(b - a for a, b in zip(values, values[1:], strict=False) if b > a)
    return diffs[len(diffs) // 2] if diffs else 1.0


def lost_work(points: list[dict[str, Any]], description: dict[str, Any]) -> list[dict[str, Any]]:
    """Per interruption: the progress metric's last value before it, the first after the restart (per host and
    the least), and the work redone (``lost``, in the metric's units: last before - first after + one step)."""
    name = progress_metric(points)
    if name is None:
        return []
    series = sorted((p for p in points if p["name"] == name), key=lambda p: p["t"])
    cuts = interruptions_of(description)
    first_value = series[0]["value"] if series else None
    out = []
    for i, (at, resumed, why) in enumerate(cuts):
        until = cuts[i + 1][0] if i + 1 < len(cuts) else float("inf")
        since = cuts[i - 1][1] or 0.0 if i else 0.0
        before = [p["value"] for p in series if since <= p["t"] < at]
        firsts: dict[str, float] = {}
        for p in series:
            if resumed is not None and resumed <= p["t"] < until:
                firsts.setdefault(p.get("host") or "all", p["value"])
        if not before or not firsts:
            continue
        last, resumed_from = max(before), min(firsts.values())
        out.append({"why": why, "metric": name, "last_before": last, "resumed_from": resumed_from,
                    "hosts": firsts, "lost": max(0.0, last - resumed_from + _increment(before)),
                    "from_start": first_value is not None and resumed_from <= first_value,
                    "hosts_differ": len(set(firsts.values())) > 1})
    return out


def interruption_findings(description: dict[str, Any], lost: list[dict[str, Any]], clashes: dict[str, list[str]],
                          points: list[dict[str, Any]]) -> list[str]:
    out = []
    spot = bool(description.get("EnableManagedSpotTraining"))
    if spot and not description.get("CheckpointConfig"):
        out.append("managed spot job without CheckpointConfig: each interruption restarts it from zero; set "
                   "checkpoint_s3_uri and restore from /opt/ml/checkpoints at start.")
    cuts = interruptions_of(description)
    if cuts and not lost:
        out.append(f"interrupted {len(cuts)} time(s), but no step or epoch metric measures the work lost: add a "
                   "MetricDefinition such as {'Name': 'step', 'Regex': 'step=(\\d+)'}."
                   if progress_metric(points) is None else f"interrupted {len(cuts)} time(s).")
    for n, item in enumerate(lost, 1):
        m = item["metric"]
        text = (f"{item['why']} {n}: {m} {item['last_before']:g} reached, resumed at {m} {item['resumed_from']:g} "
                f"({item['lost']:g} {m}(s) of work lost)")
        if item["from_start"]:
            text += "; it restarted from the beginning: the script restored no checkpoint"
        if item["hosts_differ"]:
            text += ("; the hosts resumed from different points ("
                     + ", ".join(f"{h} {v:g}" for h, v in sorted(item["hosts"].items()))
                     + "): not every host restored the same checkpoint")
        out.append(text + ".")
    for key, hosts in sorted(clashes.items())[:5]:
        out.append(f"checkpoint {key} written by {', '.join(hosts)}: one CheckpointConfig.S3Uri serves every host, so "
                   "they overwrite the same checkpoint key; "
                   "checkpoint from one host (rank 0) or use host-unique names.")
    return out


def _checkpoint_clashes(backend: Any, name: str) -> dict[str, list[str]]:
    """Checkpoint keys several hosts wrote (the local backend records them; SageMaker does not tell)."""
    job_dir = backend.job_dir("training", name)
    if job_dir is None:
        return {}
    try:
        state = json.loads((job_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return dict(state.get("checkpoint_clashes") or {})


# -- drawing ---------------------------------------------------------------------------------------------
def _host_series(samples: list[dict[str, Any]], t0: float, key: str,
                 scale: float = 1.0) -> dict[str, tuple[list[float], list[float]]]:
    out: dict[str, tuple[list[float], list[float]]] = {}
    for s in sorted(samples, key=lambda s: s["t"]):
        if key in s:
            xs, ys = out.setdefault(s["host"], ([], []))
            xs.append(s["t"] - t0)
            ys.append(s[key] * scale)
    return out


#: metrics drawn (each on its own axes: a loss and a throughput do not share a scale)
MAX_PLOTTED_METRICS = 4
#: one utilization panel: its title and its lines (host label, x, y, line style)
Panel = tuple[str, list[tuple[str, list[float], list[float], str]]]


def _lines(samples: list[dict[str, Any]], t0: float, key: str, scale: float = 1.0, style: str = "-",
           suffix: str = "") -> list[tuple[str, list[float], list[float], str]]:
    return [(host + suffix, xs, ys, style) for host, (xs, ys) in _host_series(samples, t0, key, scale).items()]


def utilization_panels(samples: list[dict[str, Any]], t0: float) -> list[Panel]:
    """The per-host panels under the metric curves: CPU (and GPU on SageMaker); bytes read and written
    (locally; disk use on SageMaker); memory (RSS locally, MemoryUtilization on SageMaker)."""
    cpu = _lines(samples, t0, "cpu_percent") + _lines(samples, t0, "gpu_percent", style="--", suffix=" GPU")
    io = _lines(samples, t0, "read_bytes", 1e-6, suffix=" read") + _lines(samples, t0, "write_bytes", 1e-6, "--",
                                                                          " written")
    rss = _lines(samples, t0, "rss_bytes", 1e-6)
    return [("CPU per host (% of one core, summed over its processes)"
             + ("; GPU dashed" if any(label.endswith(" GPU") for label, *_ in cpu) else ""), cpu),
            ("bytes read (solid) and written (dashed) per host (MB, cumulative)", io) if io
            else ("disk use per host (%)", _lines(samples, t0, "disk_percent")),
            ("memory per host (RSS of its processes, MB)", rss) if rss
            else ("memory per host (%)", _lines(samples, t0, "memory_percent"))]


#: the PNG's resolution: each panel is 3 inches high
PLOT_DPI = 72
#: the figure's width and each panel's height (inches)
PLOT_WIDTH, PANEL_HEIGHT = 9.0, 3.0
#: fixed margins (inches): left of the axes (y tick labels), right, above the first axes (the figure's title
#: and the first panel's), below the last (its x tick labels and label), between panels (tick labels, the x
#: label, the next title). Fixed, not constrained_layout: that measures every text to place the axes and took
#: about 40 % of the drawing; the panels all have the same shape, so the same margins fit them all.
MARGINS = {"left": 0.9, "right": 0.25, "top": 0.8, "bottom": 0.55, "gap": 0.85}


def _figure(rows: int) -> tuple[Any, list[Any]]:
    """A Figure on its own Agg canvas, ``rows`` axes stacked with :data:`MARGINS`. matplotlib's object API, not
    pyplot: nothing global changes in the task's process (no backend switch, no figure registry)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    height = PANEL_HEIGHT * rows
    fig = Figure(figsize=(PLOT_WIDTH, height))
    FigureCanvasAgg(fig)
    m = MARGINS
    axes_height = (height - m["top"] - m["bottom"] - (rows - 1) * m["gap"]) / rows
    grid = {"left": m["left"] / PLOT_WIDTH, "right": 1 - m["right"] / PLOT_WIDTH, "top": 1 - m["top"] / height,
            "bottom": m["bottom"] / height, "hspace": m["gap"] / axes_height}
    return fig, [row[0] for row in fig.subplots(rows, 1, squeeze=False, gridspec_kw=grid)]


def _metric_span(series: dict[str, list[list[float]]]) -> tuple[float, float]:
    """A metric panel's own time span, from its first point to its last: a short job's curve would be a
    vertical line on the whole job's clock (start-up, staging and upload included)."""
    times = [p[0] for points in series.values() for p in points]
    if not times:
        return 0.0, 1.0
    first, last = min(times), max(times)
    pad = max((last - first) * 0.03, 0.05)
    return first - pad, last + pad


def draw(summary: dict[str, Any], samples: list[dict[str, Any]]) -> Any:
    """The insight Figure: each metric's curve per host on its own time span; then CPU, I/O and memory per
    host (:func:`utilization_panels`) on the job's."""
    wait_for_preload()
    metrics = list(summary["metrics"].items())[:MAX_PLOTTED_METRICS]
    panels = utilization_panels(samples, summary["start"])
    fig, axes = _figure(len(metrics) + len(panels))
    for ax, (metric, m) in zip(axes, metrics):
        for host, series in m["series"].items():
            ax.plot([p[0] for p in series], [p[1] for p in series], marker=".", label=host)
        ax.set_title(f"{metric}" + (" (diverged)" if m["diverged"] else ""), y=1.0)
        ax.set_xlim(*_metric_span(m["series"]))
    hosts = sorted({s["host"] for s in samples})
    for ax, (title, lines) in zip(axes[len(metrics):], panels):
        for label, xs, ys, style in lines:  # one colour per host in every panel
            ax.plot(xs, ys, style, label=label, color=f"C{hosts.index(label.split(' ')[0]) % 10}")
        ax.set_title(title, y=1.0)
        ax.set_xlim(0, max(summary["duration_seconds"], 1.0))  # the utilization panels share the job's clock
    fig.suptitle(f"{summary['job_name']}: {len(summary['hosts'])} host(s), {summary['duration_seconds']:.0f} s",
                 y=1 - 0.15 / fig.get_figheight(), va="top")
    for ax in axes:
        ax.set_xlabel("seconds since start")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    return fig


def plot(summary: dict[str, Any], samples: list[dict[str, Any]], path: Any) -> Any:
    """The insight PNG (:func:`draw`). ``path``: a file name or a binary file object."""
    draw(summary, samples).savefig(path, dpi=PLOT_DPI, format="png")
    return path


# -- importing matplotlib while the job runs -------------------------------------------------------------
#: the thread importing matplotlib (:func:`preload_plotting`), None when none was started
_preload: threading.Thread | None = None


def _import_plotting() -> None:
    try:
        from matplotlib import font_manager
        from matplotlib.backends import backend_agg  # noqa: F401 - imported for plot()
        from matplotlib import figure  # noqa: F401 - imported for plot()

        font_manager.get_font(font_manager.findfont(font_manager.FontProperties()))  # the text font, loaded
    except Exception:  # noqa: BLE001 - plot() imports it again and reports the error where it is used
        pass


def preload_plotting() -> None:
    """Import matplotlib (about 0.5 CPU-s, every task: a task is a fresh process) in a background thread, so
    that after the job :func:`plot` only draws. Called when the job has been submitted and the task waits for
    it (idle time); :func:`plot` waits for the import to finish (Python's import lock would too)."""
    global _preload
    if _preload is None and "matplotlib.backends.backend_agg" not in sys.modules:
        _preload = threading.Thread(target=_import_plotting, name="smdist-insight-import", daemon=True)
        _preload.start()


def wait_for_preload() -> None:
    if _preload is not None:
        _preload.join()


# -- the operator's entry point --------------------------------------------------------------------------
#: per-host numbers in the XCom digest (utilization means of SageMaker's instance metrics; counters locally)
DIGEST_HOST_KEYS = ("cpu_mean_percent", "idle_fraction", "read_bytes", "channel_bytes", "write_bytes",
                    "peak_rss_bytes", "memory_mean_percent", "disk_mean_percent", "gpu_mean_percent")


def xcom_digest(summary: dict[str, Any], summary_uri: str | None, plot_uri: str | None) -> dict[str, Any]:
    """The key numbers for XCom (small: no series)."""
    return {"summary_uri": summary_uri, "plot_uri": plot_uri, "findings": summary["findings"],
            **({"interruptions": [{k: i[k] for k in ("why", "metric", "last_before", "resumed_from", "lost")}
                                  for i in summary["interruptions"]]} if summary.get("interruptions") else {}),
            "duration_seconds": summary["duration_seconds"],
            "metrics": {n: {k: m[k] for k in ("first", "last", "min", "diverged")}
                        for n, m in summary["metrics"].items()},
            "hosts": {h: {k: v[k] for k in DIGEST_HOST_KEYS if k in v}
                      for h, v in summary["hosts"].items()}}


def digest_line(digest: dict[str, Any]) -> str:
    """The XCom digest in one line, for the task log of a job that failed (its task pushes no XCom)."""
    def mb(value: Any) -> str:
        return f"{value / 1e6:.1f} MB"

    metrics = "; ".join(f"{n} {m['first']:g} -> {m['last']:g} (min {m['min']:g}"
                        + (", diverged)" if m["diverged"] else ")") for n, m in digest["metrics"].items())
    fields: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
        ("cpu_mean_percent", "CPU", lambda x: f"{x:.0f} %"), ("idle_fraction", "idle", lambda x: f"{x:.0%}"),
        ("read_bytes", "read", mb), ("write_bytes", "written", mb), ("peak_rss_bytes", "peak RSS", mb))
    hosts = "; ".join(f"{h} " + ", ".join(
        f"{label} {fmt(v[key])}" for key, label, fmt in fields
        if key in v) for h, v in digest["hosts"].items())
    return (f"{digest['duration_seconds']:.0f} s; " + (f"{metrics}; " if metrics else "")
            + (f"{hosts}; " if hosts else "") + f"summary {digest['summary_uri']}, plot {digest['plot_uri']}")


def _epoch(value: Any) -> float | None:
    return value.timestamp() if hasattr(value, "timestamp") else None


def job_insight(backend: Any, description: dict[str, Any], *, lr_scaled: bool = False,
                storage: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Collect, summarize, draw and store one training job's insight. Returns (summary, XCom digest)."""
    from airflow_smdist.storage import Storage

    name = description["TrainingJobName"]
    points, samples = collect(backend, description)
    summary = summarize(name, points, samples, start=_epoch(description.get("TrainingStartTime")),
                        end=_epoch(description.get("TrainingEndTime")), lr_scaled=lr_scaled,
                        channels=bool(description.get("InputDataConfig")),
                        # (a spot job without checkpoints is told so by interruption_findings, whatever its length)
                        checkpointed=None if description.get("EnableManagedSpotTraining")
                        else bool(description.get("CheckpointConfig")))
    lost = lost_work(points, description)
    extra = interruption_findings(description, lost, _checkpoint_clashes(backend, name), points)
    if lost or extra:
        summary["interruptions"] = lost
        summary["findings"] = extra + summary["findings"]
        summary["reading"] = reading(summary)
    base = f"{description['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{name}/output"
    storage = storage or Storage.for_backend(backend)
    summary_uri, plot_uri = f"{base}/insight.json", f"{base}/insight.png"
    storage.write_bytes(json.dumps(summary, indent=1, default=str).encode(), summary_uri)
    storage.write_bytes(plot(summary, samples, io.BytesIO()).getvalue(), plot_uri)
    return summary, xcom_digest(summary, summary_uri, plot_uri)
