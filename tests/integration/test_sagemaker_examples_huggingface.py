"""Hugging Face inference in local batch transform jobs of the huggingface-pytorch-inference image, as its
serving container (the Hugging Face inference toolkit, sagemaker-huggingface-inference-toolkit 2.6.0) runs a
model: a public inference script, unmodified (tests/fixtures/sagemaker_examples/README.md: source, commit,
license, md5), whose ``model_fn`` / ``input_fn`` / ``predict_fn`` replace the toolkit's and whose output goes
through the toolkit's default ``output_fn``; and a model without code, served by the toolkit's defaults alone
(``HF_TASK``: a transformers pipeline over the model directory, ``{"inputs", "parameters"}`` requests, compact
JSON answers).

The models are tiny and built from a config in the job's runtime (no Hub: the machine reaches package indexes
only), saved with their tokenizer into model.tar.gz; the test computes what the job must answer in that same
runtime, from a fresh load. The huggingface-pytorch-inference runtime is heavy (transformers, diffusers, ...:
about 2 GB): built only with ``SMDIST_TEST_IMAGE_RUNTIMES=all`` or ``=huggingface-pytorch-inference``. The toolkit's
request and answer handling around a model is also checked without it, in the worker's interpreter
(``SMDIST_LOCAL_RUNTIME=worker``), with a stand-in pipeline from the model's ``model_fn``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import textwrap
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher, runtimes
from airflow_smdist.backends.local.job import transform as local_transform
from airflow_smdist.specs.transform import build_model, build_transform
from jobs import wait

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "fixtures", "sagemaker_examples", "hf_seq2seq_inference")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
HEAVY_ENV = "SMDIST_TEST_IMAGE_RUNTIMES"
FAMILY = "huggingface-pytorch-inference"
IMAGE = ("763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-inference:"
         "2.6.0-transformers5.5.3-cpu-py312-ubuntu22.04")

#: run in the image's runtime: a tiny model of ``kind`` built from its config (random weights, seed 0) with a
#: WordPiece tokenizer of a few words, saved into ``<out>/model``; then what serving it must answer for each
#: request on stdin, from a fresh load: the script's own functions (seq2seq), or the pipeline of the task (cls)
MAKE_MODEL = textwrap.dedent('''
    import importlib, json, os, sys
    import torch
    from transformers import (BartConfig, BartForConditionalGeneration, BertConfig, BertForSequenceClassification,
                              BertTokenizer, pipeline)

    kind, out, code_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    requests = [json.loads(line) for line in sys.stdin if line.strip()]
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "model", "runs", "on", "two", "hosts", "a",
             "small", "summary", "of", "reviews", "good", "bad", "great", "service", "food", "was", "slow", "fast"]
    model_dir = os.path.join(out, "model")
    os.makedirs(model_dir)
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("\\n".join(words) + "\\n")
    BertTokenizer(os.path.join(out, "vocab.txt"), model_max_length=32).save_pretrained(model_dir)
    torch.manual_seed(0)
    if kind == "seq2seq":
        model = BartForConditionalGeneration(BartConfig(
            vocab_size=len(words), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
            pad_token_id=0, bos_token_id=2, eos_token_id=3, decoder_start_token_id=3, forced_eos_token_id=None))
        model.generation_config.max_length = 10
        model.generation_config.suppress_tokens = [0, 1, 2, 3, 4]  # words only: a random model says something
    else:
        model = BertForSequenceClassification(BertConfig(
            vocab_size=len(words), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=64, num_labels=2))
    model.save_pretrained(model_dir)
    if kind == "seq2seq":
        sys.path.insert(0, code_dir)
        script = importlib.import_module("inference")
        loaded = script.model_fn(model_dir)
        answers = [script.predict_fn(script.input_fn(json.dumps(r), "application/json"), loaded) for r in requests]
    else:
        pipe = pipeline(task="text-classification", model=model_dir, tokenizer=model_dir, device=-1)
        answers = [pipe(r["inputs"], **r["parameters"]) if "parameters" in r else pipe(r["inputs"]) for r in requests]
    print("ANSWERS " + json.dumps(answers))
''')


def _wanted(family: str) -> bool:
    wanted = {f.strip() for f in os.environ.get(HEAVY_ENV, "").split(",") if f.strip()}
    return "all" in wanted or family in wanted


def _toolkit_json(content) -> str:
    """The toolkit's ``decoder_encoder.encode_json``: compact, non-ASCII kept."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))


