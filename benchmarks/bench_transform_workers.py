"""Local batch transform throughput with 1, 2 and all cores' instances, as a ratio to one instance.

    python benchmarks/bench_transform_workers.py [--objects 12] [--records 400] [--work 20000] [--repeats 2]
        [--record]   # also append the table to benchmarks/results.md

Every run is a real local CreateTransformJob over the same generated prefix and the same model: a handler
whose per-record work is pure Python (GIL-bound, like many custom input_fn / output_fn), so only separate
processes can use more cores. Each instance is one worker process (algo-N); objects are mapped whole to
instances, as SageMaker does. The time measured is submit -> Completed (model loading and process start
included; the median of ``--repeats`` runs, interleaved), and every run's outputs are checked identical to
the one-instance run's.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tarfile
import tempfile
import textwrap
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

CODE = textwrap.dedent("""
    import json, os

    def model_fn(model_dir):
        with open(os.path.join(model_dir, "model.json")) as f:
            return json.load(f)

    def transform_fn(model, body, content_type, accept):
        out = []
        for line in body.splitlines():
            x = [float(v) for v in line.split(",")]
            r = sum(w * v for w, v in zip(model["w"], x)) % 1 or 0.5
            for _ in range(model["work"]):  # a logistic map: pure-Python work per record
                r = 3.7 * r * (1 - r)
            out.append(f"{r:.12f}")
        return "\\n".join(out) + "\\n", "text/csv"
""")


def build(root: str, objects: int, records: int, work: int) -> tuple[str, str]:
    data = os.path.join(root, "in")
    os.makedirs(data)
    for i in range(objects):
        with open(os.path.join(data, f"part-{i:03d}.csv"), "w") as f:
            for j in range(records):
                f.write(f"{(i * 7 + j) % 97 / 97:.6f},{(i + j * 3) % 89 / 89:.6f},{j % 13 / 13:.6f}\n")
    archive = os.path.join(root, "model.tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        for name, body in (("model.json", json.dumps({"w": [0.3, 0.5, 0.2], "work": work})),
                           ("code/inference.py", CODE)):
            info = tarfile.TarInfo(name)
            info.size = len(body.encode())
            tar.addfile(info, io.BytesIO(body.encode()))
    return f"file://{data}", f"file://{archive}"


def run(backend, model: str, input_uri: str, out: str, count: int) -> float:
    from airflow_smdist.specs.transform import build_transform

    name = f"bench-{count}-{uuid.uuid4().hex[:6]}"
    request = build_transform(job_name=name, model_name=model, input_uri=input_uri, output_uri=out,
                              instance_count=count, content_type="text/csv", accept="text/csv", split_type="Line",
                              batch_strategy="MultiRecord", max_payload_mb=1, assemble_with="Line")
    started = time.perf_counter()
    backend.submit("transform", request)
    while True:
        d = backend.describe("transform", name)
        if d["TransformJobStatus"] in ("Completed", "Failed", "Stopped"):
            break
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    if d["TransformJobStatus"] != "Completed":
        raise SystemExit(f"{name} ended {d['TransformJobStatus']}: {d.get('FailureReason')}")
    return elapsed


def outputs(root: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=12)
    p.add_argument("--records", type=int, default=400)
    p.add_argument("--work", type=int, default=20000, help="logistic-map steps per record")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--record", action="store_true", help="append the table to benchmarks/results.md")
    args = p.parse_args()
    cores = os.cpu_count() or 1
    counts = sorted({1, 2, cores})
    os.environ.setdefault("SMDIST_LOCAL_RUNTIME", "worker")  # an own image: run in this interpreter

    from airflow_smdist.backends.local import LocalBackend
    from airflow_smdist.backends.local.job.transform import create_model
    from airflow_smdist.specs.transform import build_model

    with tempfile.TemporaryDirectory(prefix="smdist-bench-") as root:
        backend = LocalBackend(os.path.join(root, "jobs"))
        input_uri, archive = build(root, args.objects, args.records, args.work)
        model = f"bench-model-{uuid.uuid4().hex[:6]}"
        create_model(backend, build_model(model_name=model, model_data=archive, role="arn:aws:iam::000000000000:role/R",
                                          image_uri="000000000000.dkr.ecr.us-east-1.amazonaws.com/bench:1").request)
        total = args.objects * args.records
        print(f"{args.objects} objects x {args.records} records ({total} records, {args.work} steps each), "
              f"{cores} core(s) on this machine")
        times: dict[int, list[float]] = {c: [] for c in counts}
        reference = None
        for rep in range(args.repeats):
            for count in counts:
                out_dir = os.path.join(root, f"out-{count}-{rep}")
                times[count].append(run(backend, model, input_uri, f"file://{out_dir}", count))
                got = outputs(out_dir)
                if reference is None:
                    reference = got
                elif got != reference:
                    raise SystemExit(f"outputs with {count} instance(s) differ from one instance's")
        base = total / statistics.median(times[1])
        table = []
        for count in counts:
            elapsed = statistics.median(times[count])
            name = {1: "1 instance", 2: "2 instances"}.get(count, f"{count} instances")
            if count == cores:
                name += " (all cores)"
            table.append((f"{name}{' (baseline)' if count == 1 else ''}",
                          f"{elapsed:.2f} s, {total / elapsed:.0f} records/s", f"{total / elapsed / base:.2f}"))
        note = (f"{args.objects} objects x {args.records} records, {args.work} pure-Python steps per record; "
                f"submit -> Completed, median of {args.repeats} interleaved; runs (s): "
                + json.dumps({str(c): [round(t, 2) for t in ts] for c, ts in times.items()}))
        lines = ["## Local batch transform: instances (worker processes) vs one", "",
                 f"_{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cores} cores_", "",
                 "| measure | value | ratio to baseline |", "|---|---|---|"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in table] + ["", note]
        text = "\n".join(lines) + "\n\n"
        print(text)
        if args.record:
            with open(os.path.join(HERE, "results.md"), "a") as f:
                f.write(text)
        print(f"outputs identical across instance counts: {len(reference)} objects")


if __name__ == "__main__":
    main()
