"""Instance-type table and checks (airflow_smdist.specs.instances)."""

import json
from pathlib import Path

import pytest

from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.instances import (
    GPU_COUNTS,
    NEURON_DEVICE_COUNTS,
    SMDDP_SUPPORTED_INSTANCE_TYPES,
    check_instance_type,
    default_processes_per_host,
    family,
    gpu_count,
    is_gpu,
    is_trainium,
    multi_gpu_alternative,
    neuron_core_count,
    neuron_device_count,
    single_gpu_types,
)
from airflow_smdist.specs.validate import enum_values


@pytest.mark.parametrize("t, n", [
    ("ml.p3.2xlarge", 1), ("ml.p3.8xlarge", 4), ("ml.p3.16xlarge", 8), ("ml.p3dn.24xlarge", 8),
    ("ml.p4d.24xlarge", 8), ("ml.p5.48xlarge", 8), ("ml.p5.4xlarge", 1), ("ml.p6e-gb200.36xlarge", 4),
    ("ml.g5.xlarge", 1), ("ml.g5.12xlarge", 4), ("ml.g5.48xlarge", 8), ("ml.g6e.16xlarge", 1),
    ("ml.g4dn.12xlarge", 4), ("ml.g7e.12xlarge", 2), ("ml.p2.16xlarge", 16),
    ("ml.m5.xlarge", 0), ("ml.c5.18xlarge", 0), ("ml.trn1.32xlarge", 0), ("ml.nope.xlarge", 0), ("local", 0),
])
def test_gpu_count(t, n):
    assert gpu_count(t) == n


def test_gpu_table_agrees_with_the_sagemaker_sdk_table():
    """Every type the SDK's own instance_gpu_info.json knows has the same count here (skipped without the SDK:
    the table is not packaged, nothing at run time reads it)."""
    sagemaker_core = pytest.importorskip("sagemaker.core")

    path = Path(sagemaker_core.__file__).parent / "image_uri_config" / "instance_gpu_info.json"
    sdk = json.loads(path.read_text())["us-east-1"]
    checked = 0
    for t, info in sdk.items():
        if t in GPU_COUNTS:
            assert GPU_COUNTS[t] == info["Count"], t
            checked += 1
    assert checked >= 20


def test_every_table_entry_is_a_real_sagemaker_type():
    training = set(enum_values("CreateTrainingJob", "ResourceConfig.InstanceType"))
    transform = set(enum_values("CreateTransformJob", "TransformResources.InstanceType"))
    # gr6 is a SageMaker type outside these operations (notebooks, endpoints); keep the others honest.
    for t in GPU_COUNTS:
        if family(t) != "gr6":
            assert t in training, t
    for t in NEURON_DEVICE_COUNTS:
        assert t in training or t in transform, t


def test_every_training_gpu_type_except_g7_is_in_the_table():
    training = enum_values("CreateTrainingJob", "ResourceConfig.InstanceType")
    missing = [t for t in training if is_gpu(t) and t not in GPU_COUNTS]
    assert missing and all(family(t) == "g7" for t in missing)  # g7: sources disagree, left out on purpose


def test_family():
    assert family("ml.g5.12xlarge") == "g5"
    assert family("ml.p6-b200.48xlarge") == "p6-b200"
    assert family("ml.m7i-flex.large") == "m7i-flex"
    assert family("local") == ""
    assert family("g5.xlarge") == ""


def test_is_gpu_and_is_trainium():
    assert is_gpu("ml.g5.xlarge") and is_gpu("ml.p4d.24xlarge")
    assert is_gpu("ml.g7.2xlarge")  # not in the table, but a g family: the SDK's rule
    assert not is_gpu("ml.m5.xlarge") and not is_gpu("ml.trn1.32xlarge") and not is_gpu("local")
    assert is_trainium("ml.trn1.2xlarge") and is_trainium("ml.trn1n.32xlarge") and is_trainium("ml.trn2.48xlarge")
    assert not is_trainium("ml.g5.xlarge") and not is_trainium("ml.inf2.xlarge")


