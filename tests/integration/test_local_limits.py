"""What the local backend cannot run is refused up front, naming the field, before anything is written:
requests handed straight to ``LocalBackend.submit`` (not only those the builders made) and the sharded
inference operator's job request, before its model is created."""

from __future__ import annotations

import io
import tarfile
import uuid
from types import SimpleNamespace

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import transform as local_transform
from airflow_smdist.operators.transform import SageMakerShardedBatchInferenceOperator
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.training import build_training
from airflow_smdist.specs.transform import build_transform
from airflow_smdist.specs.tuning import build_tuning

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
SKLEARN_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"


@pytest.fixture
def backend(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))  # the operators' local backend too
    return LocalBackend(tmp_path / "jobs")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def nothing_written(backend) -> bool:
    root = backend.store.root
    return not root.exists() or not [p for p in root.rglob("*") if p.is_file()]


def training_args(tmp_path, **kw):
    return dict(job_name=unique("train"), role=ROLE, output_path=f"file://{tmp_path}/out", entry_point="train.py",
                source_dir=str(tmp_path), image_uri=IMAGE, instance_type="ml.m5.xlarge",
                inputs={"train": f"file://{tmp_path}"}, **kw)


def tuning_request(tmp_path, **kw):
    return build_tuning(**training_args(tmp_path, **kw), objective_metric_name="loss", objective_type="Minimize",
                        strategy="Grid", hyperparameter_ranges={"lr": {"type": "categorical", "values": ["0.1"]}},
                        metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}]).request


def transform_request(tmp_path, instance_count):
    """A transform request handed straight to submit (the builder itself allows at most 100 instances)."""
    request = build_transform(job_name=unique("score"), model_name=unique("model"),
                              input_uri=f"file://{tmp_path}/in", output_uri=f"file://{tmp_path}/out",
                              allow_local_uris=True)
    request["TransformResources"]["InstanceCount"] = instance_count
    return request


@pytest.mark.parametrize(("kind", "field"), [("training", "ResourceConfig.InstanceCount"),
                                             ("tuning", "TrainingJobDefinition.ResourceConfig.InstanceCount"),
                                             ("transform", "TransformResources.InstanceCount")])
def test_more_instances_than_a_job_has_addresses_are_refused_before_anything_is_written(backend, tmp_path, kind,
                                                                                      field):
    """Issue 12: 254 hosts would get the address 127.A.B.254 and beyond, and 300 processes on this machine."""
    if kind == "training":
        request = build_training(**training_args(tmp_path, instance_count=254)).request
    elif kind == "tuning":
        request = tuning_request(tmp_path, instance_count=254)
    else:
        request = transform_request(tmp_path, 254)
    with pytest.raises(SpecError) as info:
        backend.submit(kind, request)
    assert info.value.field == field, info.value
    assert "at most 253 simulated hosts" in str(info.value) and "backend='sagemaker'" in str(info.value)
    assert nothing_written(backend)


def test_a_heterogeneous_cluster_counts_the_hosts_of_every_group(backend, tmp_path):
    request = build_training(**training_args(tmp_path)).request
    resources = request["ResourceConfig"]
    del resources["InstanceType"], resources["InstanceCount"]
    resources["InstanceGroups"] = [{"InstanceGroupName": g, "InstanceType": "ml.m5.xlarge", "InstanceCount": 127}
                                   for g in ("a", "b")]
    with pytest.raises(SpecError, match="254 instances") as info:
        backend.submit("training", request)
    assert info.value.field == "ResourceConfig.InstanceCount"
    assert nothing_written(backend)


@pytest.mark.parametrize(("kind", "field"), [
    ("training", "AlgorithmSpecification.MetricDefinitions[1].Regex"),
    ("tuning", "TrainingJobDefinition.AlgorithmSpecification.MetricDefinitions[1].Regex")])
def test_an_invalid_metric_regex_in_a_request_is_refused_before_the_supervisor_meets_it(backend, tmp_path, kind,
                                                                                        field):
    """The builders check metric regexes; a request handed straight to submit reached the supervisor's
    re.compile, which crashed it."""
    metrics = [{"Name": "loss", "Regex": r"loss=([0-9.]+)"}, {"Name": "acc", "Regex": r"acc=([0-9.]+"}]
    if kind == "training":
        request = build_training(**training_args(tmp_path)).request
        request["AlgorithmSpecification"]["MetricDefinitions"] = metrics
    else:
        request = tuning_request(tmp_path)
        request["TrainingJobDefinition"]["AlgorithmSpecification"]["MetricDefinitions"] = metrics
    with pytest.raises(SpecError, match="not a valid regular expression") as info:
        backend.submit(kind, request)
    assert info.value.field == field, info.value
    assert nothing_written(backend)


# -- sharded inference: the job request is checked by the backend that will run it, before CreateModel ----------
def model_archive(path) -> str:
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("weights.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    return f"file://{path}"


@pytest.mark.parametrize("fan_out", ["transform", "jobs"])
@pytest.mark.parametrize(("arguments", "field"), [({"instance_count": 300}, "instance_count"),
                                                  ({"split_type": "RecordIO"}, "TransformInput.SplitType")])
def test_sharded_inference_the_local_backend_cannot_run_creates_no_model(backend, tmp_path, fan_out, arguments,
                                                                         field):
    """The job request is validated before CreateModel by the builder (at most 100 instances) and by the
    backend that will run it (the local backend splits no RecordIO): a refused one leaves no orphan model."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.csv").write_text("1,2,3\n")
    args = dict(task_id=f"score_{fan_out}", fan_out=fan_out, input_uri=f"file://{tmp_path}/in",
                output_uri=f"file://{tmp_path}/out", model_data=model_archive(tmp_path / "model.tar.gz"),
                image_uri=SKLEARN_IMAGE, shards=2, content_type="text/csv", role=ROLE)
    task = SageMakerShardedBatchInferenceOperator(**{**args, **arguments})
    ctx = {"ti": SimpleNamespace(dag_id="dag", task_id=f"score_{fan_out}", map_index=-1, try_number=1),
           "run_id": f"run-{uuid.uuid4().hex}"}
    with pytest.raises(SpecError) as info:
        task.execute(ctx)
    assert info.value.field == field, info.value
    assert local_transform.list_models(backend) == []  # no orphan model
    assert nothing_written(backend)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("code/*"))  # no inference code
