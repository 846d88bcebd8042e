"""Built-in algorithms table, scaling checks and image URIs (airflow_smdist.specs.builtin_algorithms, images)."""

import pytest

from airflow_smdist.specs.builtin_algorithms import (
    ALGORITHMS,
    BuiltinAlgorithm,
    algorithm_image_uri,
    check_scaling,
    get_algorithm,
)
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.images import framework_image_uri

# The Developer Guide's "Built-in algorithms: common information" table lists these 24 rows.
DG_ROWS = {
    "autogluon-tabular", "blazingtext", "catboost", "forecasting-deepar", "factorization-machines",
    "image-classification", "image-classification-tensorflow", "ipinsights", "kmeans", "knn", "lda", "lightgbm",
    "linear-learner", "ntm", "object2vec", "object-detection", "object-detection-tensorflow", "pca",
    "randomcutforest", "semantic-segmentation", "seq2seq", "tabtransformer", "text-classification-tensorflow",
    "xgboost",
}


def test_table_has_every_row():
    assert set(ALGORITHMS) == DG_ROWS
    for algo in ALGORITHMS.values():
        assert isinstance(algo, BuiltinAlgorithm)
        assert algo.instance_class in ("cpu", "gpu", "both")
        assert set(algo.input_modes) <= {"File", "Pipe"} and "File" in algo.input_modes
        assert set(algo.required_channels) <= set(algo.channels)
        if algo.parallelizable.startswith("Yes (only across multiple GPUs"):
            assert algo.multi_gpu and not algo.multi_instance
        if algo.instance_class == "cpu":
            assert not algo.multi_gpu


@pytest.mark.parametrize("name, multi_instance, multi_gpu", [
    ("xgboost", True, False),
    ("linear-learner", True, True),
    ("kmeans", True, False),  # see the module docstring: the table's "No" is contradicted by its own row
    ("knn", True, False),
    ("lda", False, False),
    ("autogluon-tabular", False, False),
    ("blazingtext", False, False),
    ("image-classification-tensorflow", False, True),
    ("object2vec", False, True),
    ("seq2seq", False, True),
    ("randomcutforest", True, False),
])
def test_scaling_columns(name, multi_instance, multi_gpu):
    algo = get_algorithm(name)
    assert (algo.multi_instance, algo.multi_gpu) == (multi_instance, multi_gpu)


def test_entry_details():
    xgb = get_algorithm("xgboost")
    assert xgb.display_name == "XGBoost" and xgb.default_version == "1.7-1"
    assert xgb.channels == ("train", "validation") and xgb.required_channels == ("train",)
    assert xgb.input_modes == ("File", "Pipe") and xgb.parallelizable == "Yes"
    assert get_algorithm("seq2seq").required_channels == ("train", "validation", "vocab")
    assert get_algorithm("semantic-segmentation").instance_class == "gpu"
    assert get_algorithm("object2vec").input_modes == ("File",)


@pytest.mark.parametrize("spelling, name", [
    ("XGBoost", "xgboost"), ("linear_learner", "linear-learner"), ("k-means", "kmeans"),
    ("deepar", "forecasting-deepar"), ("Random Cut Forest", "randomcutforest"), ("rcf", "randomcutforest"),
])
def test_get_algorithm_spellings(spelling, name):
    assert get_algorithm(spelling).name == name


def test_get_algorithm_did_you_mean():
    with pytest.raises(SpecError) as err:
        get_algorithm("xgbost")
    assert err.value.field == "algorithm" and "not a SageMaker built-in algorithm" in err.value.problem
    assert "did you mean 'xgboost'?" in err.value.fix


# ---------------------------------------------------------------------------------------- scaling


def test_xgboost_multi_instance_allowed():
    assert check_scaling("xgboost", "ml.m5.2xlarge", 4, "File") == []
    assert check_scaling("xgboost", "ml.m5.2xlarge", 2, "Pipe") == []


