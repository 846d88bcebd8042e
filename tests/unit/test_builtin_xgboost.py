"""The local XGBoost emulation's hyperparameter, channel and metric handling (no job is run here)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from airflow_smdist.backends.local.inhost import builtin_xgboost as bx
from airflow_smdist.backends.local.job import training
from airflow_smdist.specs.builtin_algorithms import metric_definitions
from airflow_smdist.specs.errors import SpecError

IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def user_error(hps: dict) -> str:
    with pytest.raises(bx.UserError) as err:
        bx.validate_hyperparameters(hps)
    return str(err.value)


# ---- hyperparameter validation: the toolkit's messages ---------------------------------------------------------
def test_num_round_is_required_and_reported_first():
    assert user_error({}) == "Missing required hyperparameter: num_round"
    # required names are checked before unknown ones, as the toolkit does
    assert user_error({"max_detph": "3"}) == "Missing required hyperparameter: num_round"


@pytest.mark.parametrize("hps, message", [
    ({"num_round": "10", "max_detph": "3"}, "Extraneous hyperparameter found: max_detph"),
    ({"num_round": "ten"}, "Hyperparameter num_round: could not parse value (caused by ValueError)"),
    ({"num_round": "1.5"}, "Hyperparameter num_round: could not parse value (caused by ValueError)"),
    ({"num_round": "0"}, "Hyperparameter num_round: 0 is not in [1, +inf)"),
    ({"num_round": "5", "eta": "2"}, "Hyperparameter eta: 2.0 is not in [0, 1]"),
    ({"num_round": "5", "subsample": "0"}, "Hyperparameter subsample: 0.0 is not in (0, 1]"),
    ({"num_round": "5", "gamma": "-1"}, "Hyperparameter gamma: -1.0 is not in [0, +inf)"),
    ({"num_round": "5", "booster": "gbforest"},
     "Hyperparameter booster: gbforest is not in ['gbtree', 'gblinear', 'dart']"),
    ({"num_round": "5", "objective": "reg:nonsense"}, "Hyperparameter objective: reg:nonsense is not in ["),
    ({"num_round": "5", "tree_method": "fast"},
     "Hyperparameter tree_method: fast is not in ['auto', 'exact', 'approx', 'hist', 'gpu_hist']"),
    ({"num_round": "5", "eval_metric": "rmse,accuracyy"}, "Hyperparameter eval_metric: value ['rmse', 'accuracyy'] "
                                                          "not in range ['accuracy', 'auc'"),
    ({"num_round": "5", "eval_metric": "auc"},
     "Metric 'auc' can only be applied for classification and ranking problems."),
    ({"num_round": "5", "objective": "reg:squarederror", "eval_metric": "auc"},
     "Metric 'auc' can only be applied for classification and ranking problems."),
    ({"num_round": "5", "eval_metric": "mae@2"}, "Metric 'mae@2' is not supported. Parameter 'eval_metric' with "
                                                "customized threshold should be one of these options: 'error', "
                                                "'ndcg', 'map'."),
    ({"num_round": "5", "eval_metric": "error@high"}, "Threshold value 't' in 'error@t' expects float input."),
    ({"num_round": "5", "objective": "multi:softmax"},
     "Require input for parameter 'num_class' for multi-classification"),
    ({"num_round": "5", "monotone_constraints": "(1,-1)"},
     "monotone_constraints can be used only when the tree_method parameter is set to either 'exact' or 'hist'."),
    ({"num_round": "5", "monotone_constraints": "(1,2)", "tree_method": "hist"},
     "Hyperparameter monotone_constraints: value (1, 2) not in range [-1, 0, 1]"),
    ({"num_round": "5", "_tuning_objective_metric": "validation:loss"},
     "Hyperparameter _tuning_objective_metric: validation:loss is not in ['validation:accuracy'"),
])
def test_invalid_values_fail_with_the_toolkits_message(hps, message):
    assert user_error(hps).startswith(message)


def test_values_are_parsed_to_their_types_and_aliases_resolved():
    v = bx.validate_hyperparameters({"num_round": "50", "max_depth": "6", "learning_rate": "0.1", "reg_lambda": "2",
                                     "subsample": "0.8", "objective": "binary:logistic", "eval_metric": "auc,logloss",
                                     "updater": "grow_quantile_histmaker,prune", "tree_method": "hist",
                                     "monotone_constraints": "(1,0,-1)", "seed": "-7"})
    assert v["num_round"] == 50 and v["max_depth"] == 6 and v["seed"] == -7
    assert v["eta"] == 0.1 and v["lambda"] == 2.0 and v["subsample"] == 0.8
    assert "learning_rate" not in v and "reg_lambda" not in v
    assert v["eval_metric"] == ["auc", "logloss"] and v["updater"] == "grow_quantile_histmaker,prune"
    assert v["monotone_constraints"] == (1, 0, -1)
    with pytest.raises(bx.UserError, match="given twice"):
        bx.validate_hyperparameters({"num_round": "5", "eta": "0.1", "learning_rate": "0.2"})


def test_thresholds_and_the_tuning_metric_are_accepted():
    v = bx.validate_hyperparameters({"num_round": "5", "objective": "binary:logistic",
                                     "eval_metric": "error@0.7,auc", "_tuning_objective_metric": "validation:f1"})
    assert v["eval_metric"] == ["error@0.7", "auc"] and v["_tuning_objective_metric"] == "validation:f1"


# ---- what xgb.train gets --------------------------------------------------------------------------------------
def test_training_config_maps_to_xgboost_params():
    cfg = bx.training_config(bx.validate_hyperparameters({
        "num_round": "40", "max_depth": "5", "eta": "0.2", "min_child_weight": "3", "alpha": "0.5",
        "objective": "reg:squarederror", "eval_metric": "rmse,mae", "early_stopping_rounds": "7", "csv_weights": "1",
        "silent": "1", "monotone_constraints": "(1,-1)", "tree_method": "hist", "save_model_on_termination": "true",
        "interaction_constraints": "[[1,2],[3]]"}))
    assert cfg.num_round == 40 and cfg.early_stopping_rounds == 7 and cfg.csv_weights == 1
    assert cfg.params == {"max_depth": 5, "eta": 0.2, "min_child_weight": 3.0, "alpha": 0.5,
                          "objective": "reg:squarederror", "eval_metric": ["rmse", "mae"], "tree_method": "hist",
                          "monotone_constraints": "(1,-1)", "interaction_constraints": "[[1, 2], [3]]"}
    assert cfg.early_stopping_metric == "mae" and cfg.maximize is False
    assert cfg.save_model_on_termination and cfg.dropped == ["silent"] and cfg.custom_metrics == []


def test_container_metrics_and_the_tuning_objective():
    # the container's own metrics are custom metrics; with a tuning objective the union is sorted
    cfg = bx.training_config(bx.validate_hyperparameters({
        "num_round": "5", "objective": "binary:logistic", "eval_metric": "f1,logloss",
        "_tuning_objective_metric": "validation:auc", "early_stopping_rounds": "3"}))
    assert cfg.params["eval_metric"] == ["auc", "logloss"] and cfg.custom_metrics == ["f1"]
    assert cfg.early_stopping_metric == "auc" and cfg.maximize is True
    assert "_tuning_objective_metric" not in cfg.params
    only_custom = bx.training_config(bx.validate_hyperparameters({"num_round": "5", "eval_metric": "r2"}))
    assert "eval_metric" not in only_custom.params and only_custom.custom_metrics == ["r2"]
    assert bx.eval_metrics(None, None) == (None, [], None)


def test_custom_metric_values():
    labels = np.array([1, 0, 1, 1, 0], dtype=np.float32)
    probs = np.array([0.9, 0.2, 0.4, 0.8, 0.6], dtype=np.float32)  # predicted 1, 0, 0, 1, 1
    assert bx.custom_metric_value("accuracy", probs, labels) == pytest.approx(0.6)
    assert bx.custom_metric_value("precision", probs, labels) == pytest.approx(2 / 3)
    assert bx.custom_metric_value("recall", probs, labels) == pytest.approx(2 / 3)
    assert bx.custom_metric_value("f1", probs, labels) == pytest.approx(2 / 3)
    assert bx.custom_metric_value("balanced_accuracy", probs, labels) == pytest.approx((2 / 3 + 1 / 2) / 2)
    y = np.array([1.0, 2.0, 3.0])
    assert bx.custom_metric_value("mse", np.array([1.0, 2.0, 4.0]), y) == pytest.approx(1 / 3)
    assert bx.custom_metric_value("r2", np.array([1.0, 2.0, 4.0]), y) == pytest.approx(0.5)
    softprob = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.2, 0.6]])
    assert bx.custom_metric_value("accuracy", softprob, np.array([1.0, 0.0, 1.0])) == pytest.approx(2 / 3)
    metric = bx.configure_custom_metric(["accuracy", "f1"])

    class Labels:
        def get_label(self):
            return labels

    assert metric(probs, Labels()) == [("accuracy", pytest.approx(0.6)), ("f1", pytest.approx(2 / 3))]


# ---- channels and content types --------------------------------------------------------------------------------
def channel(**kw):
    return {"TrainingInputMode": "File", "S3DistributionType": "ShardedByS3Key", "RecordWrapperType": "None", **kw}


def test_channels():
    validated = bx.validate_channels({"train": channel(ContentType="text/csv"), "validation": channel()})
    assert validated["validation"]["ContentType"] == "text/libsvm"  # the container's default
    for channels, message in (
        ({"validation": channel()}, "Missing required channel: train"),
        ({"train": channel(), "test": channel()}, "Extraneous channel found: test"),
        ({"train": channel(ContentType="application/json")}, "Channel configuration for 'train' channel is not "
                                                             "supported: "),
        ({"train": channel(ContentType="text/libsvm", TrainingInputMode="Pipe")}, "Channel configuration for"),
    ):
        with pytest.raises(bx.UserError) as err:
            bx.validate_channels(channels)
        assert str(err.value).startswith(message)


def test_content_types():
    assert bx.get_content_type(None) == "libsvm"
    assert bx.get_content_type("text/csv") == bx.get_content_type("csv") == "csv"
    assert bx.get_content_type("text/csv; label_size=1") == "csv"
    assert bx.get_content_type("text/x-libsvm") == "libsvm"
    with pytest.raises(bx.UserError, match="Optional parameter label_size must be equal to 1"):
        bx.get_content_type("text/csv;label_size=2")
    with pytest.raises(bx.UserError, match="application/json is not an accepted ContentType: csv, libsvm"):
        bx.get_content_type("application/json")


def test_data_loading(tmp_path):
    (tmp_path / "a.csv").write_text("1,0.5,2\n0,0.25,1\n")
    (tmp_path / "b.csv").write_text("1,,3\n")  # a missing value
    (tmp_path / "_SUCCESS").write_text("")
    files = bx.data_files(str(tmp_path))
    assert [f.rsplit("/", 1)[1] for f in files] == ["a.csv", "b.csv"]
    x, y, w, _ = bx.load_csv(files)
    assert y.tolist() == [1, 0, 1] and x.shape == (3, 2) and np.isnan(x[2, 0]) and w is None
    x, y, w, _ = bx.load_csv(files[:1], csv_weights=1)
    assert y.tolist() == [1, 0] and w.tolist() == [0.5, 0.25] and x.shape == (2, 1)
    (tmp_path / "h.csv").write_text("label,f1\n1,2\n")
    with pytest.raises(bx.UserError, match="Failed to load csv data with exception"):
        bx.load_csv([str(tmp_path / "h.csv")])
    (tmp_path / "d.libsvm").write_text("1:2.0 0:1.5 3:2\n0 1:1 # comment\n")
    x, y, w, _ = bx.load_libsvm([str(tmp_path / "d.libsvm")])
    assert y.tolist() == [1, 0] and w.tolist() == [2.0, 1.0] and x.shape == (2, 4) and x[0, 3] == 2
    (tmp_path / "bad.libsvm").write_text("1 3 4\n")
    with pytest.raises(bx.UserError, match="is not 'LIBSVM' format"):
        bx.validate_data_files([str(tmp_path / "bad.libsvm")], "libsvm")
    (tmp_path / ".hidden").write_text("x")
    with pytest.raises(bx.UserError, match="Hidden file found in the data path"):
        bx.get_size(str(tmp_path))


# ---- the log line, the metrics and the failure file -----------------------------------------------------------
def test_evaluation_line_is_what_sagemakers_metric_regexes_read():
    line = bx.format_evaluation(0, {"train": {"rmse": [0.5]}, "validation": {"rmse": [0.6], "auc": [0.91234]}})
    assert line == "[0]#011train-rmse:0.50000#011validation-rmse:0.60000#011validation-auc:0.91234"
    found = {}
    for d in metric_definitions("xgboost"):
        m = re.match(d["Regex"], line)
        if m:
            found[d["Name"]] = float(m.group(1))
    assert found == {"train:rmse": 0.5, "validation:rmse": 0.6, "validation:auc": 0.91234}


def test_metric_definitions_are_the_services():
    defs = {d["Name"]: d["Regex"] for d in metric_definitions("xgboost")}
    assert defs["validation:rmse"] == r".*\[[0-9]+\].*#011validation-rmse:([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?).*"
    assert {"train:rmse", "validation:auc", "train:logloss", "validation:error", "validation:r2"} <= set(defs)
    assert "train:r2" not in defs and len(defs) == 37
    assert metric_definitions("kmeans") == []


def test_failure_file_is_the_trainers():
    try:
        bx.validate_hyperparameters({})
    except bx.UserError as e:
        text = bx.failure_message(e)
    assert text.startswith("framework error: \nTraceback (most recent call last):\n")
    assert text.endswith("sagemaker_algorithm_toolkit.exceptions.UserError: Missing required hyperparameter: "
                         "num_round\n\nMissing required hyperparameter: num_round")
    assert len("AlgorithmError: " + text) < 1024


def test_paths_under_opt_ml_follow_the_hosts_base():
    host = bx.ContainerPaths("/jobs/x/hosts/algo-1")
    assert host.relocate("/opt/ml/checkpoints") == "/jobs/x/hosts/algo-1/checkpoints"
    assert bx.ContainerPaths("/opt/ml").relocate("/opt/ml/checkpoints") == "/opt/ml/checkpoints"


# ---- what the local backend recognises and refuses -------------------------------------------------------------
@pytest.mark.parametrize("image, expected", [
    (IMAGE, True),
    ("246618743249.dkr.ecr.us-west-2.amazonaws.com/sagemaker-xgboost:1.5-1", True),
    ("451049120500.dkr.ecr.cn-north-1.amazonaws.com.cn/sagemaker-xgboost:1.7-1", True),
    ("683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost@sha256:" + "a" * 64, True),
    ("382416733822.dkr.ecr.us-east-1.amazonaws.com/kmeans:1", False),
    ("811284229777.dkr.ecr.us-east-1.amazonaws.com/xgboost:1", False),  # the 0.72 algorithm, another container
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/my-sagemaker-xgboost:1", False),
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/sagemaker-xgboost:1", False),
    (None, False),
])
def test_the_xgboost_image_is_recognised_in_any_region_and_account(image, expected):
    assert training.builtin_xgboost_image(image) is expected


def request(image=IMAGE, hps=None, **spec):
    return {"TrainingJobName": "j", "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": "File",
                                                               **spec},
            "HyperParameters": {"num_round": "5"} if hps is None else hps,
            "InputDataConfig": [{"ChannelName": "train", "ContentType": "text/csv", "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": "file:///tmp/x", "S3DataDistributionType": "ShardedByS3Key"}}}]}


def test_check_request_runs_the_algorithm_and_refuses_the_rest():
    training.check_request(request())
    assert training.runs_builtin_xgboost(request())
    # script mode on the same image runs the script, not the algorithm
    assert not training.runs_builtin_xgboost(request(hps={"sagemaker_program": '"train.py"'}))
    with pytest.raises(SpecError, match="runs its own container code"):
        training.check_request(request(image="382416733822.dkr.ecr.us-east-1.amazonaws.com/kmeans:1"))
    with pytest.raises(SpecError, match="override the metric definitions"):
        training.check_request(request(MetricDefinitions=[{"Name": "a", "Regex": "a=(.*)"}]))
    parquet = request()
    parquet["InputDataConfig"][0]["ContentType"] = "application/x-parquet"
    with pytest.raises(SpecError, match="not emulated"):
        training.check_request(parquet)


def test_describe_and_the_supervisor_use_the_algorithms_metric_definitions():
    assert training._algorithm_specification(request())["MetricDefinitions"] == metric_definitions("xgboost")
    kmeans = request(image="382416733822.dkr.ecr.us-east-1.amazonaws.com/kmeans:1")
    assert "MetricDefinitions" not in training._algorithm_specification(kmeans)


def test_tracker_ports_are_a_free_pair():
    import socket

    port = training.free_port_pair(["127.0.0.1"], 9099)
    for p in (port, port + 1):
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        assert training.free_port_pair(["127.0.0.1"], port) not in (port, port - 1)
