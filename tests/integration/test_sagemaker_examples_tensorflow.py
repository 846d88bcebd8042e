"""Public TensorFlow scripts, unmodified (tests/fixtures/sagemaker_examples/README.md: source, commit, license,
md5; test_sagemaker_examples.py checks every md5), in local jobs of the TensorFlow images they were written for.

The TensorFlow training toolkit's own ``multi_worker_mirrored/train_dummy.py`` loads MNIST with
``tf.keras.datasets.mnist.load_data()``, a download. A network-isolated job must bring the file itself: a channel
holding a Keras cache (``datasets/mnist.npz``) and ``KERAS_HOME`` pointing at it. Keras checks the cached file's
sha256 against the real MNIST's and downloads on a mismatch, so only the real file will do; these tests have a
synthetic one of MNIST's shapes, and show both sides: the script unmodified fails as it would on SageMaker (Keras
found the channel's file, rejected it, and could not download), and it trains on 1 and 2 hosts when that one check
is stood in for (``tests/fixtures/tensorflow/keras_cache``). With the real file at ``SMDIST_TEST_KERAS_MNIST``, the
script runs unmodified and alone.

The TensorFlow Serving container's own example ``test1/inference.py`` (``input_handler`` / ``output_handler``)
serves its own test model, ``half_plus_three`` (a SavedModel, version 00000123), in batch transform jobs of the
tensorflow-inference image: the local engine's stand-in for TF Serving (docs/contracts.md). That runtime is heavy
(tensorflow-cpu and tensorflow-serving-api): built only with ``SMDIST_TEST_IMAGE_RUNTIMES=all`` or
``=tensorflow-inference``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.backends.local.job import transform as local_transform
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training
from airflow_smdist.specs.transform import build_model, build_transform
from jobs import wait

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")
EXAMPLES = os.path.join(FIXTURES, "sagemaker_examples")
TRAIN_DUMMY = os.path.join(EXAMPLES, "tensorflow_mwms", "train_dummy.py")
CACHE_RUNNER = os.path.join(FIXTURES, "tensorflow", "keras_cache", "run_with_cached_dataset.py")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"  # keras.datasets.mnist's
REAL_MNIST_ENV = "SMDIST_TEST_KERAS_MNIST"
HALF_PLUS_THREE = os.path.join(EXAMPLES, "tfs_half_plus_three")
TF_INFERENCE_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-inference:2.16-cpu"
HEAVY_ENV = "SMDIST_TEST_IMAGE_RUNTIMES"
KERAS_HOME = "/opt/ml/input/data/keras"

namespaced = pytest.mark.skipif(launcher.namespace_prefix() is None, reason="the script's hosts are named algo-N "
                                f"and KERAS_HOME is an /opt/ml path ({launcher.namespaces_available()})")


def _synthetic_mnist(path, n_train: int = 6000, n_test: int = 1000) -> None:
    """A Keras cache's ``mnist.npz`` (x_train, y_train, x_test, y_test: uint8, 28x28 images) of a learnable
    synthetic digit set: digit k is a bright 6x6 square at its own place, over noise."""
    import numpy as np

    rng = np.random.default_rng(7)
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for i, k in enumerate(labels):
            top, left = 2 + (k // 5) * 14, 1 + (k % 5) * 5
            images[i, top:top + 6, left:left + 6] = 255
        arrays[f"x_{split}"], arrays[f"y_{split}"] = images, labels
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


def _run(tmp_path, monkeypatch, *, hosts: int, source_files: list[str], entry_point: str, hyperparameters=None,
         mnist=None, legacy_keras: bool = False):
    """A tensorflow-training 2.16 job with MWMS on ``hosts`` hosts, network-isolated, its ``keras`` channel a
    Keras cache holding ``mnist`` (default: the synthetic set): ``datasets/mnist.npz`` with ``KERAS_HOME`` for
    Keras 3; for tf_keras (``legacy_keras``: ``TF_USE_LEGACY_KERAS=1``), whose ``get_file`` reads ``~/.keras``
    and not KERAS_HOME, ``.keras/datasets/mnist.npz`` with ``HOME`` there. Returns (describe, [(host, line)])."""
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    backend = LocalBackend(tmp_path / "jobs")
    cache = tmp_path / "keras" / (".keras" if legacy_keras else "") / "datasets" / "mnist.npz"
    environment = {"TF_USE_LEGACY_KERAS": "1", "HOME": KERAS_HOME} if legacy_keras else {"KERAS_HOME": KERAS_HOME}
    if mnist is None:
        _synthetic_mnist(cache)
    else:
        cache.parent.mkdir(parents=True)
        shutil.copyfile(mnist, cache)
    source = tmp_path / "source"
    source.mkdir()
    for f in source_files:
        shutil.copy(f, source)
    name = f"tf-example-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point=entry_point,
                          source_dir=str(source), framework="tensorflow", framework_version="2.16",
                          py_version="py310", instance_type="ml.m5.xlarge", instance_count=hosts,
                          inputs={"keras": f"file://{tmp_path}/keras"}, environment=environment,
                          hyperparameters=hyperparameters or {}, enable_network_isolation=True,
                          distribution={"multi_worker_mirrored_strategy": {"enabled": True}})
    upload_source(plan.source_dir, entry_point, plan.source_uri)
    backend.submit("training", plan.request)
    d = wait(backend, "training", name, timeout=1200)  # a cold runtime cache downloads tensorflow-cpu once
    return d, [(e.host, e.message) for e in backend.log_events("training", name)[0]]


def _by_host(lines, hosts: int) -> dict[str, list[str]]:
    return {f"algo-{i + 1}": [m for h, m in lines if h == f"algo-{i + 1}"] for i in range(hosts)}


def _epochs(said: list[str]) -> list[tuple[float, float]]:
    """(accuracy, loss) at the end of each epoch, from Keras's progress bar, which draws in place (``\\r`` or
    ``\\b``; Keras 3 on any POSIX system, with ANSI colours), so one log line holds an epoch's updates: the last
    ``70/70`` update of a line is its epoch's (Keras 3: ``accuracy: A - loss: L``, tf_keras: ``loss: L -
    accuracy: A``)."""
    out = []
    for m in said:
        updates = re.split(r"(?=70/70 )", re.sub(r"\x1b\[[0-9;]*m|\x08", "", m))[1:]
        if updates:
            last = updates[-1]
            accuracy, loss = re.search(r"accuracy: ([0-9.]+)", last), re.search(r"loss: ([0-9.]+)", last)
            if accuracy and loss:
                out.append((float(accuracy.group(1)), float(loss.group(1))))
    return out


@pytest.mark.slow
@namespaced
def test_train_dummy_unmodified_fails_as_a_network_isolated_sagemaker_job_does_without_the_real_mnist(
        tmp_path, monkeypatch):
    """The script alone on 2 hosts, its Keras cache in a channel: Keras finds ``$KERAS_HOME/datasets/mnist.npz``
    in the channel, rejects it (not the real MNIST: sha256), tries to download it and cannot (network isolation),
    so the job fails with Keras's error, on SageMaker as here."""
    d, lines = _run(tmp_path, monkeypatch, hosts=2, source_files=[TRAIN_DUMMY], entry_point="train_dummy.py")
    said = [m for _h, m in lines]
    assert d["TrainingJobStatus"] == "Failed", (d.get("FailureReason"), said[-30:])
    assert "Running distributed training job with multi_worker_mirrored_strategy setup" in said
    for host, host_said in _by_host(lines, 2).items():
        assert any(m.startswith("TF_CONFIG=") for m in host_said), (host, host_said[-20:])
        assert any(m.startswith("A local file was found, but it seems to be incomplete or outdated because the ")
                   and f"file hash does not match the original value of {MNIST_SHA256}" in m
                   for m in host_said), (host, host_said[-20:])
        assert f"Downloading data from {MNIST_URL}" in host_said, (host, host_said[-20:])
    assert f"URL fetch failure on {MNIST_URL}" in d["FailureReason"], d["FailureReason"]