def test_single_instance_algorithm_rejects_instance_count():
    with pytest.raises(SpecError) as err:
        check_scaling("lda", "ml.c5.4xlarge", 2, "File")
    assert err.value.field == "ResourceConfig.InstanceCount"
    assert "LDA trains on a single instance only" in err.value.problem
    assert "Parallelizable 'No'" in err.value.problem and "instance_count=1" in err.value.fix


def test_kmeans_multi_instance_allowed():
    # the K-Means page recommends ShardedByS3Key for train; AWS's own MNIST k-means example uses 2 instances
    assert check_scaling("kmeans", "ml.c5.xlarge", 2, "File") == []


def test_multi_gpu_only_algorithms_reject_several_instances():
    with pytest.raises(SpecError) as err:
        check_scaling("image-classification-tensorflow", "ml.g5.12xlarge", 2, "File")
    assert "single instance only" in err.value.problem
    assert "only across multiple GPUs on a single instance" in err.value.problem
    assert check_scaling("image-classification-tensorflow", "ml.g5.12xlarge", 1, "File") == []


def test_blazingtext_batch_skipgram_scales_out_on_cpu():
    with pytest.raises(SpecError) as err:
        check_scaling("blazingtext", "ml.c5.4xlarge", 2, "File")
    assert "batch_skipgram" in err.value.problem
    assert check_scaling("blazingtext", "ml.c5.4xlarge", 2, "File", {"mode": "batch_skipgram"}) == []
    with pytest.raises(SpecError):  # batch_skipgram is CPU-only
        check_scaling("blazingtext", "ml.p3.2xlarge", 2, "File", {"mode": "batch_skipgram"})


def test_multi_gpu_instance_for_single_gpu_algorithm_warns():
    warnings = check_scaling("kmeans", "ml.g5.12xlarge", 1, "File")
    assert len(warnings) == 1
    assert "uses one GPU per instance: 3 of the 4 GPUs of ml.g5.12xlarge would sit idle" in warnings[0]
    assert "ml.g5.16xlarge" in warnings[0]


def test_xgboost_multi_gpu_warns_unless_dask():
    warnings = check_scaling("xgboost", "ml.g5.12xlarge", 1, "File")
    assert len(warnings) == 1 and "use_dask_gpu_training" in warnings[0]
    assert check_scaling("xgboost", "ml.g5.12xlarge", 2, "File", {"use_dask_gpu_training": "true"}) == []


def test_multi_gpu_algorithm_does_not_warn():
    assert check_scaling("linear-learner", "ml.p3.8xlarge", 2, "Pipe") == []


def test_input_mode_not_supported():
    with pytest.raises(SpecError) as err:
        check_scaling("seq2seq", "ml.p3.2xlarge", 1, "Pipe")
    assert err.value.field == "AlgorithmSpecification.TrainingInputMode"
    assert "supports only File input, not Pipe" in err.value.problem


def test_input_mode_typo():
    with pytest.raises(SpecError) as err:
        check_scaling("xgboost", "ml.m5.xlarge", 1, "file")
    assert "did you mean 'File'?" in err.value.fix


def test_fastfile_warns():
    warnings = check_scaling("xgboost", "ml.m5.xlarge", 1, "FastFile")
    assert len(warnings) == 1 and "FastFile" in warnings[0]


def test_input_mode_none_is_not_checked():
    assert check_scaling("seq2seq", "ml.p3.2xlarge", 1, None) == []


def test_gpu_only_algorithm_on_cpu_instance():
    with pytest.raises(SpecError) as err:
        check_scaling("object-detection", "ml.m5.xlarge", 1, "File")
    assert err.value.field == "ResourceConfig.InstanceType"
    assert "trains only on GPU instances; ml.m5.xlarge has no GPU" in err.value.problem


def test_cpu_only_algorithm_on_gpu_instance_warns():
    warnings = check_scaling("randomcutforest", "ml.p3.2xlarge", 1, "File")
    assert len(warnings) == 1 and "CPU only" in warnings[0]


