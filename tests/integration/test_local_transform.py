"""Local batch transform for real: the inference toolkit's handlers and defaults, record splitting and
batching, DataProcessing, worker processes per instance, failures and stop, and the batch inference operator's
three ways, completeness check and re-runs of only what is missing."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from airflow_smdist._compat import AirflowException
from airflow_smdist.backends.base import BackendError
from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.runtime import batch_runner as inference
from airflow_smdist.backends.local.job import transform as local_transform
from airflow_smdist.backends.local.store import pid_alive
from airflow_smdist.operators.transform import (
    SageMakerBatchInferenceMergeOperator,
    SageMakerBatchShardPlanOperator,
    SageMakerShardedBatchInferenceOperator,
)
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.transform import build_model, build_transform
from airflow_smdist.specs.validate import operation_model

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
GENERIC_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own-serving:1"
SKLEARN_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
WEIGHTS = [0.5, -2.0, 3.0]

LINEAR_CODE = textwrap.dedent("""
    import io, json, os, time
    import numpy as np

    def model_fn(model_dir):
        with open(os.path.join(model_dir, "weights.json")) as f:
            cfg = json.load(f)
        print(f"model_fn pid={os.getpid()} host={os.environ.get('SM_CURRENT_HOST')} "
              f"batch={os.environ.get('SAGEMAKER_BATCH')} strategy={os.environ.get('SAGEMAKER_BATCH_STRATEGY')}",
              flush=True)
        return cfg

    def input_fn(body, content_type):
        return np.atleast_2d(np.genfromtxt(io.StringIO(body), delimiter=",", dtype=float))

    def predict_fn(x, cfg):
        if np.isnan(x).any():
            raise ValueError("a feature is not a number")
        if cfg.get("fail_once"):
            try:
                os.remove(cfg["fail_once"])
            except FileNotFoundError:
                pass
            else:
                raise RuntimeError("injected failure (once)")
        time.sleep(cfg.get("sleep", 0))
        return x @ np.array(cfg["w"])
