"""Processing on the sagemaker backend, over HTTP to the moto server: our requests are the ones the SageMaker
SDK's PySparkProcessor / ScriptProcessor send for the same arguments (captured from the SDK's own client),
the operators upload and submit, the sensor reads statuses, and local URIs never reach the service."""

from __future__ import annotations

import copy
import json
import time
import uuid
from types import SimpleNamespace

import boto3
import pytest

from airflow_smdist._compat import AirflowException
from airflow_smdist.backends.sagemaker import SageMakerBackend
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.processing import build_processing, build_pyspark_processing, upload_plan
from airflow_smdist.storage import Storage
from moto_server import REGION, seed_log_stream, set_job_status

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def context(run_id: str, task_id: str):
    return {"ti": SimpleNamespace(dag_id="dag", task_id=task_id, map_index=-1, try_number=1), "run_id": run_id}


@pytest.fixture
def s3(moto_server):
    return boto3.client("s3", endpoint_url=moto_server, region_name=REGION)


@pytest.fixture
def sdk_session(moto_server, s3_bucket, monkeypatch):
    """A SageMaker SDK session whose clients all go to the moto server, and the requests its
    CreateProcessingJob calls send (captured from the SDK's own botocore client, as sent)."""
    Session = pytest.importorskip("sagemaker.core.helper.session_helper").Session  # the oracle (the SDK)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)  # the SDK makes its S3 clients from the boto session

    boto_session = boto3.Session(region_name=REGION)
    sagemaker_client = boto_session.client("sagemaker", endpoint_url=moto_server)
    sent: list[dict] = []
    sagemaker_client.meta.events.register("provide-client-params.sagemaker.CreateProcessingJob",
                                          lambda params, **_: sent.append(copy.deepcopy(params)))
    session = Session(boto_session=boto_session, sagemaker_client=sagemaker_client, default_bucket=s3_bucket)
    return SimpleNamespace(session=session, sent=sent, bucket=s3_bucket)


def without_default_app_managed(request: dict) -> dict:
    """The request less ``AppManaged: false`` on its inputs and outputs. The builders send it on every one, as
    SDK 2 does (tests/integration/test_framework_processor_sdk2.py compares that as sent); SDK 3, the oracle
    here, leaves the API's default out. Nothing else is changed."""
    request = copy.deepcopy(request)
    for entry in request.get("ProcessingInputs", []) + request.get("ProcessingOutputConfig", {}).get("Outputs", []):
        if entry.get("AppManaged") is False:
            del entry["AppManaged"]
    return request