def test_check_scaling_validates_instance_type_and_count():
    with pytest.raises(SpecError) as err:
        check_scaling("xgboost", "local", 1, "File")
    assert err.value.field == "ResourceConfig.InstanceType"
    with pytest.raises(SpecError) as err:
        check_scaling("xgboost", "ml.m5.xlarge", 0, "File")
    assert err.value.field == "ResourceConfig.InstanceCount"


# ------------------------------------------------------------------------------------------ images


def test_xgboost_image_uri_us_east_1():
    assert algorithm_image_uri("xgboost", "us-east-1") == \
        "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def test_kmeans_image_uri():
    assert algorithm_image_uri("kmeans", "us-east-1") == "382416733822.dkr.ecr.us-east-1.amazonaws.com/kmeans:1"


def test_algorithm_unknown_version():
    with pytest.raises(SpecError) as err:
        algorithm_image_uri("xgboost", "us-east-1", version="9.9-9")
    assert err.value.field == "algorithm_version"
    assert "Unsupported xgboost version: 9.9-9" in err.value.problem and "1.7-1" in err.value.problem


def test_algorithm_unknown_region():
    with pytest.raises(SpecError) as err:
        algorithm_image_uri("kmeans", "xx-nowhere-1")
    assert err.value.field == "region" and "Unsupported region" in err.value.problem


@pytest.mark.parametrize("name", ["catboost", "lightgbm", "autogluon-tabular", "text-classification-tensorflow"])
def test_jumpstart_algorithms_need_image_uri(name):
    with pytest.raises(SpecError) as err:
        algorithm_image_uri(name, "us-east-1")
    assert err.value.field == "image_uri" and "JumpStart" in err.value.problem
    assert "pass image_uri" in err.value.fix


def test_pytorch_image_uri_us_east_1():
    assert framework_image_uri("pytorch", "2.5.1", "py311", "ml.g5.xlarge", "us-east-1") == \
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311"
    assert framework_image_uri("pytorch", "2.5.1", "py311", "ml.c5.xlarge", "us-east-1") == \
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-cpu-py311"


def test_tensorflow_image_uri():
    assert framework_image_uri("tensorflow", "2.16", "py310", "ml.g5.xlarge", "us-east-1") == \
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training:2.16-gpu-py310"


def test_huggingface_image_uri_needs_base_framework():
    uri = framework_image_uri("huggingface", "4.49.0", "py311", "ml.g5.xlarge", "us-east-1",
                              base_framework_version="pytorch2.5.1")
    assert uri.startswith("763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-training:")
    assert "2.5.1-transformers4.49.0-gpu-py311" in uri
    assert framework_image_uri("huggingface", "4.49.0", "py311", "ml.g5.xlarge", "us-east-1",
                               base_framework_version="2.5.1") == uri
    with pytest.raises(SpecError) as err:
        framework_image_uri("huggingface", "4.49.0", "py311", "ml.g5.xlarge", "us-east-1")
    assert err.value.field == "base_framework_version"


@pytest.mark.parametrize("args, field, fragment", [
    (("pytorch", "9.9", "py311", "ml.g5.xlarge", "us-east-1"), "framework_version", "Unsupported pytorch version: 9.9"),
    (("pytorch", "2.5.1", "py27", "ml.g5.xlarge", "us-east-1"), "py_version", "Unsupported Python version: py27"),
    (("pytorch", "2.5.1", "py311", "ml.g5.xlarge", "xx-nowhere-1"), "region", "Unsupported region"),
    (("mxnet", "1.9", "py38", "ml.g5.xlarge", "us-east-1"), "framework", "no training image lookup"),
    (("pytorch", "2.5.1", "py311", "local_gpu", "us-east-1"), "instance_type", "local-mode marker"),
])
def test_framework_image_uri_errors(args, field, fragment):
    with pytest.raises(SpecError) as err:
        framework_image_uri(*args)
    assert err.value.field == field and fragment in err.value.problem