""")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def context(run_id: str, task_id: str = "score", map_index: int = -1):
    return {"ti": SimpleNamespace(dag_id="dag", task_id=task_id, map_index=map_index, try_number=1), "run_id": run_id}


def model_archive(path, code: str | None = LINEAR_CODE, **cfg) -> str:
    """model.tar.gz with weights.json (+ code/inference.py)."""
    with tarfile.open(path, "w:gz") as tar:
        def add(name, data: bytes):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("weights.json", json.dumps({"w": WEIGHTS, **cfg}).encode())
        if code is not None:
            add("code/inference.py", code.encode())
    return f"file://{path}"


def write_inputs(root, sizes, nested=True):
    rng = np.random.default_rng(11)
    root.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(sizes):
        rel = f"group-{i % 2}/part-{i:02d}.csv" if nested and i % 3 == 0 else f"part-{i:02d}.csv"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        rows = rng.uniform(-1, 1, size=(n, 3)).round(4)
        (root / rel).write_text("\n".join(",".join(str(v) for v in r) for r in rows) + "\n")
    return f"file://{root}"


def expected(path) -> np.ndarray:
    return np.atleast_2d(np.loadtxt(path, delimiter=",")) @ np.array(WEIGHTS)


def outputs(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.out"))}


@pytest.fixture
def backend(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    return LocalBackend(tmp_path / "jobs")


def make_model(backend, tmp_path, image=GENERIC_IMAGE, **cfg) -> str:
    name = unique("model")
    uri = model_archive(tmp_path / f"{name}.tar.gz", **cfg)
    local_transform.create_model(backend, build_model(model_name=name, model_data=uri, role=ROLE,
                                                      image_uri=image).request)
    return name


def wait(backend, name, timeout=120, kind="transform"):
    key = "TransformJobStatus" if kind == "transform" else "ProcessingJobStatus"
    deadline = time.time() + timeout
    while time.time() < deadline:
        d = backend.describe(kind, name)
        if d[key] in ("Completed", "Failed", "Stopped"):
            return d
        time.sleep(0.2)
    raise AssertionError(f"{name} still running: {(backend.job_dir(kind, name) / 'supervisor.log').read_text()}")


def host_lines(backend, name):
    events, _ = backend.log_events("transform", name)
    by_host: dict[str, list] = {}
    for e in events:
        by_host.setdefault(e.host, []).append(e)
    return by_host


# -- the handler contract and its defaults ---------------------------------------------------------------
def handler_for(tmp_path, code: str | None, defaults="generic", files: dict | None = None, **kw):
    model_dir = tmp_path / unique("model")
    (model_dir / "code").mkdir(parents=True)
    if code is not None:
        (model_dir / "code" / "inference.py").write_text(textwrap.dedent(code))
    for name, data in (files or {}).items():
        (model_dir / name).write_bytes(data)
    return inference.Handler(str(model_dir), defaults=defaults, **kw)


def test_generic_defaults_decode_and_encode_csv_json_npy(tmp_path):
    h = handler_for(tmp_path, """
        def model_fn(model_dir):
            return 10
        def predict_fn(data, model):
            return data * model
    """)
    body, ctype = h.invoke(b"1,2\n3,4", "text/csv", "text/csv")
    assert ctype == "text/csv" and np.array_equal(np.loadtxt(io.StringIO(body.decode()), delimiter=","),
                                                  [[10, 20], [30, 40]])
    body, ctype = h.invoke(b"[[1.5, 2]]", "application/json", "application/json")
    assert json.loads(body) == [[15.0, 20.0]]
    buf = io.BytesIO()
    np.save(buf, np.arange(4, dtype=np.int64))
    body, ctype = h.invoke(buf.getvalue(), "application/x-npy", "application/x-npy")
    assert ctype == "application/x-npy" and np.array_equal(np.load(io.BytesIO(body)), np.arange(4) * 10)
    # no Accept (or */*): SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT, else JSON
    assert h.invoke(b"[1]", "application/json", "*/*") == (b"[10]", "application/json")
    with pytest.raises(inference.UnsupportedFormatError):
        h.invoke(b"x", "text/plain", "application/json")


def test_missing_model_fn_and_predict_fn_fail_as_the_toolkit_does(tmp_path):
    with pytest.raises(NotImplementedError, match="Please provide a model_fn implementation"):
        handler_for(tmp_path, None)
    h = handler_for(tmp_path, "def model_fn(model_dir):\n    return 1\n")
    with pytest.raises(NotImplementedError, match="Please provide a predict_fn implementation"):
        h.invoke(b"[1]", "application/json", "application/json")


def test_transform_fn_excludes_the_others_and_context_is_passed_when_asked(tmp_path):
    with pytest.raises(ValueError, match="Cannot use transform_fn implementation in conjunction"):
        handler_for(tmp_path, """
            def model_fn(model_dir): return 1
            def transform_fn(model, data, content_type, accept): return data
            def input_fn(data, content_type): return data
        """)
    h = handler_for(tmp_path, """
        def model_fn(model_dir, context):
            return context.system_properties["model_dir"]
        def transform_fn(model, data, content_type, accept):
            return data.upper() + "|" + model.rsplit("/", 1)[-1], "text/plain"
    """)
    body, ctype = h.invoke(b"abc", "text/csv", "text/csv")
    assert body.decode() == "ABC|" + os.path.basename(h.model_dir) and ctype == "text/plain"


def test_sklearn_container_defaults_predict_with_the_model(tmp_path):
    import joblib
    from sklearn.linear_model import LinearRegression

    x = np.random.default_rng(0).normal(size=(50, 3))
    model = LinearRegression().fit(x, x @ np.array(WEIGHTS) + 1)
    buf = io.BytesIO()
    joblib.dump(model, buf)
    h = handler_for(tmp_path, """
        import joblib, os
        def model_fn(model_dir):
            return joblib.load(os.path.join(model_dir, "model.joblib"))
    """, defaults="sklearn", files={"model.joblib": buf.getvalue()})
    body, _ = h.invoke(b"1,2,3\n0,0,0", "text/csv", "text/csv")
    assert np.allclose(np.loadtxt(io.StringIO(body.decode())), [0.5 - 4 + 9 + 1, 1])
    assert inference.defaults_for_image(SKLEARN_IMAGE) == "sklearn"
    pytorch = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.5-cpu-py311"
    assert inference.defaults_for_image(pytorch) == "pytorch"
    assert inference.defaults_for_image(GENERIC_IMAGE) == "generic"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit is deprecated in favour of torch.export
@pytest.mark.torch
def test_pytorch_container_defaults_load_torchscript_and_return_lists(tmp_path):
    import torch

    net = torch.nn.Linear(3, 1)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([WEIGHTS]))
        net.bias.zero_()
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(net), buf)
    h = handler_for(tmp_path, None, defaults="pytorch", files={"model.pt": buf.getvalue()})
    body, ctype = h.invoke(b"[[1, 2, 3], [1, 0, 0]]", "application/json", "application/json")
    assert ctype == "application/json" and np.allclose(json.loads(body), [[5.5], [0.5]])
    body, ctype = h.invoke(b"1,2,3", "text/csv", "text/csv")
    assert ctype == "text/csv" and np.isclose(float(body.decode().strip()), 5.5)


# -- records, batches, DataProcessing (the engine) -------------------------------------------------------------
def identity_handler(tmp_path):
    return handler_for(tmp_path, """
        def model_fn(model_dir): return None
        def transform_fn(model, data, content_type, accept):
            return data, accept
    """)


def test_multirecord_packs_records_up_to_max_payload_and_keeps_order(tmp_path):
    h = identity_handler(tmp_path)
    record = b"x" * 200_000
    data = b"\n".join(record[:-len(str(i))] + str(i).encode() for i in range(12))
    s = inference.Settings(content_type="text/csv", accept="text/csv", split_type="Line", batch_strategy="MultiRecord",
                           max_payload_mb=1, assemble_with="Line", max_concurrent_transforms=4)
    result = inference.transform_object(h, data, s)
    assert (result.records, result.batches) == (12, 3)  # 5 records of 200 kB fit in 1 MB
    assert result.output == data + b"\n"
    single = inference.transform_object(h, data, inference.Settings(content_type="text/csv", accept="text/csv",
                                                                    split_type="Line", assemble_with="Line"))
    assert (single.records, single.batches, single.output) == (12, 12, data + b"\n")
    whole = inference.transform_object(h, data, inference.Settings(content_type="text/csv", accept="text/csv"))
    assert (whole.records, whole.batches, whole.output) == (1, 1, data)
    with pytest.raises(inference.TransformError, match=r"big\.csv: record 3 \(line 3\) is 2000000 bytes"):
        inference.transform_object(h, b"a\nb\n" + b"y" * 2_000_000, s, name="big.csv")
    gz = inference.transform_object(h, gzip.compress(b"a\n\nb\n"), inference.Settings(
        content_type="text/csv", accept="text/csv", split_type="Line", assemble_with="Line", compression="Gzip"))
    assert gz.output == b"a\nb\n" and gz.records == 2


def test_data_processing_filters_and_joins_csv(tmp_path):
    h = handler_for(tmp_path, """
        import numpy as np
        def model_fn(model_dir): return None
        def input_fn(body, content_type):
            return np.atleast_2d(np.genfromtxt(body.splitlines(), delimiter=","))
        def predict_fn(x, model):
            assert x.shape[1] == 2, x.shape  # the id column was filtered out
            return x.sum(axis=1)
    """)
    data = b"id-1,1,2\nid-2,3,4\nid-3,5,6\n"
    for strategy in ("SingleRecord", "MultiRecord"):
        s = inference.Settings(content_type="text/csv", accept="text/csv", split_type="Line", batch_strategy=strategy,
                               assemble_with="Line", input_filter="$[1:]", join_source="Input",
                               output_filter="$[0,-1]")
        assert inference.transform_object(h, data, s).output == b"id-1,3.0\nid-2,7.0\nid-3,11.0\n"
    s = inference.Settings(content_type="text/csv", accept="text/csv", split_type="Line", assemble_with="Line",
                           input_filter="$[1:]", join_source="Input")
    assert inference.transform_object(h, data, s).output.splitlines()[0] == b"id-1,1,2,3.0"


def test_data_processing_on_json_lines(tmp_path):
    h = handler_for(tmp_path, """
        import json
        def model_fn(model_dir): return None
        def transform_fn(model, body, content_type, accept):
            rows = [json.loads(line) for line in body.splitlines()]
            return json.dumps([sum(r) for r in rows]), "application/json"
    """)
    data = b'{"id": "a", "features": [1, 2]}\n{"id": "b", "features": [3, 4]}\n'
    s = inference.Settings(content_type="application/json", accept="application/json", split_type="Line",
                           batch_strategy="MultiRecord", assemble_with="Line", input_filter="$.features",
                           join_source="Input", output_filter="$['id','SageMakerOutput']")
    lines = inference.transform_object(h, data, s).output.decode().splitlines()
    assert [json.loads(x) for x in lines] == [{"id": "a", "SageMakerOutput": 3}, {"id": "b", "SageMakerOutput": 7}]
    s.output_filter = None
    s.input_filter = None
    h2 = handler_for(tmp_path, """
        def model_fn(model_dir): return None
        def transform_fn(model, body, content_type, accept): return "[1]", "application/json"
    """)
    s.batch_strategy = "SingleRecord"
    out = inference.transform_object(h2, b"[5, 6]\n", s).output
    assert json.loads(out) == {"SageMakerInput": [5, 6], "SageMakerOutput": [1]}


# -- jobs on the local backend ----------------------------------------------------------------------------
@pytest.mark.slow
def test_transform_job_spreads_objects_over_parallel_instance_processes(backend, tmp_path):
    data = tmp_path / "in"
    input_uri = write_inputs(data, [30, 40, 50, 60])
    model = make_model(backend, tmp_path, sleep=0.6)
    name = unique("tj")
    request = build_transform(job_name=name, model_name=model, input_uri=input_uri, output_uri=f"file://{tmp_path}/out",
                              instance_count=2, content_type="text/csv", accept="text/csv", split_type="Line",
                              batch_strategy="MultiRecord", assemble_with="Line")
    backend.submit("transform", request)
    d = wait(backend, name)
    assert d["TransformJobStatus"] == "Completed", d.get("FailureReason")
    assert d["TransformStartTime"] <= d["TransformEndTime"] and d["BatchStrategy"] == "MultiRecord"
    assert set(d) <= set(operation_model("DescribeTransformJob").output_shape.members)
    # SageMaker's names: <S3OutputPath>/<key below the prefix>.out, nested keys kept
    outs = outputs(tmp_path / "out")
    assert sorted(outs) == sorted(str(p.relative_to(data)) + ".out" for p in data.rglob("*.csv"))
    for rel, body in outs.items():
        assert np.allclose(np.loadtxt(io.BytesIO(body)), expected(data / rel[:-4]))
    # two instances, each its own process (algo-1 / algo-2 at their loopback hosts), working at the same time
    lines = host_lines(backend, name)
    assert set(lines) >= {"algo-1", "algo-2", "platform"}
    pids = set()
    windows = []
    for host in ("algo-1", "algo-2"):
        loaded = [e for e in lines[host] if "model_fn pid=" in e.message]
        assert len(loaded) == 1 and "batch=true strategy=MULTI_RECORD" in loaded[0].message
        # SM_CURRENT_HOST: the host's own name (namespaces) or its loopback address (fallback)
        assert f"host={host} " in loaded[0].message or "host=127." in loaded[0].message
        pids.add((host, loaded[0].message.split("pid=")[1].split()[0]))
        done = [e.timestamp for e in lines[host] if " record(s) in " in e.message and "->" in e.message]
        assert len(done) == 2  # 4 objects, 2 per instance
        windows.append((done[0] - 0.6, done[-1]))
    assert len(pids) == 2
    (a0, a1), (b0, b1) = windows
    assert a0 < b1 and b0 < a1, f"instances did not overlap: {windows}"


ENV_CODE = textwrap.dedent("""
    import json, os

    def model_fn(model_dir):
        seen = sorted(k for k in os.environ if k.startswith(("AWS_", "AIRFLOW")) or k == "PYTHONPATH")
        print("environ " + json.dumps({"keys": seen, "own": os.environ.get("MODEL_SETTING")}), flush=True)
        return None

    def transform_fn(model, body, content_type, accept):
        return body, accept