def objects(s3, bucket: str) -> dict[str, bytes]:
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def test_pyspark_request_and_uploads_are_what_the_sdk_sends(sdk_session, s3, tmp_path):
    from sagemaker.core.network import NetworkConfig
    from sagemaker.core.processing import ProcessingInput, ProcessingOutput
    from sagemaker.core.shapes import ProcessingS3Input, ProcessingS3Output
    from sagemaker.core.spark.processing import PySparkProcessor

    app, helper, jar = tmp_path / "preprocess.py", tmp_path / "helpers.py", tmp_path / "udfs.jar"
    app.write_text("print('app')\n")
    helper.write_text("X = 1\n")
    jar.write_bytes(b"PK\x05\x06" + b"\x00" * 18)
    name, bucket = unique("spark-sdk"), sdk_session.bucket
    configuration = [{"Classification": "spark-defaults", "Properties": {"spark.executor.memory": "2g"}},
                     {"Classification": "spark-env", "Properties": {}, "Configurations": [
                         {"Classification": "export", "Properties": {"PYTHONHASHSEED": "0"}}]}]
    processor = PySparkProcessor(role=ROLE, instance_type="ml.m5.2xlarge", instance_count=3, framework_version="3.5",
                                 sagemaker_session=sdk_session.session, max_runtime_in_seconds=3600,
                                 env={"STAGE": "prep"}, volume_size_in_gb=50,
                                 network_config=NetworkConfig(enable_network_isolation=False,
                                                              security_group_ids=["sg-0123"], subnets=["subnet-0123"]))
    processor.run(
        submit_app=str(app), submit_py_files=[f"s3://{bucket}/deps/lib.zip", str(helper)], submit_jars=[str(jar)],
        submit_files=[f"s3://{bucket}/deps/lookup.csv"],
        inputs=[ProcessingInput(input_name="raw", s3_input=ProcessingS3Input(
            s3_uri=f"s3://{bucket}/raw/", local_path="/opt/ml/processing/input/raw", s3_data_type="S3Prefix",
            s3_input_mode="File", s3_data_distribution_type="ShardedByS3Key"))],
        outputs=[ProcessingOutput(output_name="train", s3_output=ProcessingS3Output(
            s3_uri=f"s3://{bucket}/train/", local_path="/opt/ml/processing/output/train", s3_upload_mode="EndOfJob"))],
        arguments=["--rows", "100"], configuration=configuration, spark_event_logs_s3_uri=f"s3://{bucket}/events",
        job_name=name, wait=False, logs=False)
    (sdk_request,) = sdk_session.sent
    sdk_objects = objects(s3, bucket)

    plan = build_pyspark_processing(
        job_name=name, role=ROLE, submit_app=str(app), instance_type="ml.m5.2xlarge", instance_count=3,
        framework_version="3.5", submit_py_files=[f"s3://{bucket}/deps/lib.zip", str(helper)], submit_jars=[str(jar)],
        submit_files=[f"s3://{bucket}/deps/lookup.csv"],
        inputs={"raw": {"source": f"s3://{bucket}/raw/", "destination": "/opt/ml/processing/input/raw",
                        "distribution": "ShardedByS3Key"}},
        outputs={"train": {"source": "/opt/ml/processing/output/train", "destination": f"s3://{bucket}/train/"}},
        arguments=["--rows", 100], configuration=configuration, spark_event_logs_s3_uri=f"s3://{bucket}/events",
        code_location=f"s3://{bucket}", max_runtime_in_seconds=3600, env={"STAGE": "prep"}, volume_size_in_gb=50,
        network_config={"enable_network_isolation": False, "security_group_ids": ["sg-0123"],
                        "subnets": ["subnet-0123"]},
        region=REGION, allow_local_uris=False)
    assert without_default_app_managed(plan.request) == without_default_app_managed(sdk_request)
    # our uploads land on exactly the objects the SDK uploaded, with the same content
    written = upload_plan(plan, Storage())
    after = objects(s3, bucket)
    assert set(after) == set(sdk_objects) and {u.split("/", 3)[3] for u in written} == set(sdk_objects)
    for key, body in sdk_objects.items():
        if key.endswith("configuration.json"):
            assert json.loads(after[key]) == json.loads(body) == configuration
        else:
            assert after[key] == body


def test_script_request_is_what_script_processor_sends(sdk_session, tmp_path):
    from sagemaker.core.processing import ProcessingInput, ProcessingOutput, ScriptProcessor
    from sagemaker.core.shapes import ProcessingS3Input, ProcessingS3Output

    script = tmp_path / "prep.py"
    script.write_text("print('prep')\n")
    name, bucket = unique("script-sdk"), sdk_session.bucket
    ScriptProcessor(role=ROLE, image_uri=IMAGE, command=["python3"], instance_type="ml.c5.xlarge", instance_count=4,
                    sagemaker_session=sdk_session.session, tags=[{"Key": "team", "Value": "ml"}]).run(
        code=str(script),
        inputs=[ProcessingInput(input_name="shards", s3_input=ProcessingS3Input(
            s3_uri=f"s3://{bucket}/shards/", local_path="/opt/ml/processing/input/shards", s3_data_type="S3Prefix",
            s3_input_mode="File", s3_data_distribution_type="ShardedByS3Key"))],
        outputs=[ProcessingOutput(output_name="out", s3_output=ProcessingS3Output(
            s3_uri=f"s3://{bucket}/out/", local_path="/opt/ml/processing/output/out", s3_upload_mode="EndOfJob"))],
        arguments=["--k", "3"], job_name=name, wait=False, logs=False)
    (sdk_request,) = sdk_session.sent
    ours = build_processing(job_name=name, role=ROLE, image_uri=IMAGE, code=str(script), instance_type="ml.c5.xlarge",
                            instance_count=4, code_location=f"s3://{bucket}", arguments=["--k", 3],
                            inputs={"shards": {"source": f"s3://{bucket}/shards/", "distribution": "ShardedByS3Key"}},
                            outputs={"out": f"s3://{bucket}/out/"}, tags={"team": "ml"}, allow_local_uris=False)
    assert without_default_app_managed(ours.request) == without_default_app_managed(sdk_request)


