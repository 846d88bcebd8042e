"""CreateModel / CreateTransformJob / processing fan-out requests: shapes against botocore's model, the
service's rules, and the runner's command line meaning what the transform request means."""

from __future__ import annotations

import pytest
from botocore.validate import ParamValidator

from airflow_smdist.runtime import batch_runner as inference
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.transform import (
    CODE_IN_MODEL,
    RUNNER_NAME,
    build_model,
    build_processing_inference,
    build_transform,
    check_settings,
    model_request,
    transform_request,
)
from airflow_smdist.specs.validate import operation_model

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"


def botocore_errors(operation: str, request: dict) -> str:
    report = ParamValidator().validate(request, operation_model(operation).input_shape)
    return report.generate_report() if report.has_errors() else ""


def transform(**kw):
    args = dict(job_name="score-1", model_name="my-model", input_uri="s3://bucket/in/", output_uri="s3://bucket/out/")
    args.update(kw)
    return build_transform(**args)


def test_full_transform_request_maps_every_setting_and_passes_botocore():
    req = transform(instance_type="ml.c5.2xlarge", instance_count="4", content_type="text/csv", split_type="Line",
                    compression="Gzip", batch_strategy="MultiRecord", max_payload_mb="5",
                    max_concurrent_transforms=4, assemble_with="Line", accept="text/csv", input_filter="$[1:]",
                    join_source="Input", output_filter="$[0,-1]", environment={"LOG": 1},
                    invocations_timeout=120, invocations_max_retries=1, tags={"team": "ml"},
                    output_kms_key="alias/out", allow_local_uris=False)
    assert botocore_errors("CreateTransformJob", req) == ""
    assert req["TransformInput"] == {"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix",
                                                                      "S3Uri": "s3://bucket/in/"}},
                                     "ContentType": "text/csv", "CompressionType": "Gzip", "SplitType": "Line"}
    assert req["TransformOutput"] == {"S3OutputPath": "s3://bucket/out/", "Accept": "text/csv",
                                      "AssembleWith": "Line", "KmsKeyId": "alias/out"}
    assert req["TransformResources"] == {"InstanceType": "ml.c5.2xlarge", "InstanceCount": 4}
    assert (req["BatchStrategy"], req["MaxPayloadInMB"], req["MaxConcurrentTransforms"]) == ("MultiRecord", 5, 4)
    assert req["DataProcessing"] == {"InputFilter": "$[1:]", "OutputFilter": "$[0,-1]", "JoinSource": "Input"}
    assert req["ModelClientConfig"] == {"InvocationsTimeoutInSeconds": 120, "InvocationsMaxRetries": 1}
    assert req["Environment"] == {"LOG": "1"} and req["Tags"] == [{"Key": "team", "Value": "ml"}]
    assert transform_request(job_name="score-1", model_name="my-model", input_uri="s3://bucket/in/",
                             output_uri="s3://bucket/out/") == transform()


def test_minimal_request_leaves_service_defaults_out():
    req = transform()
    assert botocore_errors("CreateTransformJob", req) == ""
    assert set(req) == {"TransformJobName", "ModelName", "TransformInput", "TransformOutput", "TransformResources"}
    assert req["TransformResources"] == {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1}


@pytest.mark.parametrize("kwargs, field, words", [
    ({"batch_strategy": "MultiRecord"}, "batch_strategy", "split_type"),
    ({"split_type": "Lines"}, "split_type", "did you mean 'Line'"),
    ({"max_payload_mb": 101}, "max_payload_mb", "at most 100"),
    ({"max_concurrent_transforms": 20}, "max_concurrent_transforms", "at most 100"),  # 20 x default 6 MB
    ({"max_concurrent_transforms": 4, "max_payload_mb": 30}, "max_concurrent_transforms", "lower"),
    ({"invocations_timeout": 4000}, "invocations_timeout", "3600"),
    ({"invocations_max_retries": 4}, "invocations_max_retries", "0 to 3"),
    ({"input_filter": "features"}, "input_filter", "start it with '$'"),
    ({"output_filter": "$[[["}, "output_filter", "not a valid JSONPath"),
    ({"join_source": "Output"}, "join_source", "Input"),
    ({"instance_count": 0}, "instance_count", ">= 1"),
    ({"instance_count": "two"}, "instance_count", "not an integer"),
    ({"instance_type": "ml.m5.xlarg"}, "instance_type", "did you mean 'ml.m5.xlarge'"),
    ({"s3_data_type": "AugmentedManifestFile"}, "s3_data_type", "S3Prefix"),
])
def test_service_rules_are_checked_with_the_field_named(kwargs, field, words):
    with pytest.raises(SpecError) as e:
        transform(**kwargs)
    assert e.value.field == field
    assert words in str(e.value)


