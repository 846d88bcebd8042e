"""Wrong types are a SpecError naming the field and the fix, never a raw traceback (issue 12, Errors)."""

from __future__ import annotations

import pytest

from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.training import build_training
from airflow_smdist.specs.tuning import build_tuning

BASE = dict(job_name="j", role="arn:aws:iam::123456789012:role/R", output_path="s3://b/o", entry_point="t.py",
            source_dir="s3://b/s/sourcedir.tar.gz", image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1",
            instance_type="ml.m5.xlarge")


@pytest.mark.parametrize("field, value, says", [
    ("inputs", "{'train': 's3://b/t/'}", "render_template_as_native_obj"),  # un-native Jinja
    ("hyperparameters", "{'lr': 0.1}", "render_template_as_native_obj"),
    ("hyperparameters", ["lr", 0.1], "not a dict"),
    ("environment", ["A=1"], "not a dict"),
    ("tags", ["team=ml"], "Key"),
    ("tags", "team=ml", "not a dict"),
])
def test_wrong_container_types_name_the_field(field, value, says):
    with pytest.raises(SpecError) as info:
        build_training(**{**BASE, field: value})
    assert info.value.field == field and says in str(info.value)


def test_the_sdk_forms_still_work():
    plan = build_training(**BASE, inputs="s3://b/train/", tags=[{"Key": "team", "Value": "ml"}])
    assert [c["ChannelName"] for c in plan.request["InputDataConfig"]] == ["training"]  # as Estimator.fit("s3://...")
    assert plan.request["Tags"] == [{"Key": "team", "Value": "ml"}]


@pytest.mark.parametrize("regex, says", [("loss=([0-9.]+", "not a valid regular expression"),
                                         ("loss=[0-9.]+", "has 0 capture groups"),
                                         ("(loss|acc)=([0-9.]+)", "has 2 capture groups")])
def test_metric_regexes_are_compiled_and_need_one_capture_group(regex, says):
    with pytest.raises(SpecError) as info:
        build_training(**BASE, metric_definitions=[{"Name": "ok", "Regex": "a=([0-9]+)"},
                                                   {"Name": "loss", "Regex": regex}])
    assert info.value.field == "metric_definitions[1].Regex" and says in str(info.value)
    build_training(**BASE, metric_definitions=[{"Name": "loss", "Regex": "(?:loss|cost)=([0-9.]+)"}])


def test_tuning_ranges_given_as_a_json_string_say_so():
    with pytest.raises(SpecError) as info:
        build_tuning(**BASE, objective_metric_name="loss",
                     metric_definitions=[{"Name": "loss", "Regex": "l=([0-9.]+)"}],
                     hyperparameter_ranges='{"lr": {"type": "continuous", "min": 0.1, "max": 1}}')
    assert info.value.field == "hyperparameter_ranges" and "render_template_as_native_obj" in str(info.value)
    assert "at least one" not in str(info.value)


def test_a_chain_needs_at_least_one_link():
    from airflow_smdist.operators.workflows import SageMakerTrainingChainOperator

    with pytest.raises(SpecError) as info:
        SageMakerTrainingChainOperator(task_id="c", output_path="s3://b/o", entry_point="t.py", max_links=0,
                                       checkpoint_s3_uri="s3://b/cp")
    assert info.value.field == "max_links"
