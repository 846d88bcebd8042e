"""tuning_request: the SDK tuner's request shape, validated against botocore's model; bad ranges rejected clearly."""

from __future__ import annotations

import copy
import json

import pytest

from airflow_smdist.specs.errors import SpecError, SpecErrors
from airflow_smdist.specs.training import build_training
from airflow_smdist.specs.tuning import (
    build_tuning,
    check_tuning_request,
    grid_combinations,
    parameter_ranges,
    training_definition,
    tuning_request,
)
from airflow_smdist.specs.validate import validate_request

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
METRICS = [{"Name": "validation:rmse", "Regex": r"val_rmse=([0-9.eE+-]+)"},
           {"Name": "train:rmse", "Regex": r"train_rmse=([0-9.eE+-]+)"}]
TRAIN = dict(role=ROLE, output_path="s3://bucket/out", entry_point="train.py", source_dir="/src", image_uri=IMAGE,
             instance_type="ml.m5.xlarge", hyperparameters={"n_estimators": 100, "epochs": 9, "learning_rate": 0.1},
             inputs={"train": "s3://bucket/train", "validation": "s3://bucket/val"}, metric_definitions=METRICS,
             checkpoint_s3_uri="s3://bucket/ckpt", max_run=1800, environment={"MODE": "tune"})
RANGES = {"learning_rate": {"type": "continuous", "min": 1e-3, "max": 0.5, "scaling": "Logarithmic"},
          "max_depth": {"type": "integer", "min": 2, "max": 8},
          "loss": ["squared_error", "huber"]}


def tune(**kw):
    args = dict(TRAIN, job_name="hpo-1", objective_metric_name="validation:rmse", objective_type="Minimize",
                hyperparameter_ranges=RANGES, max_jobs=20, max_parallel_jobs=2)
    args.update(kw)
    return build_tuning(**args)


def errors_of(info) -> list[str]:
    err = info.value
    return [str(e) for e in getattr(err, "errors", [err])]