def test_neuron_counts_and_default_processes():
    assert neuron_device_count("ml.trn1.32xlarge") == 16
    assert neuron_core_count("ml.trn1.32xlarge") == 32  # torchrun --nproc_per_node on trn1.32xlarge
    assert neuron_core_count("ml.trn1.2xlarge") == 2
    assert neuron_core_count("ml.trn2.48xlarge") == 64
    assert neuron_core_count("ml.g5.xlarge") == 0
    assert default_processes_per_host("ml.p4d.24xlarge") == 8
    assert default_processes_per_host("ml.trn1.32xlarge") == 32
    assert default_processes_per_host("ml.c5.4xlarge") == 1


@pytest.mark.parametrize("t, alt", [
    ("ml.g5.xlarge", "ml.g5.12xlarge"),
    ("ml.g5.16xlarge", "ml.g5.12xlarge"),
    ("ml.p3.2xlarge", "ml.p3.8xlarge"),
    ("ml.p2.xlarge", "ml.p2.8xlarge"),
    ("ml.g4dn.2xlarge", "ml.g4dn.12xlarge"),
    ("ml.p5.4xlarge", "ml.p5.48xlarge"),
    ("ml.g7e.2xlarge", "ml.g7e.12xlarge"),
    ("ml.g5.12xlarge", None),  # already multi-GPU
    ("ml.p4d.24xlarge", None),
    ("ml.m5.xlarge", None),  # no GPUs in the family
    ("ml.gr6.4xlarge", None),  # family has no multi-GPU size
])
def test_multi_gpu_alternative(t, alt):
    assert multi_gpu_alternative(t) == alt


def test_single_gpu_types_smallest_first():
    assert single_gpu_types("g5") == ["ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge",
                                      "ml.g5.16xlarge"]


def test_smddp_types():
    assert SMDDP_SUPPORTED_INSTANCE_TYPES == ("ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge",
                                              "ml.p4de.24xlarge", "ml.p5.48xlarge")


def test_check_instance_type_accepts_valid_types():
    assert check_instance_type("ml.m5.xlarge", "ResourceConfig.InstanceType") == "ml.m5.xlarge"
    assert check_instance_type("ml.r5d.large", "x", operation="CreateProcessingJob") == "ml.r5d.large"
    assert check_instance_type("ml.inf2.xlarge", "x", operation="transform") == "ml.inf2.xlarge"


def test_check_instance_type_did_you_mean():
    with pytest.raises(SpecError) as err:
        check_instance_type("ml.g5.12xlarg", "ResourceConfig.InstanceType")
    assert err.value.field == "ResourceConfig.InstanceType"
    assert "not an instance type SageMaker offers for training jobs" in err.value.problem
    assert "did you mean 'ml.g5.12xlarge'?" in str(err.value)


def test_check_instance_type_is_per_operation():
    # trn1 trains but cannot run processing jobs; inf2 transforms but cannot train
    with pytest.raises(SpecError) as err:
        check_instance_type("ml.trn1.32xlarge", "ProcessingResources.ClusterConfig.InstanceType", "processing")
    assert err.value.field == "ProcessingResources.ClusterConfig.InstanceType"
    assert "processing jobs" in err.value.problem
    with pytest.raises(SpecError):
        check_instance_type("ml.inf2.xlarge", "ResourceConfig.InstanceType")


@pytest.mark.parametrize("t", ["local", "local_gpu"])
def test_check_instance_type_rejects_local_mode_markers(t):
    with pytest.raises(SpecError) as err:
        check_instance_type(t, "instance_type")
    assert err.value.field == "instance_type"
    assert "local-mode marker" in err.value.problem
    assert "ml.m5.xlarge" in err.value.fix


@pytest.mark.parametrize("bad", [None, "", 5])
def test_check_instance_type_rejects_non_strings(bad):
    with pytest.raises(SpecError) as err:
        check_instance_type(bad, "instance_type")
    assert err.value.field == "instance_type"


def test_check_instance_type_unknown_operation():
    with pytest.raises(ValueError, match="unknown operation"):
        check_instance_type("ml.m5.xlarge", "x", operation="CreateEndpoint")