""")


@pytest.mark.slow
def test_the_inference_code_gets_a_clean_environment_without_the_workers_credentials(backend, tmp_path,
                                                                                       monkeypatch):
    """Issue 11: a model's inference.py sees what a serving container sees (its Environment, the region), not
    the worker's AWS keys, Airflow settings or PYTHONPATH; the inputs and outputs are moved outside it."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "worker-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "worker-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "worker-token")
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "worker-fernet")
    monkeypatch.setenv("AIRFLOW_CONN_SECRET", "aws://user:password@")
    name = unique("model")
    uri = model_archive(tmp_path / f"{name}.tar.gz", code=ENV_CODE)
    local_transform.create_model(backend, build_model(model_name=name, model_data=uri, role=ROLE,
                                                      image_uri=GENERIC_IMAGE,
                                                      environment={"MODEL_SETTING": "own"}).request)
    input_uri = write_inputs(tmp_path / "in", [3], nested=False)
    job = unique("env")
    backend.submit("transform", build_transform(job_name=job, model_name=name, input_uri=input_uri,
                                                output_uri=f"file://{tmp_path}/out", instance_count=1,
                                                content_type="text/csv", accept="text/csv"))
    d = wait(backend, job)
    assert d["TransformJobStatus"] == "Completed", d.get("FailureReason")
    seen = [json.loads(e.message.split(" ", 1)[1]) for e in host_lines(backend, job)["algo-1"]
            if e.message.startswith("environ ")]
    assert seen == [{"keys": ["AWS_DEFAULT_REGION", "AWS_REGION"], "own": "own"}]
    assert outputs(tmp_path / "out") == {"part-00.csv.out": (tmp_path / "in" / "part-00.csv").read_bytes()}


