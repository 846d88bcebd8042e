"""Public SageMaker scripts, unmodified (tests/fixtures/sagemaker_examples/README.md: source, commit, license,
md5), run as a DAG runs them: the training operator, a local job of the image each was written for.

The md5 check runs everywhere. The Hugging Face job needs the huggingface-pytorch-training runtime (transformers,
datasets, accelerate, ...: gigabytes, see benchmarks/results.md): built only with
``SMDIST_TEST_IMAGE_RUNTIMES=all`` or ``=huggingface-pytorch-training``, as test_image_manifests.py does. The
PyTorch toolkit's mnist.py needs a torchvision that imports beside the runtime's torch, so a torch from the indexes
(``SMDIST_LOCAL_TORCH``: ``image`` unless set; on this project's machines ``2.14.1``, which with its torchvision
0.29.1 lies on disk): ``=pytorch-training``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tarfile
import uuid
from types import SimpleNamespace

import pytest

from airflow_smdist.backends.local.job import launcher

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "fixtures", "sagemaker_examples")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
HEAVY_ENV = "SMDIST_TEST_IMAGE_RUNTIMES"
#: the scikit-learn 1.2-1 image's own scikit-learn has no wheel for Python >= 3.12 (the runtime falls back to 1.3)
SKLEARN_1_2 = pytest.mark.skipif(sys.version_info >= (3, 12), reason="no scikit-learn 1.2 wheel for this Python")


def _listed() -> dict[str, str]:
    """file -> md5, from the README's table."""
    with open(os.path.join(EXAMPLES, "README.md"), encoding="utf-8") as f:
        rows = [ln for ln in f if ln.startswith("| `")]
    out = {}
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        out[cells[0].strip("`")] = cells[-1].strip("`")
    return out


def test_every_public_script_is_listed_and_unmodified():
    """Each script under sagemaker_examples/ has a row in the README, and its bytes are the fetched ones."""
    listed = _listed()
    on_disk = {os.path.relpath(os.path.join(d, f), EXAMPLES) for d, _, fs in os.walk(EXAMPLES) for f in fs
               if f != "README.md" and "__pycache__" not in d}
    assert on_disk == set(listed), (on_disk, listed)
    for rel, md5 in listed.items():
        assert re.fullmatch(r"[0-9a-f]{32}", md5), (rel, md5)
        with open(os.path.join(EXAMPLES, rel), "rb") as f:
            assert hashlib.md5(f.read()).hexdigest() == md5, f"{rel} was changed: fetch a new version instead"


def _wanted(family: str) -> bool:
    wanted = {f.strip() for f in os.environ.get(HEAVY_ENV, "").split(",") if f.strip()}
    return "all" in wanted or family in wanted


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet (every byte a printable character), so a vocabulary of the 256 bytes covers
    any text."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def _byte_level_tokenizer(path) -> None:
    """A GPT-2 tokenizer written as files (vocab.json of the 256 bytes, no merges): what
    ``AutoTokenizer.from_pretrained(dir)`` loads without the Hub."""
    path.mkdir()
    vocab = {ch: i for i, ch in enumerate(_bytes_to_unicode().values())}
    vocab["<|endoftext|>"] = len(vocab)
    (path / "vocab.json").write_text(json.dumps(vocab))
    (path / "merges.txt").write_text("#version: 0.2\n")
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer",
                                                            "model_max_length": 64}))


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(launcher.namespace_prefix() is None, reason="the script's paths are /opt/ml paths: a host "
                    f"in its own mount namespace ({launcher.namespaces_available()})")