@pytest.mark.slow
@namespaced
@pytest.mark.parametrize("hosts, legacy_keras", [(1, False), (2, True)], ids=["one-host-keras3", "two-hosts-tf-keras"])
def test_train_dummy_unmodified_trains_with_mwms_from_the_channels_keras_cache(tmp_path, monkeypatch, hosts,
                                                                               legacy_keras):
    """The script unmodified, run by a wrapper that stands in for Keras's sha256 check of the cached file only:
    Keras reads the channel's cache and the model trains with MultiWorkerMirroredStrategy on every host (a batch
    of 64 per worker), 3 epochs of 70 steps, and learns the digits. ``tf.keras`` of the TensorFlow 2.16 image is
    Keras 3, which trains a one-worker cluster; on several workers it is tf_keras (``TF_USE_LEGACY_KERAS=1``, the
    image ships tf-keras 2.16), see the next test."""
    d, lines = _run(tmp_path, monkeypatch, hosts=hosts, source_files=[TRAIN_DUMMY, CACHE_RUNNER],
                    entry_point="run_with_cached_dataset.py", hyperparameters={"script": "train_dummy.py"},
                    legacy_keras=legacy_keras)
    said = [m for _h, m in lines]
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), said[-40:])
    cached = f"{KERAS_HOME}/.keras/datasets/mnist.npz" if legacy_keras else f"{KERAS_HOME}/datasets/mnist.npz"
    for host, host_said in _by_host(lines, hosts).items():
        assert f"keras cache: {cached} taken as it is (the stand-in for Keras's sha256 check)" in host_said, \
            (host, host_said[-20:])
        assert not any(m.startswith("Downloading data from") for m in host_said), host
        assert [m for m in host_said if re.fullmatch(r"Epoch \d/3", m)] == ["Epoch 1/3", "Epoch 2/3", "Epoch 3/3"], \
            (host, host_said[-20:])
        epochs = _epochs(host_said)
        assert len(epochs) == 3, (host, host_said[-20:])
        assert epochs[-1][1] < epochs[0][1] and epochs[-1][0] > 0.3, (host, epochs)  # chance is 0.1