@pytest.mark.slow
@pytest.mark.skipif(launcher.namespace_prefix() is None, reason="hosts cannot be namespaced here")
def test_a_network_isolated_models_code_reaches_nothing_while_its_data_is_still_staged(backend, tmp_path):
    name = unique("model")
    uri = model_archive(tmp_path / f"{name}.tar.gz")
    local_transform.create_model(backend, build_model(model_name=name, model_data=uri, role=ROLE,
                                                      image_uri=GENERIC_IMAGE, enable_network_isolation=True).request)
    input_uri = write_inputs(tmp_path / "in", [4], nested=False)
    job = unique("isolated")
    backend.submit("transform", build_transform(job_name=job, model_name=name, input_uri=input_uri,
                                                output_uri=f"file://{tmp_path}/out", instance_count=1,
                                                content_type="text/csv", accept="text/csv", split_type="Line"))
    d = wait(backend, job)
    assert d["TransformJobStatus"] == "Completed", d.get("FailureReason")
    assert np.allclose(np.loadtxt(io.BytesIO(outputs(tmp_path / "out")["part-00.csv.out"])),
                       expected(tmp_path / "in" / "part-00.csv"))
    assert any("reach nothing outside the job (EnableNetworkIsolation)" in e.message
               for e in host_lines(backend, job)["platform"])


@pytest.mark.slow
def test_poisoned_record_fails_the_job_naming_object_and_record(backend, tmp_path):
    data = tmp_path / "in"
    input_uri = write_inputs(data, [20, 20, 20], nested=False)
    poisoned = data / "part-01.csv"
    rows = poisoned.read_text().splitlines()
    rows[12] = "0.1,oops,0.3"
    poisoned.write_text("\n".join(rows) + "\n")
    model = make_model(backend, tmp_path)
    name = unique("poison")
    backend.submit("transform", build_transform(
        job_name=name, model_name=model, input_uri=input_uri, output_uri=f"file://{tmp_path}/out", instance_count=1,
        content_type="text/csv", accept="text/csv", split_type="Line", batch_strategy="MultiRecord",
        assemble_with="Line"))
    d = wait(backend, name)
    assert d["TransformJobStatus"] == "Failed"
    assert d["FailureReason"].startswith("AlgorithmError: ")
    assert f"file://{poisoned}: record 13 (line 13) failed: ValueError: a feature is not a number" in d["FailureReason"]
    assert not (tmp_path / "out" / "part-01.csv.out").exists()  # no partial output
    assert (tmp_path / "out" / "part-00.csv.out").exists()  # objects before it were complete


@pytest.mark.slow
def test_stop_ends_every_instance(backend, tmp_path):
    input_uri = write_inputs(tmp_path / "in", [5, 5, 5, 5], nested=False)
    model = make_model(backend, tmp_path, sleep=60)
    name = unique("stop")
    backend.submit("transform", build_transform(job_name=name, model_name=model, input_uri=input_uri,
                                                output_uri=f"file://{tmp_path}/out", instance_count=2,
                                                content_type="text/csv", split_type="Line"))
    deadline = time.time() + 60
    while time.time() < deadline:
        lines = host_lines(backend, name)
        if all(any("model_fn" in e.message for e in lines.get(h, [])) for h in ("algo-1", "algo-2")):
            break
        time.sleep(0.2)
    state = json.loads((backend.job_dir("transform", name) / "state.json").read_text())
    workers = list(state["host_pids"].values())
    assert len(workers) == 2 and all(pid_alive(p) for p in workers)
    backend.stop("transform", name)
    assert backend.describe("transform", name)["TransformJobStatus"] in ("Stopping", "Stopped")
    d = wait(backend, name)
    assert d["TransformJobStatus"] == "Stopped"
    assert not any(pid_alive(p) for p in workers)
    assert not list((tmp_path / "out").rglob("*.out")) if (tmp_path / "out").exists() else True


@pytest.mark.slow
def test_unrunnable_requests_are_refused_and_a_missing_model_fails_like_sagemaker(backend, tmp_path):
    input_uri = write_inputs(tmp_path / "in", [3], nested=False)
    request = build_transform(job_name=unique("rio"), model_name="nope", input_uri=input_uri,
                              output_uri=f"file://{tmp_path}/out", split_type="RecordIO")
    with pytest.raises(SpecError, match="SplitType"):
        backend.submit("transform", request)
    assert not backend.store.exists("transform", request["TransformJobName"])
    name = unique("nomodel")
    backend.submit("transform", build_transform(job_name=name, model_name="no-such-model", input_uri=input_uri,
                                                output_uri=f"file://{tmp_path}/out"))
    d = wait(backend, name)
    assert d["TransformJobStatus"] == "Failed"
    assert d["FailureReason"] == ('ValidationException: Could not find model '
                                  '"arn:aws:sagemaker:us-east-1:000000000000:model/no-such-model".')
    empty = unique("empty")
    (tmp_path / "nothing").mkdir()
    backend.submit("transform", build_transform(job_name=empty, model_name=make_model(backend, tmp_path),
                                                input_uri=f"file://{tmp_path}/nothing",
                                                output_uri=f"file://{tmp_path}/out"))
    assert "No S3 objects found" in wait(backend, empty)["FailureReason"]


def test_models_store(backend, tmp_path):
    name = unique("m")
    request = build_model(model_name=name, model_data=model_archive(tmp_path / "m.tar.gz"), role=ROLE,
                          image_uri=GENERIC_IMAGE).request
    arn = local_transform.create_model(backend, request)
    assert arn == f"arn:aws:sagemaker:us-east-1:000000000000:model/{name}"
    d = local_transform.describe_model(backend, name)
    assert d["ModelArn"] == arn and d["PrimaryContainer"] == request["PrimaryContainer"]
    assert d["ExecutionRoleArn"] == ROLE
    assert set(d) <= set(operation_model("DescribeModel").output_shape.members)
    with pytest.raises(BackendError, match="Cannot create already existing model") as e:
        local_transform.create_model(backend, request)
    assert e.value.code == "ValidationException"
    assert name in local_transform.list_models(backend)
    local_transform.delete_model(backend, name)
    with pytest.raises(BackendError, match="Could not find model"):
        local_transform.describe_model(backend, name)
    with pytest.raises(SpecError, match="multi-model"):
        local_transform.create_model(backend, {**request, "PrimaryContainer": {**request["PrimaryContainer"],
                                                                                "Mode": "MultiModel"}})


