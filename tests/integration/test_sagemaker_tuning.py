"""Tuning on the sagemaker backend against a moto server over HTTP: the built request, running states, trials
(ListTrainingJobsForHyperParameterTuningJob), stop, and the operator and sensor end to end.

moto creates tuning jobs Completed at once with a canned best job and runs no trials; moto_server.py's
tuning section drives InProgress, real trial training jobs and their objectives, so these tests see what
the service reports (see moto_server.py)."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import boto3
import pytest

from airflow_smdist.backends.base import BackendError
from airflow_smdist.backends.sagemaker import SageMakerBackend
from airflow_smdist.operators.tuning import list_training_jobs_for_tuning_job
from airflow_smdist.specs.errors import SpecErrors
from airflow_smdist.specs.tuning import build_tuning
from moto_server import (
    REGION,
    add_tuning_trial,
    finish_tuning_job,
    plan_tuning_job,
    sagemaker_backend,
    set_tuning_trial,
    start_tuning_job,
)

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
METRIC = "validation:rmse"
RANGES = {"learning_rate": {"type": "continuous", "min": 0.01, "max": 0.3, "scaling": "Logarithmic"},
          "max_depth": {"type": "integer", "min": 2, "max": 6}}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def plan(name: str, bucket: str, **kw):
    args = dict(job_name=name, role=ROLE, output_path=f"s3://{bucket}/out", entry_point="train.py", source_dir="/src",
                image_uri=IMAGE, instance_type="ml.m5.large", hyperparameters={"n_estimators": 50, "epochs": 5},
                inputs={"train": f"s3://{bucket}/train"},
                metric_definitions=[{"Name": METRIC, "Regex": r"val_rmse=([0-9.]+)"}],
                objective_metric_name=METRIC, objective_type="Minimize", strategy="Bayesian",
                hyperparameter_ranges=RANGES, max_jobs=6, max_parallel_jobs=2, random_seed=1,
                tags={"project": "smdist"}, allow_local_uris=False)
    args.update(kw)
    return build_tuning(**args)


@pytest.fixture
def backend(moto_server):
    return SageMakerBackend()  # aws_default: the connection the moto_server fixture defines


def test_the_built_request_is_accepted_and_described_back(backend, s3_bucket):
    name = unique("hpo")
    request = plan(name, s3_bucket, strategy="Hyperband", warm_start_parents=[unique("parent")]).request
    assert backend.submit("tuning", json.loads(json.dumps(request))) == name
    d = backend.describe("tuning", name)
    assert d["HyperParameterTuningJobName"] == name
    assert d["HyperParameterTuningJobArn"].endswith(f":hyper-parameter-tuning-job/{name}")
    assert d["HyperParameterTuningJobConfig"] == request["HyperParameterTuningJobConfig"]
    assert d["TrainingJobDefinition"] == request["TrainingJobDefinition"]
    assert d["WarmStartConfig"] == request["WarmStartConfig"]
    assert sagemaker_backend().hyper_parameter_tuning_jobs[name].tags == request["Tags"]


def test_local_uris_are_refused_before_the_call(backend, tmp_path):
    name = unique("hpo-local")
    request = plan(name, "unused", output_path=f"file://{tmp_path}/out", allow_local_uris=True).request
    with pytest.raises(SpecErrors) as info:
        backend.submit("tuning", request)
    assert "file:// URIs only work on the local backend" in str(info.value)
    assert "TrainingJobDefinition.OutputDataConfig.S3OutputPath" in str(info.value)
    assert name not in sagemaker_backend().hyper_parameter_tuning_jobs


def test_a_running_tuning_job_counts_its_trials_and_lists_them(backend, s3_bucket):
    name = unique("hpo-run")
    backend.submit("tuning", plan(name, s3_bucket).request)
    start_tuning_job(name)
    d = backend.describe("tuning", name)
    assert d["HyperParameterTuningJobStatus"] == "InProgress" and "BestTrainingJob" not in d
    assert d["TrainingJobStatusCounters"] == {"Completed": 0, "InProgress": 0, "RetryableError": 0,
                                              "NonRetryableError": 0, "Stopped": 0}
    t1 = add_tuning_trial(name, {"learning_rate": "0.05", "max_depth": "3"}, status="Completed", objective=0.31)
    t2 = add_tuning_trial(name, {"learning_rate": "0.2", "max_depth": "5"})
    t3 = add_tuning_trial(name, {"learning_rate": "0.01", "max_depth": "2"}, status="Failed",
                          failure_reason="AlgorithmError: ExitCode 1")
    t4 = add_tuning_trial(name, {"learning_rate": "0.1", "max_depth": "4"}, status="Completed", objective=0.12)
    assert [t.rsplit("-", 2)[1] for t in (t1, t2, t3, t4)] == ["001", "002", "003", "004"]
    d = backend.describe("tuning", name)
    assert d["HyperParameterTuningJobStatus"] == "InProgress"
    assert d["TrainingJobStatusCounters"] == {"Completed": 2, "InProgress": 1, "RetryableError": 0,
                                              "NonRetryableError": 1, "Stopped": 0}
    assert d["ObjectiveStatusCounters"] == {"Succeeded": 2, "Pending": 1, "Failed": 1}
    best = d["BestTrainingJob"]
    assert best["TrainingJobName"] == t4 and best["TunedHyperParameters"] == {"learning_rate": "0.1", "max_depth": "4"}
    assert best["FinalHyperParameterTuningJobObjectiveMetric"] == {"Type": "Minimize", "MetricName": METRIC,
                                                                   "Value": 0.12}

    listed = list_training_jobs_for_tuning_job(backend, name)
    assert [s["TrainingJobName"] for s in listed] == [t1, t2, t3, t4]  # SortBy Name, Ascending by default
    by_name = {s["TrainingJobName"]: s for s in listed}
    assert (by_name[t2]["ObjectiveStatus"] == "Pending"
            and "FinalHyperParameterTuningJobObjectiveMetric" not in by_name[t2])
    assert by_name[t3]["FailureReason"] == "AlgorithmError: ExitCode 1" and by_name[t3]["ObjectiveStatus"] == "Failed"
    assert all(s["TuningJobName"] == name for s in listed)
    # every page is read (3 a page here), filters and sorting are the service's
    assert ([s["TrainingJobName"] for s in backend.list_training_jobs_for_tuning_job(name, page_size=3)]
            == [t1, t2, t3, t4])
    assert [s["TrainingJobName"] for s in list_training_jobs_for_tuning_job(backend, name, status_equals="Completed")] \
        == [t1, t4]
    ordered = list_training_jobs_for_tuning_job(backend, name, sort_by="FinalObjectiveMetricValue",
                                                sort_order="Ascending")
    assert [s["TrainingJobName"] for s in ordered][:2] == [t4, t1]
    # each trial is a training job of the definition: static + tuned hyperparameters, the objective metric
    trial = backend.describe("training", t4)
    static = plan(name, s3_bucket).request["TrainingJobDefinition"]["StaticHyperParameters"]
    assert trial["HyperParameters"] == {**static, "learning_rate": "0.1", "max_depth": "4",
                                        "_tuning_objective_metric": METRIC}
    assert trial["AlgorithmSpecification"]["MetricDefinitions"] == [{"Name": METRIC, "Regex": r"val_rmse=([0-9.]+)"}]
    assert trial["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://{s3_bucket}/out/{t4}/output/model.tar.gz"

    # StopHyperParameterTuningJob: Stopping, then Stopped, and the running trial with it
    backend.stop("tuning", name)
    assert backend.describe("tuning", name)["HyperParameterTuningJobStatus"] == "Stopping"
    d = backend.describe("tuning", name)
    assert d["HyperParameterTuningJobStatus"] == "Stopped"
    assert d["TrainingJobStatusCounters"]["Stopped"] == 1 and d["TrainingJobStatusCounters"]["InProgress"] == 0
    assert backend.describe("training", t2)["TrainingJobStatus"] == "Stopped"


def test_listing_the_trials_of_a_missing_tuning_job_keeps_the_service_error(backend):
    with pytest.raises(BackendError) as info:
        list_training_jobs_for_tuning_job(backend, unique("missing"))
    assert info.value.code == "ResourceNotFound"
    assert info.value.operation == "ListTrainingJobsForHyperParameterTuningJob"


def test_operator_waits_for_the_trials_and_returns_the_best_with_its_model(moto_server, s3_bucket, tmp_path,
                                                                          monkeypatch):
    from airflow_smdist.operators.tuning import SmdistTuningOperator
    from airflow_smdist.sensors.tuning import SmdistTuningSensor

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_server)  # the source upload and the results go to moto's S3
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('val_rmse=0.1')\n")
    name = unique("hpo-op")
    plan_tuning_job(name, [
        {"tuned": {"learning_rate": "0.05", "max_depth": "3"}, "status": "Completed", "objective": 0.30},
        {"tuned": {"learning_rate": "0.12", "max_depth": "5"}, "status": "Completed", "objective": 0.11},
        {"tuned": {"learning_rate": "0.25", "max_depth": "6"}, "status": "Stopped", "objective": 0.40},
        {"tuned": {"learning_rate": "0.01", "max_depth": "2"}, "status": "Failed",
         "failure_reason": "AlgorithmError: boom"},
    ])
    op = SmdistTuningOperator(
        task_id="tune", job_name=name, backend="sagemaker", entry_point="train.py", source_dir=str(src),
        image_uri=IMAGE, role=ROLE, output_path=f"s3://{s3_bucket}/out", instance_type="ml.m5.large",
        hyperparameters={"n_estimators": 50}, metric_definitions=[{"Name": METRIC, "Regex": r"val_rmse=([0-9.]+)"}],
        objective_metric_name=METRIC, objective_type="Minimize", strategy="Random", max_jobs=4, max_parallel_jobs=1,
        hyperparameter_ranges=RANGES, poll_interval=0, region_name=REGION)
    pushed = {}
    ti = SimpleNamespace(dag_id="smdist_tests", task_id="tune", map_index=-1,
                         xcom_push=lambda key, value, **kw: pushed.__setitem__(key, value))
    result = op.execute({"ti": ti, "run_id": "manual__1"})
    assert result["status"] == "Completed" and result["backend"] == "sagemaker"
    trial_names = [s["TrainingJobName"] for s in list_training_jobs_for_tuning_job(SageMakerBackend(), name)]
    assert len(trial_names) == 4
    assert result["best_training_job"] == trial_names[1]
    assert result["best_objective_value"] == 0.11
    assert result["best_hyperparameters"] == {"learning_rate": 0.12, "max_depth": 5}
    assert result["model_artifacts"] == f"s3://{s3_bucket}/out/{trial_names[1]}/output/model.tar.gz"
    assert result["training_job_status_counters"] == {"Completed": 2, "InProgress": 0, "RetryableError": 0,
                                                      "NonRetryableError": 1, "Stopped": 1}
    assert result["training_image"] == IMAGE and result["entry_point"] == "train.py"
    assert result["source_uri"] == f"s3://{s3_bucket}/out/{name}/source/sourcedir.tar.gz"
    assert pushed["smdist_tuning_job"]["job_name"] == name  # the console link
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name=REGION)
    s3.head_object(Bucket=s3_bucket, Key=f"out/{name}/source/sourcedir.tar.gz")  # uploaded before the call
    assert result["plot_uri"] == f"s3://{s3_bucket}/out/{name}/tuning-results/objective.png"
    png = s3.get_object(Bucket=s3_bucket, Key=f"out/{name}/tuning-results/objective.png")["Body"].read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(s3.get_object(Bucket=s3_bucket, Key=f"out/{name}/tuning-results/trials.json")["Body"].read())
    assert [r["training_job"] for r in doc["trials"]] == trial_names
    assert [r["objective"] for r in doc["trials"]] == [0.30, 0.11, 0.40, None]
    json.dumps(result)

    sensor = SmdistTuningSensor(task_id="wait", job_name=name, backend="sagemaker", region_name=REGION)
    poked = sensor.poke({})
    assert poked.is_done and poked.xcom_value["best_training_job"] == trial_names[1]


def test_sensor_waits_for_a_running_tuning_job(backend, s3_bucket):
    from airflow_smdist._compat import AirflowException
    from airflow_smdist.sensors.tuning import SmdistTuningSensor

    name = unique("hpo-sensed")
    backend.submit("tuning", plan(name, s3_bucket).request)
    start_tuning_job(name)
    trial = add_tuning_trial(name, {"learning_rate": "0.1", "max_depth": "3"})
    sensor = SmdistTuningSensor(task_id="wait", job_name=name, backend="sagemaker", region_name=REGION)
    assert sensor.poke({}) is False
    set_tuning_trial(trial, "Completed", objective=0.2)
    finish_tuning_job(name)
    result = sensor.poke({}).xcom_value
    assert result["best_training_job"] == trial and result["best_objective_value"] == 0.2
    other = unique("hpo-failed")
    backend.submit("tuning", plan(other, s3_bucket).request)
    start_tuning_job(other)
    finish_tuning_job(other, "Failed", failure_reason="ClientError: all training jobs failed")
    sensor = SmdistTuningSensor(task_id="wait2", job_name=other, backend="sagemaker", region_name=REGION)
    with pytest.raises(AirflowException, match="ended Failed: ClientError: all training jobs failed"):
        sensor.poke({})


def test_tuning_logs_are_its_trials_streams_merged_by_time(backend, s3_bucket, moto_server):
    from moto_server import add_tuning_trial, seed_log_stream, start_tuning_job

    name = unique("hpologs")
    backend.submit("tuning", plan(name, s3_bucket).request)
    start_tuning_job(name)
    first = add_tuning_trial(name, {"learning_rate": "0.1", "max_depth": "3"})
    second = add_tuning_trial(name, {"learning_rate": "0.2", "max_depth": "4"})
    import time

    group = "/aws/sagemaker/TrainingJobs"
    t0 = int(time.time() * 1000) - 60_000  # CloudWatch refuses events older than 14 days
    seed_log_stream(moto_server, group, f"{first}/algo-1-1700000000", [(t0, "a0"), (t0 + 2000, "a2")])
    seed_log_stream(moto_server, group, f"{second}/algo-1-1700000000", [(t0 + 1000, "b1")])
    events, cursor = backend.log_events("tuning", name)
    assert [(e.host, e.message) for e in events] == [
        (f"{first[len(name) + 1:]}/algo-1", "a0"), (f"{second[len(name) + 1:]}/algo-1", "b1"),
        (f"{first[len(name) + 1:]}/algo-1", "a2")]
    assert json.loads(json.dumps(cursor)) == cursor and set(cursor) == {first, second}
    seed_log_stream(moto_server, group, f"{second}/algo-2-1700000000", [(t0 + 3000, "b3")])
    again, _ = backend.log_events("tuning", name, cursor)
    assert [(e.host, e.message) for e in again] == [(f"{second[len(name) + 1:]}/algo-2", "b3")]