@pytest.mark.slow
@namespaced
def test_train_dummy_unmodified_with_keras3_on_two_hosts_fails_in_fit_as_on_the_tensorflow_2_16_image(
        tmp_path, monkeypatch):
    """Keras 3 (``tf.keras`` of TensorFlow 2.16) does not train with MultiWorkerMirroredStrategy on several
    workers: ``fit`` fails in every worker (keras-team/keras#20585, tensorflow/tensorflow#72388: TensorFlow's own
    multi_worker_with_keras tutorial, which train_dummy.py copies, fails so since 2.16). The job fails with that
    error, as the script does on the image; the same failure outside any job, two plain processes on this machine,
    is where it was found."""
    d, lines = _run(tmp_path, monkeypatch, hosts=2, source_files=[TRAIN_DUMMY, CACHE_RUNNER],
                    entry_point="run_with_cached_dataset.py", hyperparameters={"script": "train_dummy.py"})
    said = [m for _h, m in lines]
    assert d["TrainingJobStatus"] == "Failed", (d.get("FailureReason"), said[-30:])
    for host, host_said in _by_host(lines, 2).items():
        assert f"keras cache: {KERAS_HOME}/datasets/mnist.npz taken as it is (the stand-in for Keras's sha256 " \
               "check)" in host_said, (host, host_said[-20:])
        assert not _epochs(host_said), (host, host_said[-20:])
        assert any(m.startswith("ValueError: ") for m in host_said), (host, host_said[-20:])
    assert "ExecuteUserScriptError" in d["FailureReason"] and "ValueError" in d["FailureReason"], d["FailureReason"]


@namespaced
def test_train_dummy_unmodified_trains_on_two_hosts_from_the_real_mnist_in_a_channel(tmp_path, monkeypatch):
    """With the real MNIST (``SMDIST_TEST_KERAS_MNIST``: Keras's mnist.npz, checked by its sha256) in the channel,
    the script runs alone and unmodified, as a network-isolated SageMaker job given the file would."""
    path = os.environ.get(REAL_MNIST_ENV)
    if not path:
        pytest.skip(f"needs the real MNIST (Keras's mnist.npz, sha256 {MNIST_SHA256}) at {REAL_MNIST_ENV}: not on "
                    "this machine, and no internet to fetch it")
    with open(path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == MNIST_SHA256, f"{path} is not Keras's mnist.npz"
    d, lines = _run(tmp_path, monkeypatch, hosts=2, source_files=[TRAIN_DUMMY], entry_point="train_dummy.py",
                    mnist=path)
    said = [m for _h, m in lines]
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), said[-40:])
    for host, host_said in _by_host(lines, 2).items():
        assert not any(m.startswith(("Downloading data from", "A local file was found")) for m in host_said)
        assert len(_epochs(host_said)) == 3, (host, host_said[-20:])


# -- TensorFlow Serving: the container's own inference.py and test model in batch transform ---------------------
def _wanted(family: str) -> bool:
    wanted = {f.strip() for f in os.environ.get(HEAVY_ENV, "").split(",") if f.strip()}
    return "all" in wanted or family in wanted


