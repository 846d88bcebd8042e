"""Processing request builders: the SDK's request shape, validation against botocore, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.processing import (
    build_processing,
    build_pyspark_processing,
    processing_request,
    pyspark_processing_request,
    spark_defaults,
    upload_plan,
    validate_configuration,
)
from airflow_smdist.specs.validate import operation_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"


def botocore_valid(request: dict) -> None:
    """botocore's own client-side validation (what boto3 would raise before sending)."""
    from botocore.validate import validate_parameters

    validate_parameters(request, operation_model("CreateProcessingJob").input_shape)


def spark(**kw):
    args = dict(job_name="prep-1", role=ROLE, submit_app="s3://code-bucket/apps/preprocess.py", framework_version="3.5")
    args.update(kw)
    return build_pyspark_processing(**args)


# ---- PySpark: the SDK's command, inputs and outputs ----------------------------------------------------------
def test_pyspark_request_has_the_sdk_command_inputs_and_outputs_in_order(tmp_path):
    app, dep, jar = tmp_path / "app.py", tmp_path / "helpers.py", tmp_path / "udf.jar"
    for f in (app, dep, jar):
        f.write_text("x")
    plan = spark(submit_app=str(app), submit_py_files=["s3://deps/lib.zip", str(dep)], submit_jars=[str(jar)],
                 submit_files=["s3://deps/lookup.csv"], instance_count="3", code_location="s3://bucket/prefix",
                 configuration=[{"Classification": "spark-defaults", "Properties": {"spark.executor.memory": "2g"}}],
                 spark_event_logs_s3_uri="s3://bucket/events", arguments=["--rows", 100, "--frac", 0.2],
                 inputs={"raw": {"source": "s3://data/raw/", "destination": "/opt/ml/processing/input/raw",
                                 "distribution": "ShardedByS3Key"}},
                 outputs={"train": "s3://data/train/"}, env={"STAGE": 1}, max_runtime_in_seconds="7200")
    req = plan.request
    botocore_valid(req)
    job = "s3://bucket/prefix/prep-1/input"
    assert req["AppSpecification"]["ContainerEntrypoint"] == [
        "smspark-submit",
        "--py-files", "s3://deps/lib.zip,/opt/ml/processing/input/py-files",
        "--jars", "/opt/ml/processing/input/jars",
        "--files", "s3://deps/lookup.csv",
        "--local-spark-event-logs-dir", "/opt/ml/processing/spark-events/",
        "/opt/ml/processing/input/code/app.py",
    ]
    assert req["AppSpecification"]["ContainerArguments"] == ["--rows", "100", "--frac", "0.2"]
    assert [i["InputName"] for i in req["ProcessingInputs"]] == ["raw", "py-files", "jars", "conf", "code"]
    by_name = {i["InputName"]: i["S3Input"] for i in req["ProcessingInputs"]}
    assert by_name["raw"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert by_name["py-files"] == {"S3Uri": f"{job}/py-files", "LocalPath": "/opt/ml/processing/input/py-files",
                                   "S3DataType": "S3Prefix", "S3InputMode": "File",
                                   "S3DataDistributionType": "FullyReplicated", "S3CompressionType": "None"}
    assert by_name["conf"]["S3Uri"] == f"{job}/conf/configuration.json"
    assert by_name["conf"]["LocalPath"] == "/opt/ml/processing/input/conf"
    assert by_name["code"]["S3Uri"] == f"{job}/code/app.py"
    assert by_name["code"]["LocalPath"] == "/opt/ml/processing/input/code"
    outputs = req["ProcessingOutputConfig"]["Outputs"]
    assert outputs == [
        {"OutputName": "train", "AppManaged": False,
         "S3Output": {"S3Uri": "s3://data/train/", "LocalPath": "/opt/ml/processing/output/train",
                      "S3UploadMode": "EndOfJob"}},
        {"OutputName": "spark-event-logs", "AppManaged": False,
         "S3Output": {"S3Uri": "s3://bucket/events", "LocalPath": "/opt/ml/processing/spark-events/",
                      "S3UploadMode": "Continuous"}},
    ]
    # AppManaged: false on every input too, as SDK 2's ProcessingInput always sends it
    assert [i["AppManaged"] for i in req["ProcessingInputs"]] == [False] * 5
    assert req["ProcessingResources"] == {"ClusterConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 3,
                                                            "VolumeSizeInGB": 30}}
    assert req["Environment"] == {"STAGE": "1"} and req["StoppingCondition"] == {"MaxRuntimeInSeconds": 7200}
    # what must be uploaded before submitting, at the URIs the request names
    uploads = {(u.uri, u.path, u.data) for u in plan.uploads}
    assert (f"{job}/py-files", str(dep), None) in uploads and (f"{job}/jars", str(jar), None) in uploads
    assert (f"{job}/code", str(app), None) in uploads
    conf = next(u for u in plan.uploads if u.data is not None)
    assert conf.uri == f"{job}/conf/configuration.json"
    assert json.loads(conf.data) == [{"Classification": "spark-defaults",
                                      "Properties": {"spark.executor.memory": "2g"}}]


