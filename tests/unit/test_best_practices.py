"""Best-practice checks, LR scaling and world size (airflow_smdist.specs.best_practices)."""

import math

import pytest

from airflow_smdist.specs.best_practices import Advice, LRScaling, check_training, scale_learning_rate, world_size
from airflow_smdist.specs.errors import SpecError

TD = {"torch_distributed": {"enabled": True}}


def codes(advice):
    return [a.code for a in advice]


def test_advice_str():
    a = Advice("warning", "scale-up-first", "use one big host")
    assert str(a) == "warning [scale-up-first]: use one big host"


# --------------------------------------------------------------------------------- check_training


def test_scale_up_first_names_the_alternative_and_why():
    advice = check_training(instance_type="ml.g5.xlarge", instance_count=4, distribution=TD,
                            checkpoint_s3_uri="s3://bucket/ckpt")
    assert codes(advice) == ["scale-up-first"]
    a = advice[0]
    assert a.level == "warning"
    assert "ml.g5.12xlarge" in a.message and "NVLink/PCIe" in a.message and "network" in a.message
    assert "fewer hosts" in a.message and "1 x ml.g5.12xlarge" in a.message


def test_scale_up_first_host_count_rounds_up():
    advice = check_training(instance_type="ml.p3.2xlarge", instance_count=6, distribution=TD,
                            checkpoint_s3_uri="s3://b/c")
    assert "ml.p3.8xlarge" in advice[0].message and "2 x ml.p3.8xlarge" in advice[0].message


@pytest.mark.parametrize("instance_type, count", [
    ("ml.g5.12xlarge", 4),  # already multi-GPU
    ("ml.g5.xlarge", 1),  # one host
    ("ml.m5.xlarge", 4),  # CPU: no GPUs to consolidate
    ("ml.gr6.4xlarge", 2),  # family has no multi-GPU size
])
def test_no_scale_up_advice(instance_type, count):
    advice = check_training(instance_type=instance_type, instance_count=count, distribution=None,
                            checkpoint_s3_uri="s3://b/c")
    assert "scale-up-first" not in codes(advice)


def test_scale_up_first_skipped_for_single_gpu_algorithms():
    advice = check_training(instance_type="ml.p3.2xlarge", instance_count=4, distribution=None,
                            checkpoint_s3_uri="s3://b/c", algorithm="kmeans")
    assert "scale-up-first" not in codes(advice)
    advice = check_training(instance_type="ml.p3.2xlarge", instance_count=4, distribution=None,
                            checkpoint_s3_uri="s3://b/c", algorithm="linear-learner")
    assert "scale-up-first" in codes(advice)


def test_multi_host_spot_job_without_checkpoint_warns_and_an_on_demand_one_is_not_warned_before_it_runs():
    advice = check_training(instance_type="ml.p4d.24xlarge", instance_count=2, distribution=TD,
                            checkpoint_s3_uri=None, spot=True)
    assert codes(advice) == ["no-checkpoint"]
    assert "each interruption (a lost host) loses the whole job's progress" in advice[0].message
    # a one-second test on two hosts is no reason for a warning: a long run without checkpoints is told after
    assert check_training(instance_type="ml.p4d.24xlarge", instance_count=2, distribution=TD,
                          checkpoint_s3_uri=None) == []
    assert "checkpoint_s3_uri" in advice[0].message and "one rank" in advice[0].message


def test_single_host_without_checkpoint_is_fine():
    assert check_training(instance_type="ml.p4d.24xlarge", instance_count=1, distribution=TD,
                          checkpoint_s3_uri=None) == []


def test_smddp_on_unsupported_type_is_an_error():
    with pytest.raises(SpecError) as err:
        check_training(instance_type="ml.g5.48xlarge", instance_count=2,
                       distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
                       checkpoint_s3_uri="s3://b/c")
    assert err.value.field == "distribution.smdistributed.dataparallel"
    assert "ml.p4d.24xlarge" in err.value.problem