# -- the operator: three ways, completeness, re-runs -----------------------------------------------------------
def op(tmp_path, fan_out, out, **kw):
    args = dict(task_id=f"score_{fan_out}", fan_out=fan_out, input_uri=f"file://{tmp_path}/in",
                output_uri=f"file://{tmp_path}/{out}", model_data=f"file://{tmp_path}/model.tar.gz",
                image_uri=SKLEARN_IMAGE, instance_count=2, shards=3, content_type="text/csv", accept="text/csv",
                split_type="Line", max_payload_mb=1,
                poll_interval=0.3)
    args.update(kw)
    return SageMakerShardedBatchInferenceOperator(**args)


@pytest.fixture
def scoring(tmp_path, backend):
    write_inputs(tmp_path / "in", [40, 90, 15, 60, 120, 30, 75])
    model_archive(tmp_path / "model.tar.gz")
    return tmp_path


@pytest.mark.slow
def test_three_ways_give_identical_complete_outputs_and_a_rerun_processes_only_the_missing(scoring, backend):
    tmp_path = scoring
    run = f"run-{uuid.uuid4().hex}"
    results = {way: op(tmp_path, way, f"out-{way}").execute(context(run, f"score_{way}"))
               for way in ("transform", "processing", "jobs")}
    ref = outputs(tmp_path / "out-transform")
    assert len(ref) == 7
    for way, r in results.items():
        assert r["complete"] and r["objects"] == 7 and r["processed"] == 7 and r["records"] == 430, way
        assert outputs(tmp_path / f"out-{way}") == ref, f"{way} differs from transform"
        manifest = json.loads((tmp_path / f"out-{way}" / "_smdist" / "manifest.json").read_text())
        assert manifest["complete"] and {e["status"] for e in manifest["entries"]} == {"ok"}
        assert r["manifest_uri"] == f"file://{tmp_path}/out-{way}/_smdist/manifest.json"
        assert all(e["job"] for e in manifest["entries"])
    assert [j["kind"] for j in results["processing"]["jobs"]] == ["processing"]
    assert len(results["jobs"]["jobs"]) == 3 and all(j["status"] == "Completed" for j in results["jobs"]["jobs"])
    for rel, body in ref.items():
        assert np.allclose(np.loadtxt(io.BytesIO(body)), expected(tmp_path / "in" / rel[:-4]))

    # lose one output of each way: a re-run of the same task finds it and processes it alone
    victim = sorted(ref)[3]
    for way in ("transform", "processing", "jobs"):
        (tmp_path / f"out-{way}" / victim).unlink()
        again = op(tmp_path, way, f"out-{way}").execute(context(run, f"score_{way}"))
        assert again["complete"] and again["processed"] == 1 and again["objects"] == 7, way
        assert outputs(tmp_path / f"out-{way}") == ref
        job = again["jobs"][0]["job_name"]
        assert job.endswith("-g2") or job.endswith("-g2-s0"), job  # a new generation, not the completed job
        kind = "processing" if way == "processing" else "transform"
        d = backend.describe(kind, job)
        if kind == "transform":
            src = d["TransformInput"]["DataSource"]["S3DataSource"]
        else:
            src = next(i["S3Input"] for i in d["ProcessingInputs"] if i["InputName"] == "data")
        assert src["S3DataType"] == "ManifestFile"
        entries = json.loads(open(src["S3Uri"][len("file://"):]).read())
        assert entries == [{"prefix": f"file://{tmp_path}/in/"}, victim[:-4]]
    # nothing missing: no job at all
    done = op(tmp_path, "transform", "out-transform").execute(context(run, "score_transform"))
    assert done["complete"] and done["processed"] == 0 and done["jobs"] == []


@pytest.mark.slow
def test_mapped_shards_plan_run_and_merge_and_a_rerun_plans_only_the_missing(scoring, backend):
    tmp_path = scoring
    run = f"run-{uuid.uuid4().hex}"
    records = dict(content_type="text/csv", accept="text/csv", split_type="Line", max_payload_mb=1)
    plan = SageMakerBatchShardPlanOperator(task_id="plan", input_uri=f"file://{tmp_path}/in",
                                           output_uri=f"file://{tmp_path}/out", shards=3, **records)
    shards = plan.execute(context(run, "plan"))
    assert [s["objects"] for s in shards] and sum(s["objects"] for s in shards) == 7 and len(shards) == 3
    sizes = sorted(s["bytes"] for s in shards)
    assert sizes[-1] - sizes[0] <= max(p.stat().st_size for p in (tmp_path / "in").rglob("*.csv"))
    results = []
    for i, shard in enumerate(shards):
        r = op(tmp_path, "jobs", "out", task_id="shard", shard=shard).execute(context(run, "shard", map_index=i))
        assert r["complete"] and r["objects"] == shard["objects"] and r["shard"] == i
        results.append(r)
    assert len({r["jobs"][0]["job_name"] for r in results}) == 3
    merge = SageMakerBatchInferenceMergeOperator(task_id="merge", input_uri=f"file://{tmp_path}/in",
                                                 output_uri=f"file://{tmp_path}/out", shard_results=results, **records)
    summary = merge.execute(context(run, "merge"))
    assert summary["complete"] and summary["objects"] == 7 and summary["records"] == 430
    assert len(summary["jobs"]) == 3 and summary["processed"] == 7
    ref = outputs(tmp_path / "out")

    victim = sorted(ref)[0]
    (tmp_path / "out" / victim).unlink()
    with pytest.raises(AirflowException) as e:
        merge.execute(context(run, "merge"))
    assert "1 of 7 object(s) incomplete" in str(e.value) and f"{victim[:-4]}: no output" in str(e.value)
    assert not json.loads((tmp_path / "out" / "_smdist" / "manifest.json").read_text())["complete"]
    again = plan.execute(context(f"{run}-2", "plan"))
    assert len(again) == 1 and again[0]["objects"] == 1
    r = op(tmp_path, "jobs", "out", task_id="shard", shard=again[0]).execute(context(f"{run}-2", "shard", 0))
    assert r["processed"] == 1
    assert merge.execute(context(f"{run}-2", "merge"))["complete"]
    assert outputs(tmp_path / "out") == ref
    assert plan.execute(context(f"{run}-3", "plan")) == []