def test_s3_app_and_dependencies_need_no_upload_and_no_code_location():
    plan = spark(submit_py_files=["s3://deps/lib.zip"])
    assert plan.uploads == []
    code = plan.request["ProcessingInputs"][-1]
    assert code["InputName"] == "code" and code["S3Input"]["S3Uri"] == "s3://code-bucket/apps/preprocess.py"
    assert plan.request["AppSpecification"]["ContainerEntrypoint"][-1] == "/opt/ml/processing/input/code/preprocess.py"
    assert "StoppingCondition" not in plan.request  # as the SDK: only when max_runtime_in_seconds is given


def test_local_files_without_code_location_are_refused_with_the_fix(tmp_path):
    with pytest.raises(SpecError) as info:
        spark(submit_app=str(tmp_path / "app.py"))
    assert info.value.field == "code_location" and "s3://" in info.value.fix
    with pytest.raises(SpecError, match="configuration_location"):
        spark(configuration={"Classification": "spark-defaults", "Properties": {"a": "b"}})


def test_spark_image_comes_from_the_sdk_data_for_the_region():
    image_uris = pytest.importorskip("sagemaker.core.image_uris")  # the oracle, where the SDK is installed

    for region, kw in (("us-east-1", {}), ("eu-west-1", {}), ("ap-southeast-2", {"py_version": "py312",
                                                                                  "container_version": "1.0"})):
        req = spark(region=region, **kw).request
        expected = image_uris.retrieve("spark", region, version="3.5", instance_type="ml.m5.xlarge",
                                       py_version=kw.get("py_version"),
                                       container_version="v1.0" if kw else None)
        assert req["AppSpecification"]["ImageUri"] == expected
        assert f".dkr.ecr.{region}.amazonaws.com/sagemaker-spark-processing:3.5-cpu" in expected
    assert spark(framework_version=3.3).request["AppSpecification"]["ImageUri"].endswith(":3.3-cpu")


def test_spark_image_errors_name_the_argument():
    with pytest.raises(SpecError) as info:
        spark(framework_version="9.9")
    assert info.value.field == "framework_version" and "3.5" in str(info.value)
    with pytest.raises(SpecError) as info:
        spark(py_version="py312")
    assert info.value.field == "container_version" and "both or neither" in str(info.value)
    with pytest.raises(SpecError, match="framework_version"):
        spark(framework_version=None)
    with pytest.raises(SpecError, match="not both"):
        spark(image_uri=IMAGE)
    assert spark(framework_version=None, image_uri=IMAGE).request["AppSpecification"]["ImageUri"] == IMAGE


def test_network_config_tags_and_kms_as_the_sdk_writes_them():
    req = spark(network_config={"enable_network_isolation": False, "encrypt_inter_container_traffic": True,
                                "security_group_ids": ["sg-1"], "subnets": ["subnet-1", "subnet-2"]},
                tags={"team": "ml"}, volume_kms_key="kms-vol", output_kms_key="kms-out", volume_size_in_gb=100,
                outputs={"o": "s3://b/o"}).request
    botocore_valid(req)
    assert req["NetworkConfig"] == {"EnableNetworkIsolation": False, "EnableInterContainerTrafficEncryption": True,
                                    "VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1", "subnet-2"]}}
    assert req["Tags"] == [{"Key": "team", "Value": "ml"}]
    assert req["ProcessingResources"]["ClusterConfig"]["VolumeKmsKeyId"] == "kms-vol"
    assert req["ProcessingResources"]["ClusterConfig"]["VolumeSizeInGB"] == 100
    assert req["ProcessingOutputConfig"]["KmsKeyId"] == "kms-out"
    assert spark(network_config={"enable_network_isolation": True}).request["NetworkConfig"] == {
        "EnableNetworkIsolation": True}
    with pytest.raises(SpecError, match="both subnets and security_group_ids"):
        spark(network_config={"subnets": ["subnet-1"]})
    with pytest.raises(SpecError, match="did you mean 'subnets'"):
        spark(network_config={"subnet": ["subnet-1"]})