def _transform(tmp_path, monkeypatch, inputs: dict[str, str], *, content_type: str, code: bool = True,
               split_type: str | None = "Line", accept: str | None = "application/json"):
    """A batch transform job of the tensorflow-inference 2.16 image over ``inputs`` (name -> text), its model
    the TFS container's half_plus_three SavedModel with (``code``) the container's test1 inference.py in
    ``code/``, as the SDK's TensorFlowModel packs them. Returns (describe, {host: [lines]}, {name: output})."""
    if not _wanted("tensorflow-inference"):
        pytest.skip(f"a heavy runtime: run with {HEAVY_ENV}=all or =tensorflow-inference")
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    backend = LocalBackend(tmp_path / "jobs")
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(os.path.join(HALF_PLUS_THREE, "model", "00000123"), arcname="00000123")
        if code:
            tar.add(os.path.join(HALF_PLUS_THREE, "code", "inference.py"), arcname="code/inference.py")
    model = f"half-plus-three-{uuid.uuid4().hex[:8]}"
    local_transform.create_model(backend, build_model(model_name=model, model_data=f"file://{archive}", role=ROLE,
                                                      image_uri=TF_INFERENCE_IMAGE).request)
    (tmp_path / "in").mkdir()
    for name, text in inputs.items():
        (tmp_path / "in" / name).write_text(text)
    job = f"tfs-{uuid.uuid4().hex[:8]}"
    backend.submit("transform", build_transform(job_name=job, model_name=model, input_uri=f"file://{tmp_path}/in",
                                                output_uri=f"file://{tmp_path}/out", content_type=content_type,
                                                split_type=split_type, accept=accept,
                                                assemble_with="Line" if split_type == "Line" else None))
    d = wait(backend, "transform", job, timeout=1200)  # a cold runtime cache downloads tensorflow-cpu once
    by_host: dict[str, list[str]] = {}
    for e in backend.log_events("transform", job)[0]:
        by_host.setdefault(e.host, []).append(e.message)
    out = {p.name[:-4]: p.read_text() for p in sorted((tmp_path / "out").glob("*.out"))}
    return d, by_host, out


def test_tfs_container_inference_py_serves_half_plus_three_in_a_batch_transform(tmp_path, monkeypatch):
    """test1's input_handler turns each CSV record into TF Serving's ``{"instances": [...]}`` and POSTs it to
    ``context.rest_uri``; the model (x / 2 + 3) answers ``{"predictions": [...]}``, which output_handler returns
    with the request's Accept: one line of output per line of input."""
    d, by_host, out = _transform(tmp_path, monkeypatch, {"a.csv": "1.0,2.0,5.0\n0,-2,10\n"},
                                 content_type="text/csv")
    assert d["TransformJobStatus"] == "Completed", (d.get("FailureReason"), by_host)
    assert "Transforming on 1 instance(s) with the tensorflow inference defaults" in by_host["platform"]
    assert "TF Serving stand-in: loaded model version 123 from /opt/ml/model/00000123 (signatures: serving_default, " \
           "tensorflow/serving/regress)" in by_host["algo-1"], by_host["algo-1"][-20:]
    assert "TF Serving stand-in: REST API on port 8501 (model model); handlers from /opt/ml/model/code/inference.py" \
        in by_host["algo-1"], by_host["algo-1"][-20:]
    assert [json.loads(line) for line in out["a.csv"].splitlines()] == [
        {"predictions": [3.5, 4.0, 5.5]}, {"predictions": [3.0, 2.0, 8.0]}], out


def test_tfs_container_inference_py_fails_an_unsupported_content_type_as_its_handler_says(tmp_path, monkeypatch):
    """test1 raises for a content type it does not handle; the model server answers 500 with the error, and
    the batch transform job fails naming it, with no output for the object."""
    d, by_host, out = _transform(tmp_path, monkeypatch, {"a.npy": "not numpy"}, content_type="application/x-npy",
                                 split_type=None)
    assert d["TransformJobStatus"] == "Failed", (d.get("FailureReason"), by_host)
    assert "unsupported content type application/x-npy" in d["FailureReason"], d["FailureReason"]
    assert out == {}


def test_tfs_without_inference_code_takes_json_and_csv_as_the_containers_nginx_does(tmp_path, monkeypatch):
    """No code/inference.py: the container's nginx (tensorflowServing.js) forwards TF Serving JSON as it is and
    wraps other JSON as ``{"instances": ...}``; the response comes back as TF Serving gives it."""
    d, by_host, out = _transform(tmp_path, monkeypatch, {"a.json": '{"instances": [1.0, 2.0, 5.0]}\n[4.0, 6.0]\n'},
                                 content_type="application/json", code=False)
    assert d["TransformJobStatus"] == "Completed", (d.get("FailureReason"), by_host)
    assert any(m.endswith("no inference.py: the container's nginx conversion of JSON and CSV")
               for m in by_host["algo-1"])
    assert [json.loads(line) for line in out["a.json"].splitlines()] == [
        {"predictions": [3.5, 4.0, 5.5]}, {"predictions": [[5.0, 6.0]]}], out  # [4.0, 6.0] is one instance