def test_sagemaker_jsonpath_union_of_index_and_slice_is_accepted():
    req = transform(split_type="Line", output_filter="$[0,5:]", input_filter="$['id','features']")
    assert req["DataProcessing"]["OutputFilter"] == "$[0,5:]"


def test_environment_limit_and_local_uris_come_from_the_service_model():
    with pytest.raises(SpecError) as e:
        transform(environment={f"K{i}": "v" for i in range(17)})
    assert "TransformJob.Environment" in str(e.value) and "at most 16" in str(e.value)
    local = transform(input_uri="file:///data/in", output_uri="file:///data/out")
    assert local["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"] == "file:///data/in"
    with pytest.raises(SpecError) as e:
        transform(input_uri="file:///data/in", allow_local_uris=False)
    assert "S3Uri" in str(e.value)


def test_model_with_code_inside_the_artifact():
    req = model_request(model_name="m-1", model_data="s3://b/train/output/model.tar.gz", role=ROLE, image_uri=IMAGE,
                        environment={"SAGEMAKER_MODEL_SERVER_WORKERS": 2}, region="eu-west-1")
    assert botocore_errors("CreateModel", req) == ""
    assert req["PrimaryContainer"] == {
        "Image": IMAGE, "ModelDataUrl": "s3://b/train/output/model.tar.gz",
        "Environment": {"SAGEMAKER_PROGRAM": "inference.py", "SAGEMAKER_SUBMIT_DIRECTORY": CODE_IN_MODEL,
                        "SAGEMAKER_CONTAINER_LOG_LEVEL": "20", "SAGEMAKER_REGION": "eu-west-1",
                        "SAGEMAKER_MODEL_SERVER_WORKERS": "2"}}
    assert req["ExecutionRoleArn"] == ROLE


def test_model_with_uploaded_inference_code_names_the_upload():
    plan = build_model(model_name="m-2", model_data="s3://b/model.tar.gz", role=ROLE, image_uri=IMAGE,
                       entry_point="serve/inference.py", source_dir="/src", code_location="s3://b/code/")
    env = plan.request["PrimaryContainer"]["Environment"]
    assert env["SAGEMAKER_PROGRAM"] == "serve/inference.py"
    assert env["SAGEMAKER_SUBMIT_DIRECTORY"] == plan.source_uri == "s3://b/code/m-2/sourcedir.tar.gz"
    assert (plan.source_dir, plan.entry_point) == ("/src", "serve/inference.py")
    alone = build_model(model_name="m-3", model_data="s3://b/model.tar.gz", role=ROLE, image_uri=IMAGE,
                        entry_point="/home/me/inference.py", code_location="s3://b/code")
    assert alone.request["PrimaryContainer"]["Environment"]["SAGEMAKER_PROGRAM"] == "inference.py"
    assert alone.source_dir == "/home/me/inference.py"


def test_model_image_from_the_sdk_for_a_framework():
    plan = build_model(model_name="m-4", model_data="s3://b/model.tar.gz", role=ROLE, framework="sklearn",
                       framework_version="1.2-1", instance_type="ml.m5.xlarge", region="us-east-1")
    assert plan.image == "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
    with pytest.raises(SpecError) as e:
        build_model(model_name="m-5", model_data="s3://b/model.tar.gz", role=ROLE, framework="sklearn",
                    framework_version="9.9")
    assert e.value.field == "framework_version" and "Supported sklearn version" in str(e.value)


@pytest.mark.parametrize("kwargs, field", [
    ({"image_uri": IMAGE, "framework": "sklearn", "framework_version": "1.2-1"}, "image_uri"),
    ({}, "image_uri"),
    ({"image_uri": IMAGE, "source_dir": "/src"}, "source_dir"),
    ({"image_uri": IMAGE, "entry_point": "inference.py"}, "code_location"),
    ({"image_uri": IMAGE, "entry_point": "inference.py", "code_location": "s3://b/c",
      "enable_network_isolation": True}, "enable_network_isolation"),
    ({"image_uri": IMAGE, "model_data": "model.tar.gz"}, "model_data"),
])
def test_model_mistakes(kwargs, field):
    args = dict(model_name="m-6", model_data="s3://b/model.tar.gz", role=ROLE)
    args.update(kwargs)
    with pytest.raises(SpecError) as e:
        build_model(**args)
    assert e.value.field == field


