"""Deferred waiting on N jobs: the Amazon provider's own ``SageMakerTrigger`` vs this provider's trigger.

Each (trigger, N) runs in its own process, against its own moto server on loopback (with the test
extensions), so memory and CPU are not shared between runs: N training jobs are made ``InProgress`` (each
with one CloudWatch log stream of a few lines), N triggers run in one event loop as the triggerer runs them,
for a few poll intervals; then every job completes and the run ends when every trigger has fired.

* baseline: ``airflow.providers.amazon.aws.triggers.sagemaker.SageMakerTrigger`` (job_type "Training"): its
  async waiter, one DescribeTrainingJob per job per interval, one client per trigger; no log streaming.
* ours: ``SageMakerDistributedTrainingTrigger`` with ``print_logs=True`` (every line of every job to its
  trigger's log), started as the operator starts it (the status it saw before deferring).

Reported per run (after a warm-up in which every trigger made its client and polled once; for ours, until
every job was covered by a List round and its second log round started, so first sight, every job's lines so
far, is not counted): API calls the server answered per interval once all triggers run (steady state), API
calls per job lifetime (everything the triggers made from start to their events, over N, plus the one
Describe of each operator's ``execute_complete``, which both operators make), CPU seconds of the event
loop's thread per interval (the triggerer's side; moto runs in other threads), and the RSS the triggers
added. Usage: python benchmarks/bench_polling.py [N,N,...] [interval_s] [intervals] [--only smdist|amazon]
[--provisioning P] (``--provisioning P``: every job is ``Starting``, with no log stream, for P intervals after
the warm-up before its container starts, as SageMaker jobs spend their first minutes; reported: calls per
interval meanwhile)
(``BENCH_PROFILE=path``: also a cProfile of the event loop's thread over the steady intervals, written to
``path.<variant>.<N>``; its overhead inflates the CPU figures of that run)
(``--only smdist``: this provider's trigger alone, e.g. at N=2,000, where the Amazon trigger's warm-up takes
longer than the run; the table then reports how its numbers grow with N against its smallest N.)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, HERE)

from _common import load_note, report


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def make_trigger(variant: str, name: str, interval: float, created: float, log: logging.Logger):
    """The trigger an operator of ``variant`` defers to for training job ``name`` (logging to ``log``)."""
    if variant == "amazon":
        from airflow.providers.amazon.aws.triggers.sagemaker import SageMakerTrigger

        t = SageMakerTrigger(job_name=name, job_type="Training", waiter_delay=int(interval),
                             waiter_max_attempts=10000, aws_conn_id="aws_default", region_name="us-east-1")
    else:
        from airflow_smdist.triggers.training import SageMakerDistributedTrainingTrigger

        t = SageMakerDistributedTrainingTrigger(
            job_name=name, backend="sagemaker", aws_conn_id="aws_default", region_name="us-east-1",
            poll_interval=interval, print_logs=True, job_status="InProgress", as_of=time.time(),
            created=created, cursor_key=uuid.uuid4().hex)
    t._log = log
    return t


def warm(variant: str, calls: Counter, n: int, provisioning: int) -> bool:
    """Whether every trigger has started and polled once (clients made); for ours, whether the first log round
    (every job's lines so far, a first sight) is done: the second one has started (no log round while the jobs
    are still provisioning: then the first List)."""
    if variant == "amazon":
        return sum(calls.values()) >= n
    from airflow_smdist.triggers import base

    status = [p for pollers in list(base._POLLERS.values()) for p in pollers.values()
              if isinstance(p, base.CoalescedPoller)]
    return ((provisioning > 0 or calls["FilterLogEvents"] >= 2) and sum(len(p.watchers) for p in status) == n
            and not any(p.as_of for p in status if hasattr(p, "cursor")))  # first sight done (List)


def child(variant: str, n: int, interval: float, intervals: int, provisioning: int = 0) -> dict:
    from moto.core.responses import BaseResponse
    from moto_server import MotoServer, set_training_job_status

    calls: Counter = Counter()
    lock = threading.Lock()
    original = BaseResponse.call_action

    def counting(self):
        with lock:
            calls[self._get_action()] += 1
        return original(self)

    BaseResponse.call_action = counting
    server = MotoServer()
    url = server.start()
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                      SMDIST_LOCAL_ROOT=tempfile.mkdtemp(prefix="smdist-bench-poll-"),
                      AIRFLOW_CONN_AWS_DEFAULT=json.dumps({"conn_type": "aws", "extra": {
                          "endpoint_url": url, "region_name": "us-east-1"}}))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    import boto3
    from moto.logs.models import logs_backends

    sm = boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1")
    run = uuid.uuid4().hex[:6]
    names = [f"bench-{run}-{i:04d}" for i in range(n)]
    logs = logs_backends["123456789012"]["us-east-1"]
    group = "/aws/sagemaker/TrainingJobs"
    logs.create_log_group(group, {})
    now_ms = int(time.time() * 1000)
    for name in names:
        sm.create_training_job(
            TrainingJobName=name, RoleArn="arn:aws:iam::123456789012:role/R",
            AlgorithmSpecification={"TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1",
                                    "TrainingInputMode": "File"},
            OutputDataConfig={"S3OutputPath": "s3://b/out"},
            ResourceConfig={"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
            StoppingCondition={"MaxRuntimeInSeconds": 3600})
        # provisioning: "Starting" first (no container, no log stream), as a SageMaker job spends its first minutes
        set_training_job_status(name, "InProgress", "Starting" if provisioning else None)

    def start_containers() -> None:  # each job's container writes its first lines
        for name in names:
            stream = f"{name}/algo-1-1700000000"
            logs.create_log_stream(group, stream)
            logs.put_log_events(group, stream, [{"timestamp": now_ms + i, "message": f"line {i}"} for i in range(3)])

    if not provisioning:
        start_containers()
    created = time.time() - 1
    quiet = logging.getLogger(f"bench.{variant}")
    quiet.addHandler(logging.NullHandler())
    quiet.setLevel(logging.INFO)
    quiet.propagate = False

    triggers = [make_trigger(variant, name, interval, created, quiet) for name in names]
    calls.clear()
    rss0 = rss_mib()
    out: dict = {"variant": variant, "n": n, "interval": interval, "intervals": intervals}

    async def main():
        async def first(t):
            async for event in t.run():
                return event.payload

        tasks = [asyncio.ensure_future(first(t)) for t in triggers]
        t0 = time.monotonic()  # warm-up (see warm())

        while not warm(variant, calls, n, provisioning) and time.monotonic() - t0 < 600:  # noqa: ASYNC110 - the counter is bumped by moto's server threads
            await asyncio.sleep(0.2)
        out["warm_up_s"] = time.monotonic() - t0
        await asyncio.sleep(interval * 0.5)
        if provisioning:  # every job still Starting for this many intervals, then its container starts
            before = sum(calls.values())
            await asyncio.sleep(interval * provisioning)
            out["provisioning_calls_per_interval"] = (sum(calls.values()) - before) / provisioning
            for name in names:
                set_training_job_status(name, "InProgress", "Training")
            start_containers()
            # the two Lists that see them train (the second through its settle window, LIST_SETTLE_SECONDS) and
            # the log rounds after them: the steady intervals below start once that has passed
            await asyncio.sleep(interval * 2.5)
        profiler = None
        if os.environ.get("BENCH_PROFILE"):  # cProfile of the event loop's thread over the steady intervals
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        steady_calls, cpu0 = sum(calls.values()), time.thread_time()
        await asyncio.sleep(interval * intervals)
        out["calls_per_interval"] = (sum(calls.values()) - steady_calls) / intervals
        out["cpu_per_interval"] = (time.thread_time() - cpu0) / intervals
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{os.environ['BENCH_PROFILE']}.{variant}.{n}")
        out["rss_added_mib"] = rss_mib() - rss0
        for name in names:
            set_training_job_status(name, "Completed")
        t0 = time.monotonic()
        events = await asyncio.wait_for(asyncio.gather(*tasks), interval * 20 + 60)
        out["to_all_events_s"] = time.monotonic() - t0
        out["events_ok"] = sum(1 for e in events if e and e.get("status") == "success")

    asyncio.run(main())
    out["calls"] = dict(calls)
    out["calls_per_job_lifetime"] = sum(calls.values()) / n + 1  # + execute_complete's Describe
    server.stop()
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print("RESULT " + json.dumps(child(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]),
                                           int(sys.argv[6]))))
        return
    args = sys.argv[1:]
    provisioning = 0
    if "--provisioning" in args:
        provisioning = int(args.pop(args.index("--provisioning") + 1))
        args.remove("--provisioning")
    variants: tuple[str, ...] = ("amazon", "smdist")
    if "--only" in args:
        variants = (args.pop(args.index("--only") + 1),)
        args.remove("--only")
    ns = [int(x) for x in (args[0] if args else "100,500,2000").split(",")]
    interval = float(args[1]) if len(args) > 1 else 5.0
    intervals = int(args[2]) if len(args) > 2 else 3
    results = {}
    load_before = load_note()
    for n in ns:
        for variant in variants:  # interleaved, so load hits both alike
            proc = subprocess.run([sys.executable, __file__, "--child", variant, str(n), str(interval), str(intervals),
                                   str(provisioning)],
                                  capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO}, check=False)
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if not line:
                print(proc.stderr[-3000:], file=sys.stderr)
                results[(variant, n)] = None
                continue
            results[(variant, n)] = json.loads(line[-1][len("RESULT "):])
            print(json.dumps(results[(variant, n)]), flush=True)
    if len(variants) == 1:
        return report_one(variants[0], ns, results, interval, intervals, load_before, provisioning)
    rows = []
    for n in ns:
        a, s = results.get(("amazon", n)), results.get(("smdist", n))
        if not a or not s:
            rows.append((f"N={n}", "run failed", "-"))
            continue
        if provisioning:
            rows.append((f"N={n}: API calls per interval while every job is Starting, Amazon / smdist",
                         f"{a['provisioning_calls_per_interval']:.1f} / {s['provisioning_calls_per_interval']:.1f}",
                         f"{s['provisioning_calls_per_interval'] / a['provisioning_calls_per_interval']:.4f}"))
        rows += [
            (f"N={n}: API calls per interval, Amazon SageMakerTrigger (baseline)", f"{a['calls_per_interval']:.1f}",
             "1.00"),
            (f"N={n}: API calls per interval, smdist trigger (logs on)", f"{s['calls_per_interval']:.1f}",
             f"{s['calls_per_interval'] / a['calls_per_interval']:.4f}"),
            (f"N={n}: API calls per job lifetime, Amazon / smdist", (f"{a['calls_per_job_lifetime']:.2f} / "
                                                                f"{s['calls_per_job_lifetime']:.3f}"),
             f"{s['calls_per_job_lifetime'] / a['calls_per_job_lifetime']:.3f}"),
            (f"N={n}: triggerer CPU s per interval, Amazon / smdist", (f"{a['cpu_per_interval']:.3f} / "
                                                                  f"{s['cpu_per_interval']:.4f}"),
             f"{s['cpu_per_interval'] / max(a['cpu_per_interval'], 1e-9):.4f}"),
            (f"N={n}: RSS added by the triggers, Amazon / smdist", (f"{a['rss_added_mib']:.0f} / "
                                                                f"{s['rss_added_mib']:.0f} MiB"),
             f"{s['rss_added_mib'] / max(a['rss_added_mib'], 1e-9):.3f}"),
        ]
    report("Deferred waiting on N jobs: Amazon provider's SageMakerTrigger vs the smdist trigger (moto server)",
           rows, note=f"poll interval {interval:g} s, {intervals} steady intervals; one process and one moto server "
                      f"per run, runs interleaved. {load_before} {lifetime(intervals, provisioning)}; calls per job "
                      "lifetime include execute_complete's Describe. Raw: "
                      + json.dumps({f"{k[0]}/{k[1]}": v for k, v in results.items()}))


def lifetime(intervals: int, provisioning: int) -> str:
    """How long the benchmark's jobs live, in poll intervals."""
    if not provisioning:
        return f"Jobs live {intervals + 2} to {intervals + 3} intervals here"
    return (f"Jobs live {intervals + provisioning + 5} to {intervals + provisioning + 6} intervals here, the first "
            f"{provisioning + 1} or so Starting (no container, no log stream yet)")