def test_pyspark_operator_uploads_and_submits_on_sagemaker(moto_server, s3_bucket, s3, tmp_path):
    """Uploads and API calls both go through the Airflow connection aws_default (its endpoint: moto)."""
    from airflow_smdist.operators.processing import SageMakerPySparkProcessingOperator

    app = tmp_path / "preprocess.py"
    app.write_text("print('app')\n")
    name = unique("spark-op")
    seed_log_stream(moto_server, "/aws/sagemaker/ProcessingJobs", f"{name}/algo-1-1700000000",
                    [(int(time.time() * 1000), "spark-submit finished")])  # CloudWatch drops events > 14 days old
    op = SageMakerPySparkProcessingOperator(
        task_id="preprocess", backend="sagemaker", job_name=name, submit_app=str(app), framework_version="3.5",
        instance_count=2, code_location=f"s3://{s3_bucket}/code", role=ROLE,
        configuration=[{"Classification": "spark-defaults", "Properties": {"spark.sql.shuffle.partitions": 8}}],
        inputs={"raw": f"s3://{s3_bucket}/raw/"}, outputs={"train": f"s3://{s3_bucket}/train/"},
        arguments=["--input", "/opt/ml/processing/input/raw"], poll_interval=0.1)
    result = op.execute(context(f"run-{uuid.uuid4().hex}", "preprocess"))
    json.dumps(result)
    assert result["status"] == "Completed" and result["backend"] == "sagemaker" and result["job_name"] == name
    assert result["outputs"] == {"train": f"s3://{s3_bucket}/train/"}
    assert result["image_uri"].endswith("/sagemaker-spark-processing:3.5-cpu")
    described = boto3.client("sagemaker", endpoint_url=moto_server, region_name=REGION).describe_processing_job(
        ProcessingJobName=name)
    entry = described["AppSpecification"]["ContainerEntrypoint"]
    assert entry == ["smspark-submit", "/opt/ml/processing/input/code/preprocess.py"]
    assert described["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 2
    keys = set(objects(s3, s3_bucket))
    assert keys == {f"code/{name}/input/code/preprocess.py", f"code/{name}/input/conf/configuration.json"}
    assert any("spark-submit finished" in line for line in op._last_lines)  # CloudWatch logs reached the task log


def test_without_code_location_uploads_go_to_the_sdk_default_bucket(moto_server, s3, tmp_path):
    from airflow_smdist.operators.processing import SmdistProcessingOperator

    script = tmp_path / "prep.py"
    script.write_text("print('prep')\n")
    default_bucket = f"sagemaker-{REGION}-123456789012"  # moto's account for the test credentials
    s3.create_bucket(Bucket=default_bucket)
    name = unique("default-bucket")
    op = SmdistProcessingOperator(task_id="prep", backend="sagemaker", job_name=name, image_uri=IMAGE,
                                  code=str(script), role=ROLE, poll_interval=0.1)
    result = op.execute(context(f"run-{uuid.uuid4().hex}", "prep"))
    assert result["inputs"]["code"] == f"s3://{default_bucket}/{name}/input/code/prep.py"
    assert set(objects(s3, default_bucket)) >= {f"{name}/input/code/prep.py"}


def test_local_uris_are_refused_before_any_call_on_sagemaker(moto_server):
    from airflow_smdist.operators.processing import SmdistProcessingOperator

    name = unique("local-uri")
    op = SmdistProcessingOperator(task_id="prep", backend="sagemaker", job_name=name, image_uri=IMAGE,
                                  code="s3://b/prep.py", inputs={"raw": "file:///data/raw"}, role=ROLE)
    with pytest.raises(SpecError) as info:
        op.execute(context(f"run-{uuid.uuid4().hex}", "prep"))
    assert info.value.field == "inputs['raw'].source"
    client = boto3.client("sagemaker", endpoint_url=moto_server, region_name=REGION)
    assert not client.list_processing_jobs(NameContains=name)["ProcessingJobSummaries"]


def test_sensor_reads_the_status_and_reason_from_sagemaker(moto_server, s3_bucket):
    from airflow_smdist.sensors.processing import SmdistProcessingSensor

    name = unique("sensed")
    request = build_processing(job_name=name, role=ROLE, image_uri=IMAGE, code=f"s3://{s3_bucket}/prep.py",
                               outputs={"out": f"s3://{s3_bucket}/out/"}, allow_local_uris=False).request
    SageMakerBackend().submit("processing", request)
    sensor = SmdistProcessingSensor(task_id="wait", job_name=name, backend="sagemaker")
    ctx = context("run", "wait")
    set_job_status("processing", name, "InProgress")
    assert sensor.poke(ctx) is False
    set_job_status("processing", name, "Completed")
    done = sensor.poke(ctx)
    assert done.is_done and done.xcom_value["outputs"] == {"out": f"s3://{s3_bucket}/out/"}
    set_job_status("processing", name, "Failed", failure_reason="AlgorithmError: See job logs for more information")
    with pytest.raises(AirflowException, match="ended Failed: AlgorithmError: See job logs"):
        sensor.poke(ctx)