# ---- configuration classifications ---------------------------------------------------------------------------------
def test_configuration_is_validated_and_normalised():
    conf = validate_configuration([
        {"Classification": "spark-defaults", "Properties": {"spark.sql.shuffle.partitions": 8,
                                                            "spark.dynamicAllocation.enabled": False}},
        {"Classification": "spark-env", "Configurations": [{"Classification": "export",
                                                             "Properties": {"PYTHONHASHSEED": "0"}}]},
    ])
    assert conf[0]["Properties"] == {"spark.sql.shuffle.partitions": "8", "spark.dynamicAllocation.enabled": "false"}
    assert conf[1] == {"Classification": "spark-env", "Properties": {},
                       "Configurations": [{"Classification": "export", "Properties": {"PYTHONHASHSEED": "0"}}]}
    assert spark_defaults(conf + [{"Classification": "spark-defaults", "Properties": {"a": "1"}}]) == {
        "spark.sql.shuffle.partitions": "8", "spark.dynamicAllocation.enabled": "false", "a": "1"}
    single = validate_configuration({"Classification": "core-site", "Properties": {"fs.s3a.fast.upload": "true"}})
    assert single == [{"Classification": "core-site", "Properties": {"fs.s3a.fast.upload": "true"}}]


@pytest.mark.parametrize("configuration, field, words", [
    ({"Classification": "spark-default", "Properties": {}}, "configuration.Classification",
     "did you mean 'spark-defaults'"),
    ([{"Classification": "spark-defaults", "Property": {}}], "configuration[0].Property", "did you mean 'Properties'"),
    ([{"Properties": {"a": "b"}}], "configuration[0].Classification", "is required"),
    ([{"Classification": "spark-defaults", "Properties": ["a=b"]}], "configuration[0].Properties", "mapping"),
    ([{"Classification": "spark-defaults", "Properties": {"a": {"b": 1}}}], "configuration[0].Properties['a']",
     "not a string"),
    ([{"Classification": "spark-defaults"}], "configuration[0].Properties", "is required"),
    ([{"Classification": "export", "Properties": {"A": "1"}}], "configuration[0].Classification", "*-env"),
    ([{"Classification": "spark-env", "Properties": {"A": "1"}}], "configuration[0].Configurations", "export"),
    ([{"Classification": "spark-env", "Properties": {}, "Configurations": [
        {"Classification": "spark-defaults", "Properties": {}}]}], "configuration[0].Configurations", "export"),
    ("spark.executor.memory=2g", "configuration", "classification dict"),
])
def test_configuration_mistakes_name_the_field(configuration, field, words):
    with pytest.raises(SpecError) as info:
        validate_configuration(configuration)
    assert info.value.field == field and words in str(info.value)


# ---- inputs and outputs -----------------------------------------------------------------------------------------
def test_inputs_and_outputs_in_every_accepted_form():
    req = spark(inputs=[{"input_name": "raw", "source": "s3://d/raw", "s3_data_type": "ManifestFile",
                         "distribution": "ShardedByS3Key"},
                        {"source": "s3://d/lookup"},
                        {"InputName": "api", "S3Input": {"S3Uri": "s3://d/api", "LocalPath": "/opt/ml/processing/api",
                                                          "S3DataType": "S3Prefix"}}],
                outputs=[{"output_name": "o", "source": "/opt/ml/processing/o", "destination": "s3://d/o",
                          "s3_upload_mode": "Continuous"}, {"destination": "s3://d/x"}]).request
    botocore_valid(req)
    names = [i["InputName"] for i in req["ProcessingInputs"]]
    assert names == ["raw", "input-2", "api", "code"]  # unnamed: input-N, as the SDK's _normalize_inputs
    assert req["ProcessingInputs"][0]["S3Input"]["S3DataType"] == "ManifestFile"
    assert req["ProcessingInputs"][1]["S3Input"]["LocalPath"] == "/opt/ml/processing/input/input-2"
    assert [o["OutputName"] for o in req["ProcessingOutputConfig"]["Outputs"]] == ["o", "output-2"]
    assert req["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3UploadMode"] == "Continuous"
    assert req["ProcessingOutputConfig"]["Outputs"][1]["S3Output"]["LocalPath"] == "/opt/ml/processing/output/output-2"