@pytest.fixture(scope="module")
def runtime_python(tmp_path_factory):
    """The image's runtime (built once, shared with the jobs through the runtime cache)."""
    if not _wanted(FAMILY):
        pytest.skip(f"a heavy runtime: run with {HEAVY_ENV}=all or ={FAMILY}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SMDIST_LOCAL_RUNTIME", "image")
        rt = runtimes.resolve(IMAGE, local_root=tmp_path_factory.mktemp("hf-root"),
                              field_name="PrimaryContainer.Image")
    return rt.python


def _model(runtime_python: str, tmp_path, kind: str, requests: list[dict], code: str | None = None):
    """(model.tar.gz URI, the answers the job must give): the model built in the runtime, code/ beside it."""
    out = tmp_path / kind
    out.mkdir()
    proc = subprocess.run([runtime_python, "-c", MAKE_MODEL, kind, str(out), code or str(out)], check=False,
                          input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True, text=True,
                          timeout=600, env={"PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1",
                                            "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("ANSWERS "))[8:])
    if code:
        shutil.copytree(code, out / "model" / "code")
    archive = tmp_path / f"{kind}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in sorted(os.listdir(out / "model")):
            tar.add(out / "model" / name, arcname=name)
    return f"file://{archive}", answers


def _transform(backend: LocalBackend, tmp_path, model_uri: str, requests: list[dict], environment=None) -> str:
    """A batch transform job of JSON lines (one request a line, answers assembled by line); its name."""
    name = f"hf-{uuid.uuid4().hex[:8]}"
    model = local_transform.create_model(backend, build_model(
        model_name=name, model_data=model_uri, role=ROLE, image_uri=IMAGE, environment=environment,
        enable_network_isolation=True).request)
    assert model
    data = tmp_path / f"in-{name}"
    data.mkdir()
    (data / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    backend.submit("transform", build_transform(
        job_name=name, model_name=name, input_uri=f"file://{data}", output_uri=f"file://{tmp_path}/out-{name}",
        instance_count=1, instance_type="ml.m5.xlarge", content_type="application/json", accept="application/json",
        split_type="Line", assemble_with="Line"))
    return name


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(launcher.namespace_prefix() is None, reason="the model's paths are /opt/ml paths: a host "
                    f"in its own mount namespace ({launcher.namespaces_available()})")
def test_public_seq2seq_inference_script_and_hf_task_defaults_in_hugging_face_transform_jobs(
        runtime_python, tmp_path, monkeypatch):
    """Three jobs at once. (1) AWS's summarization inference.py (model_fn: AutoTokenizer + AutoModelForSeq2SeqLM
    from the model directory; input_fn: json.loads; predict_fn: generate, once per ``parameters_list`` entry),
    unmodified in the model's code/: every line's answer is the script's prediction in the toolkit's default
    output_fn (compact JSON). (2) No code, ``HF_TASK=text-classification``: the toolkit's defaults load the
    pipeline from the model directory and call it with the request's ``inputs`` and ``parameters``. (3) The same
    model without ``HF_TASK``: the task comes from config.json's architecture (``...ForSequenceClassification``)."""
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    backend = LocalBackend(tmp_path / "jobs")
    summarize = [{"inputs": ["the food was good", "service was slow"]},
                 {"inputs": ["a small summary of reviews"],
                  "parameters_list": [{"num_beams": 2, "max_new_tokens": 4}, {"max_new_tokens": 3}]}]
    classify = [{"inputs": "the food was good"},
                {"inputs": ["service was slow", "great food"], "parameters": {"top_k": 2}}]
    s2s_uri, s2s_answers = _model(runtime_python, tmp_path, "seq2seq", summarize, code=SCRIPT)
    cls_uri, cls_answers = _model(runtime_python, tmp_path, "cls", classify)
    s2s = _transform(backend, tmp_path, s2s_uri, summarize)
    cls = _transform(backend, tmp_path, cls_uri, classify, environment={"HF_TASK": "text-classification"})
    inferred = _transform(backend, tmp_path, cls_uri, classify)  # no HF_TASK: config.json's architecture says it
    for name, answers in ((s2s, s2s_answers), (cls, cls_answers), (inferred, cls_answers)):
        d = wait(backend, "transform", name, timeout=900)
        events, _ = backend.log_events("transform", name)
        lines = [e.message for e in events]
        assert d["TransformJobStatus"] == "Completed", (d.get("FailureReason"), lines[-30:])
        out = (tmp_path / f"out-{name}" / "requests.jsonl.out").read_text(encoding="utf-8")
        assert out == "".join(_toolkit_json(a) + "\n" for a in answers), (out, answers)
        assert any(m.startswith("Transforming on 1 instance(s) with the huggingface inference defaults")
                   for m in lines), lines
    # a summary per text; per parameters_list entry, a list of them; words, not nothing
    texts = s2s_answers[0] + [t for per_entry in s2s_answers[1] for t in per_entry]
    assert len(s2s_answers[0]) == 2 and len(s2s_answers[1]) == 2 and all(t.strip() for t in texts), s2s_answers
    assert {r["label"] for r in cls_answers[0]} <= {"LABEL_0", "LABEL_1"} and len(cls_answers[1][0]) == 2


#: a model's code/inference.py with only a model_fn: a stand-in for a pipeline (no transformers in the worker)
STAND_IN_PIPELINE = textwrap.dedent('''
    import numpy as np

    def model_fn(model_dir):
        def pipe(inputs, **parameters):
            texts = inputs if isinstance(inputs, list) else [inputs]
            return [{"label": "LABEL_1", "score": np.float32(0.75), "text": t, "café": parameters.get("top_k")}
                    for t in texts]
        return pipe
''')


@pytest.mark.slow
def test_hugging_face_defaults_decode_requests_pass_parameters_and_answer_compact_json(tmp_path, monkeypatch):
    """Without the heavy runtime: a Hugging Face image's transform job whose model_fn returns a stand-in
    pipeline gets the toolkit's input_fn (JSON as a dict), predict_fn (``inputs`` and ``parameters``) and
    output_fn (compact JSON, numpy floats as numbers, non-ASCII kept); a model with neither code, ``HF_TASK``
    nor config.json fails with the toolkit's words."""
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "worker")
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    backend = LocalBackend(tmp_path / "jobs")
    (tmp_path / "model" / "code").mkdir(parents=True)
    (tmp_path / "model" / "code" / "inference.py").write_text(STAND_IN_PIPELINE)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "weights.bin").write_bytes(b"")
    uris = {}
    for kind in ("model", "empty"):
        with tarfile.open(tmp_path / f"{kind}.tar.gz", "w:gz") as tar:
            for name in os.listdir(tmp_path / kind):
                tar.add(tmp_path / kind / name, arcname=name)
        uris[kind] = f"file://{tmp_path}/{kind}.tar.gz"
    requests = [{"inputs": "good food"}, {"inputs": ["slow", "fast"], "parameters": {"top_k": 2}}]
    ok = _transform(backend, tmp_path, uris["model"], requests)
    bare = _transform(backend, tmp_path, uris["empty"], requests)
    d = wait(backend, "transform", ok, timeout=300)
    assert d["TransformJobStatus"] == "Completed", d.get("FailureReason")
    out = (tmp_path / f"out-{ok}" / "requests.jsonl.out").read_text(encoding="utf-8")
    assert out == ('[{"label":"LABEL_1","score":0.75,"text":"good food","café":null}]\n'
                   '[{"label":"LABEL_1","score":0.75,"text":"slow","café":2},'
                   '{"label":"LABEL_1","score":0.75,"text":"fast","café":2}]\n'), out
    d = wait(backend, "transform", bare, timeout=300)
    assert d["TransformJobStatus"] == "Failed"
    assert "You need to define one of the following" in d["FailureReason"], d["FailureReason"]
    assert "as env 'HF_TASK'" in d["FailureReason"], d["FailureReason"]