@pytest.mark.slow
def test_each_shard_job_is_retried_on_its_own(scoring, backend, request, monkeypatch):
    tmp_path = scoring
    # a file the model's code and the test share, as a real model would share state through S3: a namespaced
    # host sees no file of the worker (test_job_containment.py), so these jobs run in fallback hosts
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", "none")
    shared = Path(tempfile.mkdtemp(prefix="smdist-test-", dir="/var/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    marker = shared / "fail-once"
    marker.write_text("x")
    model_archive(tmp_path / "model.tar.gz", fail_once=str(marker))
    # a request that fails once is retried by the platform (ModelClientConfig.InvocationsMaxRetries, default 3)
    result = op(tmp_path, "jobs", "out-a", shards=3, instance_count=1, model_name=unique("retry-model")).execute(
        context(f"run-{uuid.uuid4().hex}", "score_jobs"))
    assert result["complete"] and not marker.exists()
    assert not any(j["job_name"].endswith("-r2") for j in result["jobs"])
    # without invocation retries the shard's job fails, and that shard alone runs again
    marker.write_text("x")
    result = op(tmp_path, "jobs", "out", shards=3, instance_count=1, model_name=unique("retry-model"),
                invocations_max_retries=0).execute(context(f"run-{uuid.uuid4().hex}", "score_jobs"))
    assert result["complete"] and result["objects"] == 7
    names = sorted(j["job_name"] for j in result["jobs"])
    retried = [n for n in names if n.endswith("-r2")]
    assert len(retried) == 1 and len(names) == 3, names  # only the shard that failed ran again
    first = retried[0][: -len("-r2")]
    assert backend.describe("transform", first)["TransformJobStatus"] == "Failed"
    assert "injected failure (once)" in backend.describe("transform", first)["FailureReason"]


@pytest.mark.slow
@pytest.mark.parametrize("fan_out", ["transform", "processing"])
def test_a_failed_job_fails_the_task_naming_the_object_and_what_is_missing(scoring, backend, fan_out):
    tmp_path = scoring
    poisoned = sorted((tmp_path / "in").glob("part-*.csv"))[1]
    rows = poisoned.read_text().splitlines()
    rows[4] = "1,2,x"
    poisoned.write_text("\n".join(rows) + "\n")
    with pytest.raises(AirflowException) as e:
        op(tmp_path, fan_out, "out", instance_count=1).execute(context(f"run-{uuid.uuid4().hex}"))
    text = str(e.value)
    assert "ended Failed" in text and "record 5 (line 5)" in text and poisoned.name in text
    assert f"{poisoned}: no output" in text
    manifest = json.loads((tmp_path / "out" / "_smdist" / "manifest.json").read_text())
    assert not manifest["complete"] and f"file://{poisoned}" in manifest["pending"]


def test_operator_argument_mistakes(scoring):
    with pytest.raises(SpecError, match="fan_out"):
        op(scoring, "threads", "out").execute(context("r"))
    with pytest.raises(SpecError, match="lies under the input prefix"):
        op(scoring, "transform", "in/scored").execute(context("r"))
    with pytest.raises(SpecError, match="no model"):
        op(scoring, "transform", "out", model_data=None).execute(context("r"))


@pytest.mark.slow
def test_a_retry_reattaches_to_the_running_job_and_a_deferred_wait_ends_in_the_same_check(scoring, backend):
    tmp_path = scoring
    model_archive(tmp_path / "model.tar.gz", sleep=0.5)
    run = f"run-{uuid.uuid4().hex}"
    started = op(tmp_path, "transform", "out", wait_for_completion=False).execute(context(run))
    name = started["jobs"][0]["job_name"]
    assert started["complete"] is None and started["jobs"][0]["status"] == "InProgress"
    retry = op(tmp_path, "transform", "out").execute(context(run))  # the next try of the same task instance
    assert retry["complete"] and [j["job_name"] for j in retry["jobs"]] == [name] and retry["processed"] == 7
    assert [j["TransformJobName"] for j in backend.list_jobs("transform", name_contains=name)] == [name]

    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.exceptions import TaskDeferred
    else:
        from airflow.exceptions import TaskDeferred
    deferring = op(tmp_path, "transform", "out-deferred", deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        deferring.execute(context(run, "score_deferred"))
    assert deferred.value.method_name == "execute_complete" and deferred.value.trigger.kind == "transform"
    job = deferred.value.trigger.job_name
    assert wait(backend, job)["TransformJobStatus"] == "Completed"
    summary = deferring.execute_complete(context(run, "score_deferred"), {"job_name": job, "status": "success"})
    assert summary["complete"] and summary["processed"] == 7 and summary["jobs"][0]["job_name"] == job
    assert outputs(tmp_path / "out-deferred") == outputs(tmp_path / "out")


@pytest.mark.slow
def test_a_manifest_that_cannot_be_written_does_not_hide_why_the_job_failed(scoring, backend):
    """A storage fault while writing the manifest (its key is taken by a directory, so the write fails) is
    reported beside the failed job's reason, not instead of it."""
    tmp_path = scoring
    poisoned = sorted((tmp_path / "in").glob("part-*.csv"))[1]
    rows = poisoned.read_text().splitlines()
    rows[4] = "1,2,x"
    poisoned.write_text("\n".join(rows) + "\n")
    taken = tmp_path / "out" / "_smdist" / "manifest.json"
    (taken / "x").mkdir(parents=True)
    with pytest.raises(AirflowException) as e:
        op(tmp_path, "transform", "out", instance_count=1).execute(context(f"run-{uuid.uuid4().hex}"))
    text = str(e.value)
    assert "ended Failed" in text and "record 5 (line 5)" in text and poisoned.name in text  # the job's reason
    assert f"{poisoned}: no output" in text  # what is missing
    assert f"The manifest file://{taken} could not be written: IsADirectoryError" in text  # and the fault
    assert not list((tmp_path / "out").rglob("*.smdist-partial"))


@pytest.mark.slow
def test_a_manifest_that_cannot_be_written_fails_a_complete_run_naming_it(scoring, backend):
    tmp_path = scoring
    taken = tmp_path / "out" / "_smdist" / "manifest.json"
    (taken / "x").mkdir(parents=True)
    with pytest.raises(AirflowException) as e:
        op(tmp_path, "transform", "out", instance_count=1).execute(context(f"run-{uuid.uuid4().hex}"))
    assert f"The manifest file://{taken} could not be written: IsADirectoryError" in str(e.value)
    assert len(outputs(tmp_path / "out")) == 7  # the outputs are there; only the manifest is missing
    merge = SageMakerBatchInferenceMergeOperator(task_id="merge", input_uri=f"file://{tmp_path}/in",
                                                 output_uri=f"file://{tmp_path}/out", content_type="text/csv",
                                                 accept="text/csv", split_type="Line", max_payload_mb=1)
    with pytest.raises(AirflowException, match="The manifest .* could not be written: IsADirectoryError"):
        merge.execute(context(f"run-{uuid.uuid4().hex}", "merge"))


@pytest.mark.slow
@pytest.mark.parametrize("fan_out", ["transform", "processing", "jobs"])
def test_outputs_of_a_changed_input_or_another_model_are_stale_and_run_again(scoring, backend, fan_out):
    tmp_path = scoring
    run = f"run-{uuid.uuid4().hex}"
    out = tmp_path / "out"
    first = op(tmp_path, fan_out, "out").execute(context(run, f"score_{fan_out}"))
    assert first["complete"] and first["processed"] == 7
    manifest = json.loads((out / "_smdist" / "manifest.json").read_text())
    assert all(e["model"] and e["made_from"] for e in manifest["entries"])  # provenance of every output

    # one input changes (same number of records): only its output is stale, and only it runs again
    changed = sorted((tmp_path / "in").glob("part-*.csv"))[2]
    rows = changed.read_text().splitlines()
    changed.write_text("\n".join(["0.25,0.5,0.75"] * len(rows)) + "\n")
    again = op(tmp_path, fan_out, "out").execute(context(run, f"score_{fan_out}"))
    assert again["complete"] and again["processed"] == 1
    rel = str(changed.relative_to(tmp_path / "in")) + ".out"
    assert np.allclose(np.loadtxt(out / rel), expected(changed))

    # the model's artifact is replaced (same URI, same model name): every output is stale
    model_archive(tmp_path / "model.tar.gz", w=[1.0, 1.0, 1.0])
    third = op(tmp_path, fan_out, "out").execute(context(run, f"score_{fan_out}"))
    assert third["complete"] and third["processed"] == 7
    for path in (tmp_path / "in").rglob("*.csv"):
        got = np.loadtxt(out / (str(path.relative_to(tmp_path / "in")) + ".out"))
        assert np.allclose(got, np.atleast_2d(np.loadtxt(path, delimiter=",")).sum(axis=1)), path
    # and nothing changed since: nothing runs
    assert op(tmp_path, fan_out, "out").execute(context(run, f"score_{fan_out}"))["processed"] == 0


@pytest.mark.slow
def test_the_taskgroup_form_runs_again_what_another_model_made(scoring, backend):
    """The planner and the merge step of the sharded_batch_inference TaskGroup are given the shards' model
    (model=): when the model's artifact changes, the planner plans every object again and the merge step
    does not call the old outputs current."""
    tmp_path = scoring
    records = dict(content_type="text/csv", accept="text/csv", split_type="Line", max_payload_mb=1)
    model = dict(model_data=f"file://{tmp_path}/model.tar.gz", image_uri=SKLEARN_IMAGE)
    steps = dict(input_uri=f"file://{tmp_path}/in", output_uri=f"file://{tmp_path}/out", model=model, **records)

    def plan(run):
        return SageMakerBatchShardPlanOperator(task_id="plan", shards=3, **steps).execute(context(run, "plan"))

    def shards_then_merge(run, shards):
        results = [op(tmp_path, "jobs", "out", task_id="shard", shard=s).execute(context(run, "shard", i))
                   for i, s in enumerate(shards)]
        return SageMakerBatchInferenceMergeOperator(task_id="merge", shard_results=results, **steps).execute(
            context(run, "merge"))

    run = f"run-{uuid.uuid4().hex}"
    first = plan(run)
    assert sum(s["objects"] for s in first) == 7
    assert shards_then_merge(run, first)["complete"]
    assert plan(f"{run}-2") == []  # same model, same inputs: nothing to do

    model_archive(tmp_path / "model.tar.gz", w=[1.0, 1.0, 1.0])  # a new artifact under the same URI
    again = plan(f"{run}-3")
    assert sum(s["objects"] for s in again) == 7  # every output was made by the old model
    with pytest.raises(AirflowException, match="7 of 7 object.*incomplete") as stale:
        SageMakerBatchInferenceMergeOperator(task_id="merge", **steps).execute(context(f"{run}-3", "merge"))
    assert "made by another model" in str(stale.value)
    assert shards_then_merge(f"{run}-3", again)["complete"]
    for path in (tmp_path / "in").rglob("*.csv"):
        got = np.loadtxt(tmp_path / "out" / (str(path.relative_to(tmp_path / "in")) + ".out"))
        assert np.allclose(got, np.atleast_2d(np.loadtxt(path, delimiter=",")).sum(axis=1)), path


@pytest.mark.slow
def test_outputs_a_sensor_waited_for_are_recorded_with_the_model_that_made_them(scoring, backend):
    """An operator that does not wait (wait_for_completion=False) records, before its job starts, the model
    and the inputs' versions; the sensor that sees the job complete writes them into the manifest, so a
    later run knows what made those outputs."""
    from airflow_smdist.sensors.transform import SageMakerShardedBatchInferenceSensor

    tmp_path = scoring
    run = f"run-{uuid.uuid4().hex}"
    started = op(tmp_path, "transform", "out", wait_for_completion=False).execute(context(run))
    name = started["jobs"][0]["job_name"]
    sensor = SageMakerShardedBatchInferenceSensor(
        task_id="wait", job_names=[name], input_uri=f"file://{tmp_path}/in", output_uri=f"file://{tmp_path}/out",
        record_settings={"content_type": "text/csv", "accept": "text/csv", "split_type": "Line",
                         "batch_strategy": "MultiRecord", "assemble_with": "Line"})
    wait(backend, name)
    done = sensor.poke({})
    assert done.is_done and done.xcom_value["complete"]
    entries = json.loads((tmp_path / "out" / "_smdist" / "manifest.json").read_text())["entries"]
    assert len(entries) == 7 and all(e["model"] and e["made_from"] for e in entries)
    # the same model later: nothing runs; another model: everything runs again
    assert op(tmp_path, "transform", "out").execute(context(f"{run}-2"))["processed"] == 0
    model_archive(tmp_path / "model.tar.gz", w=[1.0, 1.0, 1.0])
    assert op(tmp_path, "transform", "out").execute(context(f"{run}-3"))["processed"] == 7


@pytest.mark.slow
def test_an_output_with_no_record_is_stale_when_its_input_was_written_after_it(scoring, backend):
    """Outputs nothing recorded (another tool's, or a manifest lost) count as current unless their input is
    newer than they are, as make decides."""
    tmp_path = scoring
    run = f"run-{uuid.uuid4().hex}"
    assert op(tmp_path, "transform", "out").execute(context(run))["processed"] == 7
    (tmp_path / "out" / "_smdist" / "manifest.json").unlink()  # no record of what made the outputs
    assert op(tmp_path, "transform", "out").execute(context(f"{run}-2"))["processed"] == 0
    (tmp_path / "out" / "_smdist" / "manifest.json").unlink()
    touched = sorted((tmp_path / "in").glob("part-*.csv"))[3]
    later = (tmp_path / "out" / (str(touched.relative_to(tmp_path / "in")) + ".out")).stat().st_mtime + 5
    os.utime(touched, (later, later))
    again = op(tmp_path, "transform", "out").execute(context(f"{run}-3"))
    assert again["processed"] == 1 and again["complete"]


@pytest.mark.slow
def test_inference_code_from_a_source_dir_is_part_of_the_model_that_made_an_output(scoring, backend):
    """With entry_point + source_dir each run creates a new model whose code lives under its own name; the
    same code in a new run is the same model (nothing runs), edited code is another (everything runs)."""
    tmp_path = scoring
    model_archive(tmp_path / "model.tar.gz", code=None)
    code = tmp_path / "code"
    code.mkdir()
    (code / "inference.py").write_text(LINEAR_CODE)
    run = f"run-{uuid.uuid4().hex}"
    scored = dict(entry_point="inference.py", source_dir=str(code), instance_count=1)
    assert op(tmp_path, "transform", "out", **scored).execute(context(run))["processed"] == 7
    assert op(tmp_path, "transform", "out", **scored).execute(context(f"{run}-2"))["processed"] == 0
    (code / "inference.py").write_text(LINEAR_CODE.replace('cfg["w"]', 'cfg["w"]) * 2 + (0'))
    third = op(tmp_path, "transform", "out", **scored).execute(context(f"{run}-3"))
    assert third["processed"] == 7 and third["complete"]
    path = sorted((tmp_path / "in").glob("part-*.csv"))[0]
    got = np.loadtxt(tmp_path / "out" / (str(path.relative_to(tmp_path / "in")) + ".out"))
    assert np.allclose(got, 2 * expected(path))


REQUIREMENTS_CODE = textwrap.dedent("""
    import humanize  # only the model's code/requirements.txt brings it

    def model_fn(model_dir):
        print("humanize " + humanize.__version__ + " from " + humanize.__file__, flush=True)
        return None

    def transform_fn(model, body, content_type, accept):
        return body, accept
""")


@pytest.mark.slow
def test_the_models_code_requirements_are_installed_before_it_serves(backend, tmp_path):
    """The serving container installs code/requirements.txt before its model server starts (sagemaker-inference's
    model_server): the model's inference.py imports what only its requirements bring; a requirement that does not
    exist fails the job with pip's reason, as the container fails to start."""
    def model(code_requirements: str) -> str:
        name = unique("model")
        path = tmp_path / f"{name}.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for member, data in (("weights.json", b"{}"), ("code/inference.py", REQUIREMENTS_CODE.encode()),
                                 ("code/requirements.txt", code_requirements.encode())):
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        local_transform.create_model(backend, build_model(model_name=name, model_data=f"file://{path}", role=ROLE,
                                                          image_uri=GENERIC_IMAGE).request)
        return name

    input_uri = write_inputs(tmp_path / "in", [3], nested=False)
    job = unique("reqs")
    backend.submit("transform", build_transform(job_name=job, model_name=model("humanize\n"), input_uri=input_uri,
                                                output_uri=f"file://{tmp_path}/out", instance_count=1,
                                                content_type="text/csv", accept="text/csv"))
    d = wait(backend, job)
    lines = host_lines(backend, job)
    assert d["TransformJobStatus"] == "Completed", (d.get("FailureReason"), [e.message for e in lines["platform"]])
    loaded = [e.message for e in lines["algo-1"] if e.message.startswith("humanize ")]
    assert len(loaded) == 1 and f"{backend.job_dir('transform', job)}/layer/humanize/" in loaded[0], loaded
    assert outputs(tmp_path / "out") == {"part-00.csv.out": (tmp_path / "in" / "part-00.csv").read_bytes()}

    bad = unique("reqs")
    backend.submit("transform", build_transform(job_name=bad, model_name=model("no-such-package-smdist==1.0\n"),
                                                input_uri=input_uri, output_uri=f"file://{tmp_path}/bad",
                                                instance_count=1, content_type="text/csv", accept="text/csv"))
    d = wait(backend, bad)
    assert d["TransformJobStatus"] == "Failed"
    assert "requirements did not install" in d["FailureReason"] and "no-such-package-smdist" in d["FailureReason"]