def test_app_managed_is_always_sent_and_true_only_when_set():
    """AppManaged on every input and output (SDK 2's ProcessingInput/ProcessingOutput always send it), false
    unless app_managed is set; an entry in the API's form keeps the value it gives."""
    req = spark(inputs={"own": {"source": "s3://d/own", "app_managed": True}, "plain": "s3://d/plain",
                        "api": {"S3Input": {"S3Uri": "s3://d/api", "LocalPath": "/opt/ml/processing/api",
                                            "S3DataType": "S3Prefix"}, "AppManaged": True}},
                outputs={"mine": {"destination": "s3://d/mine", "app_managed": "true"}, "out": "s3://d/out"}).request
    botocore_valid(req)
    assert {i["InputName"]: i["AppManaged"] for i in req["ProcessingInputs"]} == {
        "own": True, "plain": False, "api": True, "code": False}
    assert {o["OutputName"]: o["AppManaged"] for o in req["ProcessingOutputConfig"]["Outputs"]} == {
        "mine": True, "out": False}


def test_local_input_sources_are_uploaded_under_the_job(tmp_path):
    data = tmp_path / "raw"
    data.mkdir()
    plan = spark(inputs={"raw": str(data)}, code_location="s3://b/p")
    assert plan.request["ProcessingInputs"][0]["S3Input"]["S3Uri"] == "s3://b/p/prep-1/input/raw/"
    assert plan.uploads[0].path == str(data) and plan.uploads[0].allow_dir


@pytest.mark.parametrize("kw, field, words", [
    ({"inputs": {"raw": {"source": "s3://d/raw", "destination": "/data/raw"}}}, "inputs['raw'].destination",
     "/opt/ml/processing/"),
    ({"inputs": {"raw": {"source": "s3://d/raw", "destination": "/opt/ml/processing/../x"}}},
     "inputs['raw'].destination", "outside"),
    ({"outputs": {"o": {"source": "/tmp/out", "destination": "s3://d/o"}}}, "outputs['o'].source", "outside"),
    ({"inputs": {"raw": {"sorce": "s3://d/raw"}}}, "inputs['raw'].sorce", "did you mean 'source'"),
    ({"inputs": {"raw": {"destination": "/opt/ml/processing/input/raw"}}}, "inputs['raw'].source", "required"),
    ({"inputs": {"raw": "gs://d/raw"}}, "inputs['raw'].source", "not an S3 URI"),
    ({"outputs": {"o": {"source": "/opt/ml/processing/o"}}}, "outputs['o'].destination", "required"),
    ({"inputs": {"code": "s3://d/x"}}, "inputs['code']", "reserved"),
    ({"inputs": {"conf": "s3://d/x"}}, "inputs['conf']", "reserved"),
    ({"outputs": {"spark-event-logs": "s3://d/x"}}, "outputs['spark-event-logs']", "reserved"),
    ({"inputs": {"a": {"source": "s3://d/a", "destination": "/opt/ml/processing/in"},
                 "b": {"source": "s3://d/b", "destination": "/opt/ml/processing/in/"}}},
     "inputs['b'].destination", "also the destination"),
    ({"submit_py_files": "s3://d/lib.zip"}, "submit_py_files", "not a list"),
    ({"submit_jars": []}, "submit_jars", "empty"),
    ({"submit_files": ["gs://d/f"]}, "submit_files[0]", "scheme"),
    ({"submit_py_files": ["/a/x.py", "/b/x.py"], "code_location": "s3://b/p"}, "submit_py_files", "x.py"),
    ({"spark_event_logs_s3_uri": "/tmp/events"}, "spark_event_logs_s3_uri", "not an S3 URI"),
    ({"arguments": "--rows 5"}, "arguments", "not a list"),
    ({"instance_type": "ml.m5.xlarg"}, "instance_type", "ml.m5.xlarge"),
    ({"instance_type": "local"}, "instance_type", "local-mode"),
    ({"instance_count": "two"}, "instance_count", "not an integer"),
])
def test_argument_mistakes_name_the_field_and_fix(kw, field, words):
    with pytest.raises(SpecError) as info:
        spark(**kw)
    assert info.value.field == field, str(info.value)
    assert words in str(info.value)