def test_torch_distributed_on_cpu_warns_but_passes():
    advice = check_training(instance_type="ml.c5.2xlarge", instance_count=2, distribution=TD,
                            checkpoint_s3_uri="s3://b/c")
    assert codes(advice) == ["torch-distributed-cpu"]
    assert "GPU and Trainium" in advice[0].message


def test_torch_distributed_on_trainium_no_cpu_warning():
    assert check_training(instance_type="ml.trn1.32xlarge", instance_count=1, distribution=TD,
                          checkpoint_s3_uri=None) == []


def test_strategy_present_but_not_enabled():
    advice = check_training(instance_type="ml.p4d.24xlarge", instance_count=2,
                            distribution={"mpi": {"processes_per_host": 8}}, checkpoint_s3_uri="s3://b/c")
    assert codes(advice) == ["strategy-not-enabled", "no-launcher"]
    assert advice[0].level == "info" and "distribution.mpi" in advice[0].message


def test_check_training_with_instance_groups():
    groups = [{"InstanceGroupName": "train", "InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
              {"InstanceGroupName": "data", "InstanceType": "ml.c5.18xlarge", "InstanceCount": 2}]
    dist = {"torch_distributed": {"enabled": True}, "instance_groups": ["train"]}
    assert check_training(instance_type="ml.p4d.24xlarge", instance_count=4, distribution=dist,
                          checkpoint_s3_uri="s3://b/c", instance_groups=groups) == []
    # without the groups the instance_groups key is not re-checked (the builder validated it already)
    assert check_training(instance_type="ml.p4d.24xlarge", instance_count=4, distribution=dist,
                          checkpoint_s3_uri="s3://b/c") == []
    with pytest.raises(SpecError) as err:
        check_training(instance_type="ml.p4d.24xlarge", instance_count=4, checkpoint_s3_uri="s3://b/c",
                       distribution={**dist, "instance_groups": ["nope"]}, instance_groups=groups)
    assert err.value.field == "distribution.instance_groups"


def test_check_training_validates_instance_count():
    with pytest.raises(SpecError) as err:
        check_training(instance_type="ml.m5.xlarge", instance_count=0, distribution=None,
                       checkpoint_s3_uri=None)
    assert err.value.field == "instance_count"


# ------------------------------------------------------------------------------------- world_size


@pytest.mark.parametrize("instance_type, count, distribution, expected", [
    ("ml.p4d.24xlarge", 2, TD, 16),
    ("ml.g5.xlarge", 4, TD, 4),
    ("ml.c5.xlarge", 3, TD, 3),  # CPU: one process per host
    ("ml.p4d.24xlarge", 2, {"mpi": {"enabled": True, "processes_per_host": 4}}, 8),
    ("ml.p4d.24xlarge", 2, {"mpi": {"enabled": True}}, 16),
    ("ml.p4d.24xlarge", 4, {"smdistributed": {"dataparallel": {"enabled": True}}}, 32),
    ("ml.trn1.32xlarge", 2, TD, 64),  # torchrun starts one process per NeuronCore
    ("ml.p4d.24xlarge", 2, None, 2),  # no launcher: one process per host
    ("ml.p3.16xlarge", 2, {"parameter_server": {"enabled": True}}, 2),
    ("ml.p3.16xlarge", 2, {"multi_worker_mirrored_strategy": {"enabled": True}}, 16),
])
def test_world_size(instance_type, count, distribution, expected):
    assert world_size(instance_type, count, distribution) == expected


# ------------------------------------------------------------------------------------ LR scaling


def test_linear_scaling_goyal():
    s = scale_learning_rate(base_learning_rate=0.1, base_batch_size=256, per_device_batch_size=32, world_size=16)
    assert isinstance(s, LRScaling)
    assert s.global_batch_size == 512 and s.scale_factor == 2.0
    assert s.learning_rate == pytest.approx(0.2)
    assert s.warmup_epochs == 5 and s.warmup_start_learning_rate == 0.1
    assert s.hyperparameters() == {"learning_rate": pytest.approx(0.2), "warmup_epochs": 5}
    assert s.hyperparameters("lr", "warmup") == {"lr": pytest.approx(0.2), "warmup": 5}
    line = s.describe()
    assert "32 x 16 workers = 512" in line and "0.1 x 512/256 = 0.2" in line
    assert "from 0.1 over 5 epochs" in line and "Goyal et al. 2017" in line


def test_linear_scaling_imagenet_in_one_hour():
    # the paper's headline setting: 8k minibatch (32 per GPU x 256 GPUs) -> lr 0.1 * 32 = 3.2
    s = scale_learning_rate(base_learning_rate=0.1, base_batch_size=256, per_device_batch_size=32,
                            world_size=256)
    assert s.global_batch_size == 8192 and s.learning_rate == pytest.approx(3.2)


def test_sqrt_scaling():
    s = scale_learning_rate(base_learning_rate=1e-3, base_batch_size=256, per_device_batch_size=32,
                            world_size=32, rule="sqrt", warmup_epochs=2)
    assert s.global_batch_size == 1024 and s.scale_factor == pytest.approx(2.0)
    assert s.learning_rate == pytest.approx(2e-3) and s.warmup_epochs == 2
    assert "sqrt(1024/256)" in s.describe() and "Hoffer" in s.describe()


def test_sqrt_scaling_non_square():
    s = scale_learning_rate(base_learning_rate=0.01, base_batch_size=100, per_device_batch_size=50,
                            world_size=4, rule="sqrt")
    assert s.learning_rate == pytest.approx(0.01 * math.sqrt(2))


def test_smaller_global_batch_scales_down_without_warmup():
    s = scale_learning_rate(base_learning_rate=0.1, base_batch_size=256, per_device_batch_size=32, world_size=4)
    assert s.learning_rate == pytest.approx(0.05) and s.warmup_epochs == 0
    assert "no warm-up" in s.describe()


@pytest.mark.parametrize("kwargs, field", [
    ({"base_learning_rate": 0}, "lr_scaling.base_learning_rate"),
    ({"base_learning_rate": -0.1}, "lr_scaling.base_learning_rate"),
    ({"base_learning_rate": float("nan")}, "lr_scaling.base_learning_rate"),
    ({"base_learning_rate": "0.1"}, "lr_scaling.base_learning_rate"),
    ({"base_batch_size": 0}, "lr_scaling.base_batch_size"),
    ({"base_batch_size": 256.0}, "lr_scaling.base_batch_size"),
    ({"per_device_batch_size": -1}, "lr_scaling.per_device_batch_size"),
    ({"world_size": 0}, "lr_scaling.world_size"),
    ({"world_size": True}, "lr_scaling.world_size"),
    ({"warmup_epochs": -1}, "lr_scaling.warmup_epochs"),
    ({"rule": "cubic"}, "lr_scaling.rule"),
])
def test_lr_scaling_validation(kwargs, field):
    args = dict(base_learning_rate=0.1, base_batch_size=256, per_device_batch_size=32, world_size=16)
    args.update(kwargs)
    with pytest.raises(SpecError) as err:
        scale_learning_rate(**args)
    assert err.value.field == field


def test_a_channel_whose_prefix_the_output_path_starts_with_is_a_warning():
    """S3Prefix s3://b/data also takes s3://b/data-output/...: the job's own outputs (and earlier runs')
    would be the next run's data. A folder prefix, or an output elsewhere, is fine."""
    from airflow_smdist.specs.training import build_training

    def advice(channel: str, output: str) -> list[str]:
        plan = build_training(job_name="j", image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1",
                              role="arn:aws:iam::123456789012:role/R", instance_type="ml.m5.xlarge",
                              inputs={"train": channel}, output_path=output)
        return [a.message for a in plan.advice if a.code == "channel-matches-output"]

    (message,) = advice("s3://b/data", "s3://b/data-output")
    assert "channel 'train' (s3://b/data)" in message and "End the channel's prefix with '/'" in message
    assert advice("s3://b/data", "s3://b/data/out")  # the output inside the channel's folder: the same
    assert advice("s3://b/data/", "s3://b/data-output") == []
    assert advice("s3://b/data", "s3://b/out") == []