def test_hugging_face_run_clm_trains_a_model_built_from_its_config_in_a_hugging_face_job(tmp_path, monkeypatch):
    """AWS's copy of Hugging Face's run_clm.py (Trainer), unmodified, in a huggingface-pytorch-training job: the
    model comes from ``--model_type gpt2 --config_overrides`` (AutoModelForCausalLM.from_config, no weights), the
    tokenizer and the text from the job's channels, no Hub (HF_HUB_OFFLINE=1 as in a network-isolated job); it
    trains, evaluates (perplexity) and saves the model SageMaker uploads."""
    if not _wanted("huggingface-pytorch-training"):
        pytest.skip(f"a heavy runtime: run with {HEAVY_ENV}=all or =huggingface-pytorch-training")
    from airflow_smdist.backends.local import LocalBackend
    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    _byte_level_tokenizer(tmp_path / "tokenizer")
    words = ["sagemaker", "airflow", "trains", "a", "small", "model", "on", "two", "hosts", "today"]
    for split, lines in (("train", 300), ("validation", 40)):
        (tmp_path / split).mkdir()
        (tmp_path / split / f"{split}.txt").write_text(
            "".join(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(8)) + "\n" for i in range(lines)))
    source = os.path.join(EXAMPLES, "hf_run_clm")
    op = SageMakerDistributedTrainingOperator(
        task_id="clm", entry_point="run_clm.py", source_dir=source, framework="huggingface",
        framework_version="4.49.0", base_framework_version="pytorch2.5.1", py_version="py311",
        instance_type="ml.g5.xlarge", instance_count=1, role=ROLE, output_path=f"file://{tmp_path}/out",
        inputs={"train": f"file://{tmp_path}/train", "validation": f"file://{tmp_path}/validation",
                "tokenizer": f"file://{tmp_path}/tokenizer"},
        environment={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        hyperparameters={
            "model_type": "gpt2", "config_overrides": "n_embd=32,n_layer=2,n_head=2,n_positions=64",
            "tokenizer_name": "/opt/ml/input/data/tokenizer",
            "train_file": "/opt/ml/input/data/train/train.txt",
            "validation_file": "/opt/ml/input/data/validation/validation.txt",
            "block_size": 32, "do_train": True, "do_eval": True, "max_steps": 20, "learning_rate": 0.005,
            "per_device_train_batch_size": 8, "per_device_eval_batch_size": 8, "save_strategy": "no",
            "logging_steps": 5, "output_dir": "/opt/ml/model", "report_to": "none"},
        poll_interval=1)
    ti = SimpleNamespace(dag_id="dag", task_id="clm", map_index=-1, try_number=1)
    result = op.execute({"ti": ti, "run_id": f"run-{uuid.uuid4().hex}"})
    backend = LocalBackend(tmp_path / "jobs")
    lines = [e.message for e in backend.log_events("training", result["job_name"])[0]]
    assert result["status"] == "Completed", (result, lines[-40:])
    assert any(m.endswith("You are instantiating a new config instance from scratch.") for m in lines), lines[-40:]
    assert not any("huggingface.co" in m for m in lines), [m for m in lines if "huggingface.co" in m]
    assert "***** train metrics *****" in lines and "***** eval metrics *****" in lines, lines[-40:]
    perplexity = [float(m.split("=")[-1]) for m in lines if re.match(r"^\s*perplexity\s*=", m)]
    assert perplexity and perplexity[0] < 257, lines[-30:]  # below a uniform guess over the 257 tokens
    with tarfile.open(result["model_artifacts"][len("file://"):]) as tar:
        names = set(tar.getnames())
    assert {"config.json", "model.safetensors", "train_results.json", "eval_results.json"} <= names, names


def _mnist_raw(root, per_split: dict[str, int]) -> None:
    """MNIST's raw files (idx format, as torchvision's ``datasets.MNIST`` reads them from ``root/MNIST/raw``) of
    a learnable synthetic digit set: digit k is a bright 6x6 square at its own place, over noise."""
    import random
    import struct

    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = random.Random(7)
    for split, n in per_split.items():
        labels = [rng.randrange(10) for _ in range(n)]
        pixels = bytearray()
        for k in labels:
            img = [rng.randrange(60) for _ in range(28 * 28)]
            top, left = 2 + (k // 5) * 14, 1 + (k % 5) * 5
            for r in range(top, top + 6):
                for c in range(left, left + 6):
                    img[r * 28 + c] = 255
            pixels += bytes(img)
        (raw / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + bytes(pixels))
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + bytes(labels))


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(launcher.namespace_prefix() is None, reason="two hosts with their own names and /opt/ml "
                    f"({launcher.namespaces_available()})")
def test_pytorch_toolkit_mnist_imports_sagemaker_training_and_torchvision_and_trains_on_two_hosts(
        tmp_path, monkeypatch):
    """The PyTorch training toolkit's own mnist.py, unmodified, in a pytorch-training job on 2 hosts: it imports
    ``sagemaker_training.environment`` and ``torchvision`` (the runtime's companion paired with its torch), joins
    one gloo process group (rank = host index), averages gradients by hand, learns the digits and saves the
    model SageMaker uploads."""
    if not _wanted("pytorch-training"):
        pytest.skip(f"a heavy runtime: run with {HEAVY_ENV}=all or =pytorch-training (and SMDIST_LOCAL_TORCH)")
    from airflow_smdist.backends.local import LocalBackend
    from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator

    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    monkeypatch.setenv("SMDIST_LOCAL_TORCH", os.environ.get("SMDIST_LOCAL_TORCH") or "image")
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    _mnist_raw(tmp_path / "data", {"train": 1200, "t10k": 200})
    op = SageMakerDistributedTrainingOperator(
        task_id="mnist", entry_point="mnist.py", source_dir=os.path.join(EXAMPLES, "pytorch_mnist"),
        framework="pytorch", framework_version="2.5.1", py_version="py311", instance_type="ml.m5.xlarge",
        instance_count=2, role=ROLE, output_path=f"file://{tmp_path}/out",
        inputs={"training": f"file://{tmp_path}/data"},
        hyperparameters={"backend": "gloo", "epochs": 3, "lr": 0.05, "log-interval": 5}, poll_interval=1)
    ti = SimpleNamespace(dag_id="dag", task_id="mnist", map_index=-1, try_number=1)
    result = op.execute({"ti": ti, "run_id": f"run-{uuid.uuid4().hex}"})
    backend = LocalBackend(tmp_path / "jobs")
    events = backend.log_events("training", result["job_name"])[0]
    lines = [e.message for e in events]
    assert result["status"] == "Completed", (result, lines[-40:])
    runtime = next(m for m in lines if m.startswith("runtime: pytorch-training"))
    assert "torchvision " in runtime, runtime  # its version, in the runtime line
    assert not any(m.startswith("left out: torchvision") for m in lines)
    for host in ("algo-1", "algo-2"):
        said = [e.message for e in events if e.host == host]
        assert any("'gloo' backend on 2 nodes" in m for m in said), (host, said[-20:])
        assert any("Processes 600/1200 (50%) of train data" in m for m in said), (host, said[-20:])
        accuracy = [int(m.split("(")[-1].split("%")[0]) for m in said if m.startswith("Test set: Average loss")]
        assert len(accuracy) == 3 and accuracy[-1] >= 50, (host, accuracy)  # chance is 10 %
    with tarfile.open(result["model_artifacts"][len("file://"):]) as tar:
        assert "model.pth" in tar.getnames(), tar.getnames()


MNIST_SAMPLE = os.path.join(os.path.dirname(EXAMPLES), "mnist_sample")


@pytest.mark.slow
@pytest.mark.torch
def test_pytorch_inference_toolkit_mnist_model_classifies_real_digits_in_a_batch_transform(tmp_path, monkeypatch):
    """The PyTorch inference toolkit's own MNIST model, unmodified (its model_fn in code/mnist.py, the trained
    torch_model.pth, code/requirements.txt naming transformers, which mnist.py imports), as a model.tar.gz in a
    batch transform of the pytorch-inference image through the batch inference operator: the requirements are
    installed before it serves, the container's default input/predict/output handlers run (npy in, JSON out),
    and it classifies 200 real MNIST test digits."""
    import numpy as np

    from airflow_smdist.operators.transform import SageMakerShardedBatchInferenceOperator

    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    model_dir = os.path.join(EXAMPLES, "pytorch_inference_mnist")
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:  # as the toolkit's test packs its model_cpu directory
        for name in ("torch_model.pth", "code/mnist.py", "code/requirements.txt"):
            tar.add(os.path.join(model_dir, name), arcname=name)
    images = np.load(os.path.join(MNIST_SAMPLE, "images_200.npy")).astype(np.float32) / 255
    labels = np.load(os.path.join(MNIST_SAMPLE, "labels_200.npy"))
    (tmp_path / "in").mkdir()
    for part in range(2):  # the client's preprocessing, as the model was trained: Normalize((0.1307,), (0.3081,))
        batch = (images[part * 100:(part + 1) * 100, None] - 0.1307) / 0.3081
        np.save(tmp_path / "in" / f"digits-{part}.npy", batch)
    op = SageMakerShardedBatchInferenceOperator(
        task_id="score", input_uri=f"file://{tmp_path}/in", output_uri=f"file://{tmp_path}/out",
        model_data=f"file://{archive}", framework="pytorch", framework_version="2.5.1", py_version="py311",
        program="mnist.py", role=ROLE, instance_count=1, content_type="application/x-npy",
        accept="application/json", poll_interval=1)
    ti = SimpleNamespace(dag_id="dag", task_id="score", map_index=-1, try_number=1, xcom_push=lambda **_: None)
    summary = op.execute({"ti": ti, "run_id": f"run-{uuid.uuid4().hex}"})
    assert summary["complete"] and summary["objects"] == 2, summary
    predicted = []
    for part in range(2):
        scores = json.loads((tmp_path / "out" / f"digits-{part}.npy.out").read_text())
        assert np.array(scores).shape == (100, 10)
        predicted += [int(np.argmax(row)) for row in scores]
    accuracy = float(np.mean(np.array(predicted) == labels))
    assert accuracy >= 0.9, accuracy  # the toolkit's trained model on real digits (chance: 0.1)
    from airflow_smdist.backends.local import LocalBackend

    (job,) = [j["job_name"] for j in summary["jobs"]]
    lines = [e.message for e in LocalBackend(tmp_path / "jobs").log_events("transform", job)[0]]
    said = [m for m in lines if m.startswith("installing requirements.txt into the job's layer")]
    assert len(said) == 1 and "as the serving container's, before its model server starts" in said[0], said
    assert any(m.strip().startswith("+ transformers==") for m in lines), lines[-30:]


def _abalone_csv(path, rows: int) -> None:
    """A headerless abalone CSV (sex, seven measurements, rings), with a missing measurement now and then, as
    the example's dataset has none but its imputer expects."""
    import random

    rng = random.Random(3)
    with open(path, "w") as f:
        for i in range(rows):
            length = rng.uniform(0.1, 0.8)
            values = [length, length * 0.8, length * 0.3, length * 2, length * 0.9, length * 0.4, length * 0.6]
            cells = ["" if i % 37 == 5 and j == 2 else f"{v:.4f}" for j, v in enumerate(values)]
            f.write(",".join([rng.choice("MFI"), *cells, str(int(3 + length * 20))]) + "\n")


@pytest.mark.slow
@SKLEARN_1_2
def test_scikit_learn_processing_script_importing_requests_preprocesses_in_a_processing_job(tmp_path, monkeypatch):
    """The Pipelines step-caching example's SKLearnProcessor script, unmodified, in a processing job of the
    scikit-learn image through the processing operator: it imports requests (in the image), reads its input from
    /opt/ml/processing/input, and its three splits are uploaded from /opt/ml/processing/{train,validation,test}."""
    from airflow_smdist.operators.processing import SmdistProcessingOperator

    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    (tmp_path / "raw").mkdir()
    _abalone_csv(tmp_path / "raw" / "abalone-dataset.csv", 200)
    outputs = {split: {"source": f"/opt/ml/processing/{split}", "destination": f"file://{tmp_path}/{split}"}
               for split in ("train", "validation", "test")}
    op = SmdistProcessingOperator(
        task_id="preprocess", framework="sklearn", framework_version="1.2-1", instance_type="ml.m5.xlarge",
        instance_count=1, role=ROLE,
        code=os.path.join(EXAMPLES, "sklearn_processing_preprocessing", "preprocessing.py"),
        inputs={"input": {"source": f"file://{tmp_path}/raw", "destination": "/opt/ml/processing/input"}},
        outputs=outputs, poll_interval=1)
    ti = SimpleNamespace(dag_id="dag", task_id="preprocess", map_index=-1, try_number=1)
    result = op.execute({"ti": ti, "run_id": f"run-{uuid.uuid4().hex}"})
    assert result["status"] == "Completed", result
    rows = {split: (tmp_path / split / f"{split}.csv").read_text().splitlines() for split in outputs}
    assert [len(r) for r in rows.values()] == [140, 30, 30], {k: len(v) for k, v in rows.items()}
    widths = {len(line.split(",")) for r in rows.values() for line in r}
    assert widths == {11}, widths  # rings, 7 scaled measurements, 3 one-hot sexes
    rings = sorted(float(line.split(",")[0]) for r in rows.values() for line in r)
    assert rings[0] >= 3 and rings[-1] <= 19  # the label is first and unscaled