def test_botocore_limits_are_checked_before_anything_runs():
    with pytest.raises(SpecError) as info:
        spark(instance_count=101)
    assert "ProcessingResources.ClusterConfig.InstanceCount" in str(info.value) and "100" in str(info.value)
    with pytest.raises(SpecError, match="777600"):
        spark(max_runtime_in_seconds=777601)
    with pytest.raises(SpecError, match="at most 10"):
        spark(inputs={f"in{i}": f"s3://d/{i}" for i in range(10)})  # + code = 11
    with pytest.raises(SpecError, match="ProcessingJobName"):
        spark(job_name="bad_name!")


def test_local_uris_only_on_the_local_backend():
    req = spark(inputs={"raw": "file:///data/raw"}, outputs={"o": "file:///data/o"}).request
    assert req["ProcessingInputs"][0]["S3Input"]["S3Uri"] == "file:///data/raw"
    with pytest.raises(SpecError, match="not an S3 URI"):
        spark(inputs={"raw": "file:///data/raw"}, allow_local_uris=False)


# ---- plain script processing ------------------------------------------------------------------------------------
def test_script_processing_is_what_script_processor_sends(tmp_path):
    script = tmp_path / "prep.py"
    script.write_text("print(1)")
    plan = build_processing(job_name="prep-2", role=ROLE, image_uri=IMAGE, code=str(script),
                            code_location="s3://b/c", instance_count=4, arguments=["--k", 3],
                            inputs={"shards": {"source": "s3://d/in/", "distribution": "ShardedByS3Key"}},
                            outputs={"out": "s3://d/out/"})
    req = plan.request
    botocore_valid(req)
    assert req["AppSpecification"] == {"ImageUri": IMAGE, "ContainerArguments": ["--k", "3"],
                                       "ContainerEntrypoint": ["python3", "/opt/ml/processing/input/code/prep.py"]}
    assert [i["InputName"] for i in req["ProcessingInputs"]] == ["shards", "code"]
    assert req["ProcessingInputs"][1]["S3Input"]["S3Uri"] == "s3://b/c/prep-2/input/code/prep.py"
    assert [(u.uri, u.path) for u in plan.uploads] == [("s3://b/c/prep-2/input/code", str(script))]
    bash = processing_request(job_name="p3", role=ROLE, image_uri=IMAGE, code="s3://b/run.sh", command=["bash"])
    assert bash["AppSpecification"]["ContainerEntrypoint"] == ["bash", "/opt/ml/processing/input/code/run.sh"]
    own = processing_request(job_name="p4", role=ROLE, image_uri=IMAGE, entrypoint=["python3", "-c", "print(1)"])
    assert own["AppSpecification"]["ContainerEntrypoint"] == ["python3", "-c", "print(1)"]
    assert "ProcessingInputs" not in own
    bare = processing_request(job_name="p5", role=ROLE, image_uri=IMAGE)
    assert bare["AppSpecification"] == {"ImageUri": IMAGE}


def test_script_framework_images_come_from_the_sdk():
    req = processing_request(job_name="p6", role=ROLE, framework="sklearn", framework_version="1.2-1",
                             code="s3://b/prep.py", region="eu-west-1")
    with pytest.raises(SpecError) as info:
        processing_request(job_name="p7", role=ROLE, framework="sklearn", framework_version="0.1", code="s3://b/p.py")
    assert info.value.field == "framework_version"
    with pytest.raises(SpecError, match="neither"):
        processing_request(job_name="p8", role=ROLE, code="s3://b/p.py")
    with pytest.raises(SpecError, match="both"):
        processing_request(job_name="p8", role=ROLE, image_uri=IMAGE, framework="sklearn", framework_version="1.2-1")
    with pytest.raises(SpecError) as info:
        processing_request(job_name="p9", role=ROLE, image_uri=IMAGE, command=["python3"])
    assert info.value.field == "command"
    with pytest.raises(SpecError) as info:
        processing_request(job_name="p9", role=ROLE, image_uri=IMAGE, code="s3://b/p.py", entrypoint=["x"])
    assert info.value.field == "entrypoint"
    image_uris = pytest.importorskip("sagemaker.core.image_uris")  # the oracle, where the SDK is installed
    assert req["AppSpecification"]["ImageUri"] == image_uris.retrieve(
        "sklearn", "eu-west-1", version="1.2-1", py_version="py3", instance_type="ml.m5.xlarge")