def test_processing_fan_out_request_and_runner_arguments_mean_the_transform_request():
    settings = dict(content_type="text/csv", accept="text/csv", split_type="Line", batch_strategy="MultiRecord",
                    max_payload_mb=2, max_concurrent_transforms=3, assemble_with="Line", input_filter="$[1:]",
                    join_source="Input", output_filter="$[0,-1]", invocations_timeout=60,
                    invocations_max_retries=0)
    model = model_request(model_name="m-7", model_data="s3://b/model.tar.gz", role=ROLE, image_uri=IMAGE)
    plan = build_processing_inference(job_name="score-p", role=ROLE, model=model, input_uri="s3://b/in/",
                                      output_uri="s3://b/out/", runner=f"/tmp/x/{RUNNER_NAME}",
                                      code_location="s3://b/out/_smdist/code", instance_count=3,
                                      settings=check_settings(**settings), allow_local_uris=False)
    req = plan.request
    assert botocore_errors("CreateProcessingJob", req) == ""
    inputs = {i["InputName"]: i["S3Input"] for i in req["ProcessingInputs"]}
    assert inputs["data"]["S3Uri"] == "s3://b/in/" and inputs["data"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert inputs["model"]["S3Uri"] == "s3://b/model.tar.gz"
    assert inputs["model"]["S3DataDistributionType"] == "FullyReplicated"
    assert inputs["code"]["S3Uri"].endswith(f"/score-p/input/code/{RUNNER_NAME}")
    assert [u.uri for u in plan.uploads] == ["s3://b/out/_smdist/code/score-p/input/code"]
    assert req["AppSpecification"]["ContainerEntrypoint"] == ["python3", f"/opt/ml/processing/input/code/{RUNNER_NAME}"]
    assert req["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"] == "s3://b/out/"
    assert req["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 3
    assert req["Environment"]["SAGEMAKER_PROGRAM"] == "inference.py"
    assert "SAGEMAKER_SUBMIT_DIRECTORY" not in req["Environment"]
    # the runner reads its arguments into exactly the settings a transform job with these fields has
    args = inference._parser().parse_args(req["AppSpecification"]["ContainerArguments"])
    assert args.defaults == "sklearn" and args.input == "/opt/ml/processing/input/data"
    from_args = inference.Settings(
        content_type=args.content_type, accept=args.accept, split_type=args.split_type, compression=args.compression,
        batch_strategy=args.batch_strategy, max_payload_mb=args.max_payload_mb,
        max_concurrent_transforms=args.max_concurrent_transforms, assemble_with=args.assemble_with,
        input_filter=args.input_filter, join_source=args.join_source, output_filter=args.output_filter,
        invocations_timeout=args.invocations_timeout, invocations_max_retries=args.invocations_max_retries)
    assert from_args == inference.Settings.from_request(transform(**settings))


def test_processing_fan_out_takes_a_sourcedir_and_needs_the_runner_name():
    model = model_request(model_name="m-8", model_data="s3://b/model.tar.gz", role=ROLE, image_uri=IMAGE,
                          entry_point="inference.py", source_dir="/src", code_location="s3://b/code")
    req = build_processing_inference(job_name="score-q", role=ROLE, model=model, input_uri="s3://b/in/",
                                     output_uri="s3://b/out/", runner=f"s3://b/r/{RUNNER_NAME}").request
    inputs = {i["InputName"]: i["S3Input"] for i in req["ProcessingInputs"]}
    assert inputs["sourcedir"]["S3Uri"] == "s3://b/code/m-8/sourcedir.tar.gz"
    args = req["AppSpecification"]["ContainerArguments"]
    assert args[args.index("--code-dir") + 1] == "/opt/ml/processing/input/sourcedir/sourcedir.tar.gz"
    with pytest.raises(SpecError) as e:
        build_processing_inference(job_name="score-q", role=ROLE, model=model, input_uri="s3://b/in/",
                                   output_uri="s3://b/out/", runner="s3://b/r/inference.py")
    assert e.value.field == "runner"