def report_one(variant: str, ns: list[int], results: dict, interval: float, intervals: int, load_before: str,
               provisioning: int = 0) -> None:
    """One trigger at several N: its numbers, and their growth against its smallest N (flat: 1.00)."""
    base = results.get((variant, ns[0]))
    rows = []
    for n in ns:
        r = results.get((variant, n))
        if not r or not base:
            rows.append((f"N={n}", "run failed", "-"))
            continue
        if provisioning:
            rows.append((f"N={n}: API calls per interval while every job is Starting",
                         f"{r['provisioning_calls_per_interval']:.1f}", "-"))
        rows += [
            (f"N={n}: API calls per interval", f"{r['calls_per_interval']:.1f}",
             f"{r['calls_per_interval'] / max(base['calls_per_interval'], 1e-9):.2f}"),
            (f"N={n}: API calls per job lifetime", f"{r['calls_per_job_lifetime']:.3f}", "-"),
            (f"N={n}: triggerer CPU s per interval", f"{r['cpu_per_interval']:.4f}",
             f"{r['cpu_per_interval'] / max(base['cpu_per_interval'], 1e-9):.2f}"),
            (f"N={n}: RSS added by the triggers", f"{r['rss_added_mib']:.0f} MiB", "-"),
            (f"N={n}: events ok / seconds from completion to the last event",
             f"{r['events_ok']} / {r['to_all_events_s']:.1f} s", "-"),
        ]
    report(f"Deferred waiting on N jobs: the {variant} trigger alone, growth with N (baseline: N={ns[0]})", rows,
           note=f"poll interval {interval:g} s, {intervals} steady intervals; one process and one moto server per "
                f"run. {load_before} {lifetime(intervals, provisioning)}. Raw: "
                + json.dumps({f"{k[0]}/{k[1]}": v for k, v in results.items()}))


if __name__ == "__main__":
    main()
