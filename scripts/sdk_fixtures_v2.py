"""Capture the requests (and uploads) SageMaker Python SDK 2.x sends, as committed test fixtures.

Run by ``scripts/make_sdk_fixtures.sh`` inside a throwaway venv holding ``sagemaker==2.x`` (SDK 2 cannot share
a venv with SDK 3, which the project's test venv carries). No AWS account is touched: every botocore call
the SDK makes is answered by a ``before-call`` handler that records the operation, its parameters and, for
S3 uploads, the bytes, and returns a minimal response. The cases are the intents of issue 14 where the
installed SDK 3 cannot be the oracle (its v2 estimators and HyperparameterTuner over them are gone):

* TensorFlow training (plain, and with MPI): the ``model_dir`` hyperparameter;
* a TensorFlow tuning job with a categorical range of numbers: ``model_dir`` and the categorical encoding;
* a tuning job of the user's own image in script mode (plain ``Estimator`` with ``image_uri`` + ``entry_point``):
  categorical values sent as their plain text (only Framework estimators JSON-encode them);
* PyTorch with SMP v2 (torch_distributed + smdistributed.modelparallel): the smdistributed-modelparallel image;
* PyTorch with torch_distributed (torchrun) and with MPI: the distribution hyperparameters and channels;
* FrameworkProcessor with ``source_dir`` + ``code`` (+ requirements.txt): sourcedir.tar.gz and runproc.sh.

The script runs offline: the SDK's telemetry is opted out through its own setting (``TelemetryOptOut`` in the
session's SDK-defaults config, which also keeps any local ``config.yaml`` from changing the requests; the
``SAGEMAKER_DISABLE_TELEMETRY`` variable does not stop 2.257.7's emitter) and its sender is replaced by one
that only records a try; the EC2 metadata service is switched off; and any name lookup of a host, or a
telemetry try, fails the run.

Output: one JSON file (argument 1) with the SDK version, the source files used and, per case, the request
and the uploaded objects (text for runproc.sh, the member list and texts for a .tar.gz).
"""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import tarfile
import tempfile

NETWORK: list[str] = []  # hosts the SDK tried to reach, and telemetry sends (the run fails if any)


def _offline(host, *_args, **_kwargs):
    NETWORK.append(str(host))
    raise socket.gaierror(f"sdk_fixtures_v2 runs offline: no lookup of {host}")


# Before boto3/sagemaker are imported: no EC2 metadata lookups (the SDK's default sessions look for a
# region), and any name lookup fails.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
socket.getaddrinfo = _offline

import boto3  # noqa: E402
import sagemaker  # noqa: E402
from sagemaker.session import Session  # noqa: E402

REGION = "us-east-1"
BUCKET = "sdk-fixtures"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
OWN_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own-trainer:1"
#: the metric every tuning case minimises
LOSS = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]
SOURCES = {
    "train.py": "import argparse\nprint('train')\n",
    "util.py": "X = 1\n",
    "process.py": "import util\nprint('process', util.X)\n",
    "requirements.txt": "six\n",
}

CALLS: list[tuple[str, dict]] = []
UPLOADS: dict[str, bytes] = {}
#: The SDK's own opt-out (``SageMaker.PythonSDK.Modules.TelemetryOptOut``), as the session's whole config.
SDK_CONFIG = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}


def _no_telemetry(*_args, **_kwargs):
    NETWORK.append("telemetry")


def no_telemetry() -> None:
    """Telemetry is opted out (``SDK_CONFIG``); should the SDK still try, its sender only records the try."""
    from sagemaker.telemetry import telemetry_logging

    telemetry_logging._send_telemetry_request = _no_telemetry


def _http():
    from botocore.awsrequest import AWSResponse

    return AWSResponse("https://example", 200, {}, None)


def _capture_params(params, model, **_):
    CALLS.append((model.name, json.loads(json.dumps(params, default=str))))