def test_pyspark_and_script_request_helpers_return_the_request():
    assert pyspark_processing_request(job_name="a", role=ROLE, submit_app="s3://b/a.py", framework_version="3.5")[
        "ProcessingJobName"] == "a"


# ---- uploads ----------------------------------------------------------------------------------------------------
def test_upload_plan_writes_what_the_request_names(tmp_path):
    app, lib = tmp_path / "app.py", tmp_path / "lib.py"
    app.write_text("print('app')")
    lib.write_text("X = 1")
    raw = tmp_path / "raw"
    (raw / "sub").mkdir(parents=True)
    (raw / "a.csv").write_text("1\n")
    (raw / "sub" / "b.csv").write_text("2\n")
    store = f"file://{tmp_path}/store"
    plan = spark(submit_app=str(app), submit_py_files=[str(lib)], inputs={"raw": str(raw)}, code_location=store,
                 configuration=[{"Classification": "spark-defaults", "Properties": {"k": "v"}}])
    written = upload_plan(plan)
    job = f"{store}/prep-1/input"
    assert sorted(written) == sorted([f"{job}/raw/a.csv", f"{job}/raw/sub/b.csv", f"{job}/py-files/lib.py",
                                      f"{job}/conf/configuration.json", f"{job}/code/app.py"])
    for uri in written:
        assert os.path.exists(uri[len("file://"):])
    assert (json.loads(open(f"{tmp_path}/store/prep-1/input/conf/configuration.json").read())[0]["Properties"]
            == {"k": "v"})
    code_uri = next(i for i in plan.request["ProcessingInputs"] if i["InputName"] == "code")["S3Input"]["S3Uri"]
    assert open(code_uri[len("file://"):]).read() == "print('app')"
    missing = spark(submit_app=str(tmp_path / "nope.py"), code_location=store)
    with pytest.raises(SpecError) as info:
        upload_plan(missing)
    assert info.value.field == "submit_app" and "not found" in str(info.value)
    as_dir = spark(submit_py_files=[str(raw)], code_location=store)
    with pytest.raises(SpecError, match="a directory, not a file"):
        upload_plan(as_dir)


# ---- import cost ------------------------------------------------------------------------------------------------
def test_builders_and_the_example_dag_import_nothing_heavy():
    code = ("import runpy, sys, json; import airflow_smdist.specs.processing, airflow_smdist.operators.processing, "
            "airflow_smdist.sensors.processing, airflow_smdist.backends.local.job.processing; "
            f"runpy.run_path({os.path.join(REPO, 'dags', 'example_pyspark_pipeline.py')!r}); "
            "print(json.dumps([m for m in ('pyspark', 'sagemaker', 'torch', 'sklearn') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("kwargs,field", [
    ({"source_dir": "src"}, "code"),
    ({"source_dir": "src", "code": "sub/process.py"}, "code"),
    ({"source_dir": "s3://b/src/", "code": "process.py"}, "source_dir"),
    ({"source_dir": "src", "code": "process.py", "inputs": {"entrypoint": "s3://b/x/"}}, "inputs['entrypoint']"),
])
def test_source_dir_mistakes_name_the_argument(kwargs, field):
    with pytest.raises(SpecError) as err:
        build_processing(job_name="j", role="arn:aws:iam::123456789012:role/R", image_uri="1.dkr.ecr/x:1",
                         code_location="s3://b/code", **kwargs)
    assert err.value.field == field


def test_source_dir_missing_script_is_refused_before_upload(tmp_path):
    (tmp_path / "other.py").write_text("")
    plan = build_processing(job_name="j", role="arn:aws:iam::123456789012:role/R", image_uri="1.dkr.ecr/x:1",
                            code_location=f"file://{tmp_path}/code", source_dir=str(tmp_path), code="process.py")
    with pytest.raises(SpecError) as err:
        upload_plan(plan)
    assert err.value.field == "code" and not (tmp_path / "code").exists()
