"""API calls, CPU and memory for 500 jobs waited on at once, coalesced vs one Describe per job per poll.

Runs moto's server on loopback (with the test extensions), creates N training jobs InProgress, then for
the same number of poll intervals measures: (a) this provider's coalesced poller with N waiting
triggers, (b) the baseline the Amazon provider's SageMakerTrigger does: one Describe per job per poll.
Both use the same aiobotocore client path. Usage: python benchmarks/bench_polling.py [N] [intervals]
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
sys.path.insert(0, HERE)

from _common import report  # noqa: E402


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    intervals = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    interval = 0.5
    from moto_server import MotoServer, set_training_job_status

    server = MotoServer()
    url = server.start()
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                      AIRFLOW_CONN_AWS_DEFAULT=json.dumps({"conn_type": "aws", "extra": {
                          "endpoint_url": url, "region_name": "us-east-1"}}))
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from airflow_smdist.backends.sagemaker import SageMakerBackend
    from airflow_smdist.specs.training import training_request
    from airflow_smdist.triggers.base import CoalescedPoller, SageMakerStatusSource

    backend = SageMakerBackend("aws_default", "us-east-1")
    names = [f"bench-{i:04d}" for i in range(n)]
    for name in names:
        backend.submit("training", training_request(
            job_name=name, role="arn:aws:iam::123456789012:role/R", output_path="s3://b/out",
            image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1", instance_type="ml.m5.xlarge"))
        set_training_job_status(name, "InProgress")

    async def coalesced():
        source = SageMakerStatusSource("aws_default", "us-east-1")
        poller = CoalescedPoller(source, "training", interval)
        queues = [poller.watch(name) for name in names]
        for q in queues:
            await q.get()  # the first sight of every job
        start_calls = dict(source.calls)
        await asyncio.sleep(interval * intervals)
        calls = {k: source.calls.get(k, 0) - start_calls.get(k, 0) for k in ("list", "describe")}
        for name, q in zip(names, queues):
            poller.unwatch(name, q)
        await asyncio.sleep(interval * 1.2)
        return calls

    async def per_job():
        source = SageMakerStatusSource("aws_default", "us-east-1")
        calls = {"describe": 0}

        async def one(name):
            for _ in range(intervals):
                await source.describe("training", name)
                calls["describe"] += 1
                await asyncio.sleep(interval)

        await asyncio.gather(*(one(name) for name in names))
        await source.close()
        return calls

    def measure(fn):
        tracemalloc.start()
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        result = asyncio.run(fn())
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        _cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return result, cpu, wall, peak

    base_calls, base_cpu, base_wall, base_mem = measure(per_job)
    co_calls, co_cpu, co_wall, co_mem = measure(coalesced)
    server.stop()
    base_per_interval = base_calls["describe"] / intervals
    co_per_interval = (co_calls["list"] + co_calls["describe"]) / intervals
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report(f"Waiting on {n} jobs for {intervals} poll intervals (moto server on loopback)", [
        ("API calls per interval, one Describe per job (baseline)", f"{base_per_interval:.1f}", "1.00"),
        ("API calls per interval, coalesced", f"{co_per_interval:.1f} ({co_calls})",
         f"{co_per_interval / base_per_interval:.4f}"),
        ("CPU seconds, baseline", f"{base_cpu:.2f}", "1.00"),
        ("CPU seconds, coalesced (after first sight)", f"{co_cpu:.2f}", f"{co_cpu / base_cpu:.2f}"),
        ("peak traced memory, baseline", f"{base_mem / 2**20:.1f} MiB", "1.00"),
        ("peak traced memory, coalesced", f"{co_mem / 2**20:.1f} MiB", f"{co_mem / base_mem:.2f}"),
    ], note=f"CPU and memory include the in-process moto server's share; process max RSS {rss:.0f} MiB. "
            "The coalesced run also pays one Describe per job when it first sees it (not in the per-interval count).")


if __name__ == "__main__":
    main()