def session() -> Session:
    boto_session = boto3.Session(region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    sm = boto_session.client("sagemaker")
    s3 = boto_session.client("s3")
    for client in (sm, s3):
        client.meta.events.register("provide-client-params.sagemaker.*", _capture_params)
        client.meta.events.register("before-call.*.*", _answer_call)
    sess = Session(boto_session=boto_session, sagemaker_client=sm, default_bucket=BUCKET, sagemaker_config=SDK_CONFIG)
    sess.s3_client = s3
    sess.s3_resource = boto_session.resource("s3")
    sess.s3_resource.meta.client.meta.events.register("before-call.*.*", _answer_call)
    return sess


def _answer_call(model, params, **_):
    if model.service_model.service_name == "s3":
        if model.name in ("PutObject", "UploadPart"):
            body = params.get("body")
            data = body.read() if hasattr(body, "read") else (body or b"")
            data = data.encode() if isinstance(data, str) else data
            key = params["url_path"].lstrip("/")
            key = key.split("?", 1)[0]
            if key.startswith(BUCKET + "/"):
                key = key[len(BUCKET) + 1:]
            UPLOADS[f"s3://{BUCKET}/{key}"] = data
            return _http(), {"ETag": '"0"'}
        if model.name == "ListBuckets":
            return _http(), {"Buckets": [{"Name": BUCKET}]}
        return _http(), {}
    return _http(), {"TrainingJobArn": "arn:x", "ProcessingJobArn": "arn:x", "HyperParameterTuningJobArn": "arn:x"}


def _object(data: bytes) -> dict:
    if data[:2] == b"\x1f\x8b":
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            return {"tar": {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}}
    return {"text": data.decode()}


def captured(op: str) -> dict:
    requests = [p for name, p in CALLS if name == op]
    assert len(requests) == 1, (op, [n for n, _ in CALLS])
    return requests[0]


def run_case(name: str, fn, out: dict) -> None:
    CALLS.clear()
    UPLOADS.clear()
    op = fn()
    out[name] = {"request": captured(op), "uploads": {uri: _object(data) for uri, data in sorted(UPLOADS.items())}}


def main(path: str) -> None:
    from sagemaker.parameter import (
        CategoricalParameter,
        ContinuousParameter,
        IntegerParameter,
    )
    from sagemaker.estimator import Estimator
    from sagemaker.inputs import TrainingInput
    from sagemaker.processing import FrameworkProcessor, ProcessingOutput
    from sagemaker.pytorch import PyTorch
    from sagemaker.tensorflow import TensorFlow
    from sagemaker.tuner import HyperparameterTuner

    no_telemetry()
    src = tempfile.mkdtemp()
    for rel, text in SOURCES.items():
        with open(os.path.join(src, rel), "w") as f:
            f.write(text)
    sess = session()
    out: dict = {}

    def tf(**kw):
        return TensorFlow(entry_point="train.py", source_dir=src, framework_version="2.16", py_version="py310",
                          role=ROLE, output_path=f"s3://{BUCKET}/out", sagemaker_session=sess,
                          hyperparameters={"epochs": 3, "optimizer": "adam"}, **kw)

    def tune(est, job_name, **integer_ranges):
        """The same Random tuner over ``est`` (a TensorFlow or a plain Estimator): categorical numbers and
        strings, a continuous range, and ``integer_ranges`` where given."""
        HyperparameterTuner(est, objective_metric_name="loss", objective_type="Minimize", max_jobs=4,
                            max_parallel_jobs=2, strategy="Random", metric_definitions=LOSS,
                            hyperparameter_ranges={"batch_size": CategoricalParameter([32, 64]),
                                                   "optimizer": CategoricalParameter(["adam", "sgd"]),
                                                   **integer_ranges, "lr": ContinuousParameter(0.001, 0.1)},
                            ).fit({"train": f"s3://{BUCKET}/data/train"}, job_name=job_name, wait=False)
        return "CreateHyperParameterTuningJob"

    def tf_training():
        tf(instance_type="ml.c5.xlarge", instance_count=2).fit(
            {"train": f"s3://{BUCKET}/data/train"}, job_name="tf-plain", wait=False, logs=False)
        return "CreateTrainingJob"

    def tf_mpi():
        tf(instance_type="ml.p4d.24xlarge", instance_count=2,
           distribution={"mpi": {"enabled": True, "processes_per_host": 8}}).fit(
            {"train": f"s3://{BUCKET}/data/train"}, job_name="tf-mpi", wait=False, logs=False)
        return "CreateTrainingJob"

    def tf_tuning():
        est = tf(instance_type="ml.c5.xlarge", instance_count=1, metric_definitions=LOSS)
        return tune(est, "tf-tune", layers=IntegerParameter(1, 4))

    def generic_tuning():
        est = Estimator(image_uri=OWN_IMAGE, entry_point="train.py", source_dir=src, role=ROLE,
                        output_path=f"s3://{BUCKET}/out", sagemaker_session=sess, instance_type="ml.c5.xlarge",
                        instance_count=1, hyperparameters={"epochs": 3, "optimizer": "adam", "schedule": "cosine"},
                        metric_definitions=LOSS)
        return tune(est, "own-tune")

    def pytorch(job_name, distribution, **kw):
        PyTorch(entry_point="train.py", source_dir=src, framework_version="2.5.1", py_version="py311", role=ROLE,
                output_path=f"s3://{BUCKET}/out", sagemaker_session=sess, instance_count=2,
                distribution=distribution, **kw,
                ).fit({"train": TrainingInput(f"s3://{BUCKET}/data/train", distribution="ShardedByS3Key",
                                              input_mode="FastFile"),
                       "validation": f"s3://{BUCKET}/data/val"}, job_name=job_name, wait=False, logs=False)
        return "CreateTrainingJob"

    def pytorch_torchrun():
        return pytorch("pt-torchrun", {"torch_distributed": {"enabled": True}}, instance_type="ml.g5.12xlarge",
                       hyperparameters={"epochs": 3, "lr": 0.1, "optimizer": "adam", "amp": True},
                       checkpoint_s3_uri=f"s3://{BUCKET}/ckpt",
                       metric_definitions=LOSS)

    def pytorch_mpi():
        return pytorch("pt-mpi", {"mpi": {"enabled": True, "processes_per_host": 8,
                                          "custom_mpi_options": "-verbose"}},
                       instance_type="ml.p4d.24xlarge", hyperparameters={"epochs": 3})

    def smp_v2():
        PyTorch(entry_point="train.py", source_dir=src, framework_version="2.3.0", py_version="py310", role=ROLE,
                output_path=f"s3://{BUCKET}/out", sagemaker_session=sess, instance_type="ml.p4d.24xlarge",
                instance_count=2, hyperparameters={"epochs": 3},
                distribution={"torch_distributed": {"enabled": True},
                              "smdistributed": {"modelparallel": {"enabled": True,
                                                                  "parameters": {"hybrid_shard_degree": 8}}}},
                ).fit({"train": f"s3://{BUCKET}/data/train"}, job_name="smp-v2", wait=False, logs=False)
        return "CreateTrainingJob"

    def framework_processor():
        FrameworkProcessor(estimator_cls=PyTorch, framework_version="2.3.0", py_version="py311", role=ROLE,
                           instance_type="ml.m5.xlarge", instance_count=2, sagemaker_session=sess,
                           code_location=f"s3://{BUCKET}/code", env={"STAGE": "prep"}).run(
            code="process.py", source_dir=src, arguments=["--rows", "100"],
            outputs=[ProcessingOutput(output_name="out", source="/opt/ml/processing/output",
                                      destination=f"s3://{BUCKET}/processed")],
            job_name="fw-proc", wait=False, logs=False)
        return "CreateProcessingJob"

    for name, fn in (("tf_training", tf_training), ("tf_mpi", tf_mpi), ("tf_tuning", tf_tuning),
                     ("generic_tuning", generic_tuning), ("smp_v2", smp_v2), ("pytorch_torchrun", pytorch_torchrun),
                     ("pytorch_mpi", pytorch_mpi), ("framework_processor", framework_processor)):
        run_case(name, fn, out)
    if NETWORK:
        raise SystemExit(f"the SDK tried to reach the network (telemetry or a host): {NETWORK}")
    doc = {"sdk": f"sagemaker=={sagemaker.__version__}", "region": REGION, "bucket": BUCKET, "role": ROLE,
           "sources": SOURCES, "cases": out}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