# ---- the request --------------------------------------------------------------------------------------------
def test_request_is_the_training_job_plus_the_search_and_passes_botocore():
    plan = tune(strategy="Bayesian", random_seed=7, tags={"team": "ml"}, allow_local_uris=False)
    req = plan.request
    validate_request("CreateHyperParameterTuningJob", req, allow_local_uris=False)
    training = build_training(job_name="hpo-1", **TRAIN).request
    d = req["TrainingJobDefinition"]
    # the definition is the training job less its name, with the tuned names out of the static hyperparameters
    assert d["AlgorithmSpecification"] == {"TrainingImage": IMAGE, "TrainingInputMode": "File",
                                           "MetricDefinitions": METRICS}
    expected_static = {k: v for k, v in training["HyperParameters"].items() if k != "learning_rate"}
    assert d["StaticHyperParameters"] == expected_static
    assert "learning_rate" not in d["StaticHyperParameters"] and d["StaticHyperParameters"]["epochs"] == "9"
    # the source is named under the tuning job, as the SDK's tuner uploads it
    assert json.loads(d["StaticHyperParameters"]["sagemaker_submit_directory"]) == \
        "s3://bucket/out/hpo-1/source/sourcedir.tar.gz"
    for key in ("RoleArn", "InputDataConfig", "OutputDataConfig", "ResourceConfig", "StoppingCondition",
                "CheckpointConfig", "Environment"):
        assert d[key] == training[key], key
    assert "TrainingJobName" not in d and "HyperParameters" not in d
    cfg = req["HyperParameterTuningJobConfig"]
    assert cfg["Strategy"] == "Bayesian" and cfg["RandomSeed"] == 7
    assert cfg["HyperParameterTuningJobObjective"] == {"Type": "Minimize", "MetricName": "validation:rmse"}
    assert cfg["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 20, "MaxParallelTrainingJobs": 2}
    assert cfg["TrainingJobEarlyStoppingType"] == "Off"
    assert cfg["ParameterRanges"] == {
        "ContinuousParameterRanges": [{"Name": "learning_rate", "MinValue": "0.001", "MaxValue": "0.5",
                                       "ScalingType": "Logarithmic"}],
        "IntegerParameterRanges": [{"Name": "max_depth", "MinValue": "2", "MaxValue": "8", "ScalingType": "Auto"}],
        # the user's own image (image_uri), even in script mode: plain text, as the SDK's tuner sends for a
        # plain Estimator (only Framework estimators JSON-encode them: test_sdk_v2_parity)
        "CategoricalParameterRanges": [{"Name": "loss", "Values": ["squared_error", "huber"]}],
    }
    assert req["Tags"] == [{"Key": "team", "Value": "ml"}]  # on the tuning job; SageMaker propagates them
    assert plan.source_dir == "/src" and plan.source_uri == "s3://bucket/out/hpo-1/source/sourcedir.tar.gz"


def test_every_option_lands_where_the_api_wants_it():
    req = tune(strategy="Random", max_runtime=3600, early_stopping_type="auto", target_objective_value="0.05",
               max_jobs_not_improving=5, complete_on_convergence=True, random_seed="3",
               warm_start_parents=["parent-a", "parent-b"], warm_start_type="TransferLearning").request
    cfg = req["HyperParameterTuningJobConfig"]
    assert cfg["ResourceLimits"]["MaxRuntimeInSeconds"] == 3600
    assert cfg["TrainingJobEarlyStoppingType"] == "Auto"
    assert cfg["TuningJobCompletionCriteria"] == {
        "TargetObjectiveMetricValue": 0.05,
        "BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 5},
        "ConvergenceDetected": {"CompleteOnConvergence": "Enabled"}}
    assert cfg["RandomSeed"] == 3
    assert req["WarmStartConfig"] == {"ParentHyperParameterTuningJobs": [
        {"HyperParameterTuningJobName": "parent-a"}, {"HyperParameterTuningJobName": "parent-b"}],
        "WarmStartType": "TransferLearning"}
    validate_request("CreateHyperParameterTuningJob", req, allow_local_uris=False)


def test_hyperband_infers_max_resource_from_epochs_and_takes_explicit_bounds():
    cfg = tune(strategy="Hyperband").request["HyperParameterTuningJobConfig"]
    assert cfg["StrategyConfig"] == {"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 9}}
    cfg = tune(strategy="hyperband", hyperband_min_resource=2, hyperband_max_resource="27").request[
        "HyperParameterTuningJobConfig"]
    assert cfg["StrategyConfig"]["HyperbandStrategyConfig"] == {"MinResource": 2, "MaxResource": 27}


def test_hyperband_infers_from_every_epoch_name_sagemaker_reads():
    hps = {k: v for k, v in TRAIN["hyperparameters"].items() if k != "epochs"}
    for key in ("epochs", "numepochs", "n-epochs", "n_epochs", "num_epochs"):
        cfg = tune(strategy="Hyperband", hyperparameters={**hps, key: 12}).request["HyperParameterTuningJobConfig"]
        assert cfg["StrategyConfig"]["HyperbandStrategyConfig"]["MaxResource"] == 12, key


def test_grid_computes_the_number_of_combinations():
    ranges = {"learning_rate": [0.01, 0.1, 0.3], "max_depth": [2, 4], "loss": ["huber"]}
    plan = tune(strategy="Grid", hyperparameter_ranges=ranges, max_jobs=None)
    cfg = plan.request["HyperParameterTuningJobConfig"]
    assert plan.combinations == 6 and cfg["ResourceLimits"]["MaxNumberOfTrainingJobs"] == 6
    combos = grid_combinations(cfg["ParameterRanges"])
    assert len(combos) == 6 and len({json.dumps(c, sort_keys=True) for c in combos}) == 6
    # the user's own image: each value's text (test_sdk_v2_parity compares both encodings with the SDK's)
    assert {c["learning_rate"] for c in combos} == {"0.01", "0.1", "0.3"}
    framework = tune(strategy="Grid", hyperparameter_ranges=ranges, max_jobs=None, image_uri=None,
                     framework="pytorch", framework_version="2.5.1", py_version="py311")
    framework_combos = grid_combinations(framework.request["HyperParameterTuningJobConfig"]["ParameterRanges"])
    # a framework's image (the SDK's Framework estimators): the JSON encoding of each value's text
    assert {c["learning_rate"] for c in framework_combos} == {'"0.01"', '"0.1"', '"0.3"'}
    assert tune(strategy="Grid", hyperparameter_ranges=ranges, max_jobs=6).request == plan.request


def test_range_shorthands_and_the_sdk_names():
    r = parameter_ranges({"a": {"min": 1, "max": 5}, "b": {"min": 0.1, "max": 1}, "c": ("x", "y"),
                          "d": {"min_value": "1e-4", "max_value": "1e-1", "scaling_type": "Logarithmic"},
                          "e": {"values": [1, 2]}, "f": {"type": "continuous", "min": 0.9, "max": 0.999,
                                                          "scaling": "reverselogarithmic"}}, framework=False)
    assert r["IntegerParameterRanges"] == [{"Name": "a", "MinValue": "1", "MaxValue": "5", "ScalingType": "Auto"}]
    assert [x["Name"] for x in r["ContinuousParameterRanges"]] == ["b", "d", "f"]
    assert r["ContinuousParameterRanges"][1] == {"Name": "d", "MinValue": "1e-4", "MaxValue": "1e-1",
                                                 "ScalingType": "Logarithmic"}
    assert r["ContinuousParameterRanges"][2]["ScalingType"] == "ReverseLogarithmic"
    # not a framework's image (built-in algorithms, own images): plain strings
    assert r["CategoricalParameterRanges"] == [{"Name": "c", "Values": ["x", "y"]}, {"Name": "e", "Values": ["1", "2"]}]
    api = {"IntegerParameterRanges": [{"Name": "k", "MinValue": "1", "MaxValue": "3"}]}
    assert parameter_ranges(api, framework=True) == api


def test_the_definition_keeps_spot_vpc_and_distribution():
    training = build_training(job_name="hpo-2", **dict(TRAIN, use_spot_instances=True, max_wait=3600,
                                                      subnets=["subnet-1"], security_group_ids=["sg-1"],
                                                      instance_count=2, max_retry_attempts=2)).request
    d = training_definition(training, ["learning_rate"])
    assert d["EnableManagedSpotTraining"] is True and d["StoppingCondition"]["MaxWaitTimeInSeconds"] == 3600
    assert d["VpcConfig"] == {"Subnets": ["subnet-1"], "SecurityGroupIds": ["sg-1"]}
    assert d["ResourceConfig"]["InstanceCount"] == 2 and d["RetryStrategy"] == {"MaximumRetryAttempts": 2}


def test_tuning_request_returns_the_request():
    assert tuning_request(**dict(TRAIN, job_name="hpo-1", objective_metric_name="validation:rmse",
                                 hyperparameter_ranges=RANGES)) == tune(max_jobs=1, max_parallel_jobs=1,
                                                                        objective_type="Maximize").request


# ---- bad ranges and settings: clear errors -------------------------------------------------------------------
@pytest.mark.parametrize("ranges, field, words", [
    ({"learning_rate": {"type": "continuous", "min": 0.5, "max": 0.1}}, "(learning_rate)",
     "MinValue 0.5 is greater than MaxValue 0.1"),
    ({"max_depth": {"type": "integer", "min": 9, "max": 3}}, "(max_depth)", "greater than MaxValue"),
    ({"learning_rate": {"type": "continuous", "min": 0, "max": 0.1, "scaling": "Logarithmic"}}, "(learning_rate)",
     "Logarithmic scaling needs values above 0"),
    ({"max_depth": {"type": "integer", "min": -2, "max": 3, "scaling": "Logarithmic"}}, "(max_depth)",
     "Logarithmic scaling needs values above 0"),
    ({"momentum": {"type": "continuous", "min": 0.5, "max": 1.0, "scaling": "ReverseLogarithmic"}}, "(momentum)",
     "ReverseLogarithmic scaling needs 0 <= value < 1"),
    ({"momentum": {"type": "continuous", "min": -0.1, "max": 0.9, "scaling": "ReverseLogarithmic"}}, "(momentum)",
     "ReverseLogarithmic scaling needs 0 <= value < 1"),
    ({"max_depth": {"type": "integer", "min": 0, "max": 0, "scaling": "ReverseLogarithmic"}}, "(max_depth)",
     "ReverseLogarithmic scaling applies to continuous ranges only"),
    ({"max_depth": {"type": "integer", "min": 1.5, "max": 3}}, "max_depth", "is not an integer"),
    ({"loss": ["huber", "huber"]}, "(loss)", "more than once"),
])
def test_bad_ranges_are_rejected_with_the_field_and_the_fix(ranges, field, words):
    with pytest.raises(SpecError) as info:
        tune(hyperparameter_ranges=ranges)
    text = "\n".join(errors_of(info))
    assert field in text and words in text and "Fix:" in text, text


def test_every_bad_range_is_reported_at_once():
    with pytest.raises(SpecErrors) as info:
        tune(hyperparameter_ranges={"a": {"type": "continuous", "min": 2, "max": 1},
                                    "b": {"type": "continuous", "min": 0, "max": 1, "scaling": "Logarithmic"},
                                    "c": {"type": "integer", "min": 1, "max": 4, "scaling": "ReverseLogarithmic"}})
    assert len(info.value.errors) == 3


def test_grid_takes_categorical_ranges_only_and_the_exact_count():
    with pytest.raises(SpecError) as info:
        tune(strategy="Grid", max_jobs=None)
    text = "\n".join(errors_of(info))
    assert "Grid search takes categorical ranges only" in text and "learning_rate" in text and "max_depth" in text
    with pytest.raises(SpecError) as info:
        tune(strategy="Grid", hyperparameter_ranges={"a": [1, 2, 3], "b": ["x", "y"]}, max_jobs=5)
    assert "is 5, but Grid runs every combination: 6" in str(info.value) and "set it to 6" in str(info.value)


def test_hyperband_rules():
    with pytest.raises(SpecError) as info:
        tune(strategy="Hyperband", early_stopping_type="Auto")
    assert "TrainingJobEarlyStoppingType must be Off" in str(info.value)
    hps = {k: v for k, v in TRAIN["hyperparameters"].items() if k != "epochs"}
    with pytest.raises(SpecError) as info:
        tune(strategy="Hyperband", hyperparameters=hps)
    assert "MaxResource" in str(info.value) and "cannot be inferred" in str(info.value)
    with pytest.raises(SpecError) as info:
        tune(strategy="Hyperband", hyperband_min_resource=10, hyperband_max_resource=5)
    assert "MinResource 10 is greater than MaxResource 5" in str(info.value)
    with pytest.raises(SpecError) as info:
        tune(strategy="Hyperband", hyperband_max_resource=20001)
    assert "above the maximum 20000" in str(info.value)
    with pytest.raises(SpecError) as info:
        tune(strategy="Random", hyperband_max_resource=5)
    assert "only applies to the Hyperband strategy" in str(info.value)


def test_more_than_30_hyperparameters_are_rejected():
    ranges = {f"p{i}": {"type": "continuous", "min": 0, "max": 1} for i in range(20)}
    ranges.update({f"q{i}": {"type": "integer", "min": 0, "max": 3} for i in range(11)})
    with pytest.raises(SpecError) as info:
        tune(hyperparameter_ranges=ranges)
    assert "31 hyperparameters are searched; at most 30" in str(info.value)


def test_objective_must_be_a_metric_definition():
    with pytest.raises(SpecError) as info:
        tune(objective_metric_name="validation:mae")
    text = str(info.value)
    assert "no metric definition is named 'validation:mae'" in text and "validation:rmse" in text
    assert "metric_definitions" in text


@pytest.mark.parametrize("kwargs, words", [
    ({"strategy": "Bayes"}, "'Bayes' is not one of Bayesian, Random, Hyperband, Grid"),
    ({"objective_type": "Lower"}, "is not one of Maximize, Minimize"),
    ({"hyperparameter_ranges": {"lr": {"type": "float", "min": 0, "max": 1}}}, "'float' is not a range type"),
    ({"hyperparameter_ranges": {"lr": {"type": "continuous", "min": 0, "max": 1, "scale": "Log"}}},
     "is not a range setting"),
    ({"hyperparameter_ranges": {"lr": {"type": "continuous", "min": 0, "max": 1, "scaling": "Log"}}},
     "'Log' is not one of Auto, Linear, Logarithmic, ReverseLogarithmic"),
    ({"hyperparameter_ranges": {"lr": {"type": "continuous", "min": 0}}}, "needs both min and max"),
    ({"hyperparameter_ranges": {}}, "at least one hyperparameter range is required"),
    ({"hyperparameter_ranges": {"sagemaker_program": ["a.py"]}}, "not tunable"),
    ({"hyperparameter_ranges": {"loss": [str(i) for i in range(31)]}}, "at most 30"),
    ({"max_parallel_jobs": 0}, "below 1"),
    ({"max_jobs": "many"}, "is not an integer"),
    ({"max_runtime": 60}, "below the minimum 120"),
    ({"max_jobs_not_improving": 2}, "below 3"),
    ({"random_seed": -1}, "below 0"),
    ({"job_name": "a-tuning-job-name-that-is-far-too-long"}, "at most 32"),
    ({"warm_start_parents": [f"p{i}" for i in range(6)]}, "at most 5"),
    ({"warm_start_parents": ["p1", "p1"]}, "more than once"),
    ({"warm_start_parents": ["p1"], "warm_start_type": "Identical"}, "is not one of IdenticalDataAndAlgorithm"),
    ({"target_objective_value": "low"}, "is not a number"),
])
def test_bad_settings_are_rejected_clearly(kwargs, words):
    with pytest.raises(SpecError) as info:
        tune(**kwargs)
    assert words in "\n".join(errors_of(info)), errors_of(info)


def test_check_tuning_request_applies_the_rules_to_any_request():
    req = copy.deepcopy(tune(strategy="Random").request)
    check_tuning_request(req)  # a good request passes
    req["TrainingJobDefinition"]["StaticHyperParameters"]["max_depth"] = "3"
    req["HyperParameterTuningJobConfig"]["ParameterRanges"]["IntegerParameterRanges"][0]["MinValue"] = "10"
    with pytest.raises(SpecErrors) as info:
        check_tuning_request(req)
    text = str(info.value)
    assert "StaticHyperParameters['max_depth']: is also a tuned hyperparameter" in text
    assert "MinValue 10 is greater than MaxValue 8" in text
    req = copy.deepcopy(tune(strategy="Random").request)
    del req["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxNumberOfTrainingJobs"]
    with pytest.raises(SpecError, match="MaxNumberOfTrainingJobs: is required with the Random strategy"):
        check_tuning_request(req)


def test_botocore_reports_shape_errors_of_a_hand_written_request():
    req = copy.deepcopy(tune().request)
    req["HyperParameterTuningJobConfig"]["Strategy"] = "Bayes"
    req["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxParallel"] = 2
    with pytest.raises(SpecErrors) as info:
        validate_request("CreateHyperParameterTuningJob", req)
    text = str(info.value)
    assert "'Bayes' is not one of" in text and "MaxParallel: is not a member" in text
    assert "did you mean 'MaxParallelTrainingJobs'?" in text
