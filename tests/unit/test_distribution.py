"""SDK v2 distribution= -> hyperparameters, and its validation (airflow_smdist.specs.distribution)."""

import pytest

from airflow_smdist.specs.distribution import (
    STRATEGIES,
    distribution_hyperparameters,
    processes_per_host,
    strategy_of,
)
from airflow_smdist.specs.errors import SpecError

P4D = "ml.p4d.24xlarge"


def hp(distribution, instance_type=P4D, **kw):
    return distribution_hyperparameters(distribution, instance_type=instance_type, **kw)


def error(distribution, instance_type=P4D, **kw) -> SpecError:
    with pytest.raises(SpecError) as err:
        distribution_hyperparameters(distribution, instance_type=instance_type, **kw)
    return err.value


def test_strategies_constant():
    assert STRATEGIES == ("torch_distributed", "pytorchddp", "smdistributed", "mpi", "parameter_server",
                          "multi_worker_mirrored_strategy", "pytorchxla")


@pytest.mark.parametrize("empty", [None, {}])
def test_no_distribution_no_hyperparameters(empty):
    assert hp(empty) == {}


# ------------------------------------------------------------------------------- each strategy's keys


def test_torch_distributed():
    assert hp({"torch_distributed": {"enabled": True}}) == {
        "sagemaker_torch_distributed_enabled": True,
        "sagemaker_instance_type": "ml.p4d.24xlarge",
    }


def test_torch_distributed_disabled_sends_nothing():
    assert hp({"torch_distributed": {"enabled": False}}) == {}


def test_pytorchddp_emits_the_container_flag_not_the_smddp_rewrite():
    assert hp({"pytorchddp": {"enabled": True}}, instance_type="ml.g5.12xlarge") == {
        "sagemaker_pytorch_ddp_enabled": True,
        "sagemaker_instance_type": "ml.g5.12xlarge",
    }


def test_mpi_with_processes_per_host_and_options():
    assert hp({"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": "-verbose"}}) == {
        "sagemaker_mpi_enabled": True,
        "sagemaker_mpi_num_of_processes_per_host": 8,
        "sagemaker_mpi_custom_mpi_options": "-verbose",
    }


def test_mpi_minimal_always_sends_custom_options():
    assert hp({"mpi": {"enabled": True}}) == {
        "sagemaker_mpi_enabled": True,
        "sagemaker_mpi_custom_mpi_options": "",
    }


def test_smdistributed_dataparallel():
    assert hp({"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": "-x A=1"}}}) == {
        "sagemaker_distributed_dataparallel_enabled": True,
        "sagemaker_instance_type": "ml.p4d.24xlarge",
        "sagemaker_distributed_dataparallel_custom_mpi_options": "-x A=1",
    }
    assert hp({"smdistributed": {"dataparallel": {"enabled": True}}})[
        "sagemaker_distributed_dataparallel_custom_mpi_options"] == ""


def test_smdistributed_modelparallel_v1_with_mpi():
    params = {"partitions": 2, "microbatches": 4, "pipeline": "interleaved", "ddp": True}
    out = hp({"smdistributed": {"modelparallel": {"enabled": True, "parameters": params}},
              "mpi": {"enabled": True, "processes_per_host": 8}})
    assert out == {
        "mp_parameters": params,
        "sagemaker_distributed_dataparallel_enabled": False,
        "sagemaker_instance_type": "ml.p4d.24xlarge",
        "sagemaker_mpi_enabled": True,
        "sagemaker_mpi_num_of_processes_per_host": 8,
        "sagemaker_mpi_custom_mpi_options": "",
    }
    assert out["mp_parameters"] is not params  # a copy: later edits of the DAG's dict do not leak in


def test_smp_v2_torch_distributed_plus_modelparallel():
    params = {"tensor_parallel_degree": 8, "hybrid_shard_degree": 1}
    assert hp({"torch_distributed": {"enabled": True},
               "smdistributed": {"modelparallel": {"enabled": True, "parameters": params}}},
              instance_type="ml.p5.48xlarge") == {
        "mp_parameters": params,
        "sagemaker_distributed_dataparallel_enabled": False,
        "sagemaker_instance_type": "ml.p5.48xlarge",
        "sagemaker_torch_distributed_enabled": True,
    }


def test_smddp_on_p5_with_torch_distributed():
    assert hp({"torch_distributed": {"enabled": True}, "smdistributed": {"dataparallel": {"enabled": True}}},
              instance_type="ml.p5.48xlarge") == {
        "sagemaker_distributed_dataparallel_enabled": True,
        "sagemaker_instance_type": "ml.p5.48xlarge",
        "sagemaker_distributed_dataparallel_custom_mpi_options": "",
        "sagemaker_torch_distributed_enabled": True,
    }


def test_parameter_server():
    assert hp({"parameter_server": {"enabled": True}}, instance_type="ml.c5.xlarge") == {
        "sagemaker_parameter_server_enabled": True}


def test_multi_worker_mirrored_strategy():
    assert hp({"multi_worker_mirrored_strategy": {"enabled": True}}) == {
        "sagemaker_multi_worker_mirrored_strategy_enabled": True}


def test_pytorchxla():
    assert hp({"pytorchxla": {"enabled": True}}) == {"sagemaker_pytorch_xla_multi_worker_enabled": True}


# ---------------------------------------------------------------------------------- instance groups

GROUPS = [
    {"InstanceGroupName": "train", "InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
    {"InstanceGroupName": "data", "InstanceType": "ml.c5.18xlarge", "InstanceCount": 4},
]


def test_instance_groups_named_training_group():
    out = distribution_hyperparameters({"mpi": {"enabled": True}, "instance_groups": ["train"]},
                                       instance_type=None, instance_groups=GROUPS)
    assert out == {"sagemaker_distribution_instance_groups": ["train"], "sagemaker_mpi_enabled": True,
                   "sagemaker_mpi_custom_mpi_options": ""}


def test_instance_groups_single_group_is_filled_in_and_carries_the_instance_type():
    out = distribution_hyperparameters({"smdistributed": {"dataparallel": {"enabled": True}}},
                                       instance_type=None, instance_groups=GROUPS[:1])
    assert out["sagemaker_distribution_instance_groups"] == ["train"]
    assert out["sagemaker_instance_type"] == "ml.p4d.24xlarge"


def test_instance_groups_checks_use_the_training_groups_type():
    e = error({"smdistributed": {"dataparallel": {"enabled": True}}, "instance_groups": ["data"]},
              instance_type=None, instance_groups=GROUPS)
    assert e.field == "distribution.smdistributed.dataparallel" and "ml.c5.18xlarge" in e.problem


@pytest.mark.parametrize("distribution, groups, fragment", [
    ({"mpi": {"enabled": True}, "instance_groups": ["train"]}, None, "Instance groups not specified"),
    ({"mpi": {"enabled": True}, "instance_groups": ["train", "data"]}, GROUPS[:1], "oversubscribed"),
    ({"mpi": {"enabled": True}}, GROUPS, "should only contain one instance group name"),
    ({"mpi": {"enabled": True}, "instance_groups": ["trian"]}, GROUPS, "Invalid training instance group trian"),
    ({"mpi": {"enabled": False}, "instance_groups": ["train"]}, GROUPS, "no distribution strategies enabled"),
    ({"mpi": {"enabled": True}, "instance_groups": "train"}, GROUPS, "list of instance group names"),
])
def test_instance_group_errors(distribution, groups, fragment):
    e = error(distribution, instance_type=None, instance_groups=groups)
    assert e.field == "distribution.instance_groups"
    assert fragment in e.problem


def test_invalid_group_name_did_you_mean():
    e = error({"mpi": {"enabled": True}, "instance_groups": ["trian"]}, instance_type=None,
              instance_groups=GROUPS)
    assert "did you mean 'train'?" in e.fix


def test_instance_type_required_without_groups():
    e = error({"torch_distributed": {"enabled": True}}, instance_type=None)
    assert e.field == "instance_type"


# ------------------------------------------------------------------------------------------ shape


def test_not_a_dict():
    e = error(["torch_distributed"])
    assert e.field == "distribution" and "must be a dict" in e.problem


def test_unknown_strategy_did_you_mean():
    e = error({"torch_distribute": {"enabled": True}})
    assert e.field == "distribution.torch_distribute"
    assert "not a distribution strategy" in e.problem and "did you mean 'torch_distributed'?" in e.fix


def test_unknown_strategy_without_close_match_lists_all():
    e = error({"horovod": {"enabled": True}})
    assert "torch_distributed" in e.fix and "pytorchxla" in e.fix


@pytest.mark.parametrize("key", ["torch_distributed", "mpi", "smdistributed"])
def test_strategy_value_must_be_a_dict(key):
    e = error({key: True})
    assert e.field == f"distribution.{key}" and "requires a dictionary" in e.problem


def test_enabled_must_be_a_bool():
    e = error({"mpi": {"enabled": "true"}})
    assert e.field == "distribution.mpi.enabled" and "True or False" in e.problem


def test_unknown_option_did_you_mean():
    e = error({"mpi": {"enabled": True, "process_per_host": 8}})
    assert e.field == "distribution.mpi.process_per_host"
    assert "did you mean 'processes_per_host'?" in e.fix


def test_more_than_one_smdistributed_strategy():
    e = error({"smdistributed": {"dataparallel": {"enabled": True}, "modelparallel": {"enabled": True}}})
    assert e.field == "distribution.smdistributed"
    assert "Cannot use more than 1 smdistributed strategy" in e.problem


def test_invalid_smdistributed_strategy():
    e = error({"smdistributed": {"datapararell": {"enabled": True}}})
    assert e.field == "distribution.smdistributed.datapararell"
    assert "Invalid smdistributed strategy provided: datapararell" in e.problem
    assert "did you mean 'dataparallel'?" in e.fix


def test_smdistributed_sub_strategy_must_be_a_dict():
    e = error({"smdistributed": {"dataparallel": True}})
    assert e.field == "distribution.smdistributed.dataparallel" and "dictionary" in e.problem


# -------------------------------------------------------------------------------------- launchers


@pytest.mark.parametrize("distribution", [
    {"torch_distributed": {"enabled": True}, "mpi": {"enabled": True}},
    {"parameter_server": {"enabled": True}, "mpi": {"enabled": True}},
    {"pytorchxla": {"enabled": True}, "torch_distributed": {"enabled": True}},
    {"smdistributed": {"dataparallel": {"enabled": True}}, "mpi": {"enabled": True}},
    {"multi_worker_mirrored_strategy": {"enabled": True}, "parameter_server": {"enabled": True}},
])
def test_more_than_one_launcher_is_rejected(distribution):
    e = error(distribution)
    assert e.field == "distribution" and "more than one launcher" in e.problem
    assert "torch_distributed + smdistributed" in e.fix


def test_disabled_second_strategy_is_not_a_second_launcher():
    assert hp({"torch_distributed": {"enabled": True}, "mpi": {"enabled": False}}) == {
        "sagemaker_torch_distributed_enabled": True, "sagemaker_instance_type": P4D}


def test_torch_distributed_mpi_and_modelparallel_together_are_allowed():
    out = hp({"torch_distributed": {"enabled": True}, "mpi": {"enabled": True},
              "smdistributed": {"modelparallel": {"enabled": True, "parameters": {}}}})
    assert out["sagemaker_torch_distributed_enabled"] is True and out["sagemaker_mpi_enabled"] is True
    assert out["mp_parameters"] == {}


def test_pytorchddp_and_smdistributed_together():
    e = error({"pytorchddp": {"enabled": True}, "smdistributed": {"dataparallel": {"enabled": True}}})
    assert "Cannot use both pytorchddp and smdistributed" in e.problem


def test_modelparallel_needs_a_launcher():
    e = error({"smdistributed": {"modelparallel": {"enabled": True, "parameters": {"partitions": 2}}}})
    assert e.field == "distribution.smdistributed.modelparallel"
    assert "Cannot use Model Parallelism without MPI" in e.problem and "torch_distributed" in e.fix


# ---------------------------------------------------------------------------- instance-type rules


def test_torch_distributed_allowed_on_cpu():
    # departure from the SDK ("supported only for GPU and Trainium instances"): the local backend runs it
    assert hp({"torch_distributed": {"enabled": True}}, instance_type="ml.c5.xlarge",
              framework="pytorch", framework_version="2.5.1", py_version="py311", entry_point="train.py") == {
        "sagemaker_torch_distributed_enabled": True, "sagemaker_instance_type": "ml.c5.xlarge"}


def test_torch_distributed_needs_a_python_entry_point():
    e = error({"torch_distributed": {"enabled": True}}, entry_point="train.sh")
    assert e.field == "entry_point" and "Only python programs (*.py) are supported" in e.problem


def test_torch_distributed_py2_rejected():
    e = error({"torch_distributed": {"enabled": True}}, py_version="py27")
    assert e.field == "py_version" and "not supported by torch_distributed" in e.problem


def test_trainium_allows_torch_distributed():
    assert hp({"torch_distributed": {"enabled": True}}, instance_type="ml.trn1.32xlarge")[
        "sagemaker_instance_type"] == "ml.trn1.32xlarge"


def test_trainium_rejects_other_strategies():
    e = error({"mpi": {"enabled": True}}, instance_type="ml.trn1.32xlarge")
    assert e.field == "distribution.mpi"
    assert "Provided distribution strategy mpi is not supported for Trainium instances" in e.problem


def test_trainium_rejects_several_strategies():
    e = error({"torch_distributed": {"enabled": True},
               "smdistributed": {"modelparallel": {"enabled": True, "parameters": {}}}},
              instance_type="ml.trn1.32xlarge")
    assert "Multiple distribution strategies are not supported for Trainium" in e.problem


@pytest.mark.parametrize("t", ["ml.g5.48xlarge", "ml.p3.8xlarge", "ml.p5e.48xlarge", "ml.c5.xlarge"])
def test_smddp_only_on_supported_instance_types(t):
    e = error({"smdistributed": {"dataparallel": {"enabled": True}}}, instance_type=t)
    assert e.field == "distribution.smdistributed.dataparallel"
    assert t in e.problem and "ml.p4d.24xlarge" in e.problem and "ml.p5.48xlarge" in e.problem
    assert "torch_distributed" in e.fix


@pytest.mark.parametrize("t", ["ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge", "ml.p4de.24xlarge"])
def test_smddp_on_each_supported_type(t):
    assert hp({"smdistributed": {"dataparallel": {"enabled": True}}}, instance_type=t)[
        "sagemaker_distributed_dataparallel_enabled"] is True


@pytest.mark.parametrize("smd", [{"dataparallel": {"enabled": True}},
                                 {"modelparallel": {"enabled": True, "parameters": {}}}])
def test_p5_smdistributed_needs_torch_distributed(smd):
    distribution = {"smdistributed": smd}
    if "modelparallel" in smd:
        distribution["mpi"] = {"enabled": True}
    e = error(distribution, instance_type="ml.p5.48xlarge")
    assert e.field == "distribution.smdistributed"
    assert "do not support p5 instances" in e.problem and "torch_distributed" in e.fix


def test_p5e_modelparallel_needs_torch_distributed_too():
    e = error({"smdistributed": {"modelparallel": {"enabled": True, "parameters": {}}}, "mpi": {"enabled": True}},
              instance_type="ml.p5en.48xlarge")
    assert "do not support p5 instances" in e.problem


def test_smddp_py2_rejected():
    e = error({"smdistributed": {"dataparallel": {"enabled": True}}}, py_version="py27")
    assert e.field == "py_version" and "smdataparallel" in e.problem


# --------------------------------------------------------------------------------------- frameworks


def test_framework_must_run_the_strategy():
    e = error({"parameter_server": {"enabled": True}}, framework="pytorch")
    assert e.field == "distribution.parameter_server" and "pytorch" in e.problem
    e = error({"torch_distributed": {"enabled": True}}, framework="tensorflow")
    assert e.field == "distribution.torch_distributed"


def test_mwms_needs_tensorflow_2_9():
    e = error({"multi_worker_mirrored_strategy": {"enabled": True}}, framework="tensorflow",
              framework_version="2.8")
    assert "only supported from framework_version 2.9" in e.problem
    assert hp({"multi_worker_mirrored_strategy": {"enabled": True}}, framework="tensorflow",
              framework_version="2.16")


# ------------------------------------------------------------------------------------ values checks


@pytest.mark.parametrize("value", [0, -2, 2.5, "8", True])
def test_processes_per_host_must_be_positive_int(value):
    e = error({"mpi": {"enabled": True, "processes_per_host": value}})
    assert e.field == "distribution.mpi.processes_per_host" and "positive integer" in e.problem


def test_custom_mpi_options_must_be_a_string():
    e = error({"mpi": {"enabled": True, "custom_mpi_options": ["-x", "A"]}})
    assert e.field == "distribution.mpi.custom_mpi_options" and "string" in e.problem
    e = error({"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": 3}}})
    assert e.field == "distribution.smdistributed.dataparallel.custom_mpi_options"


def mp(parameters):
    return {"smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}},
            "mpi": {"enabled": True}}


MP_FIELD = "distribution.smdistributed.modelparallel.parameters"


@pytest.mark.parametrize("key, value", [("microbatches", 0), ("partitions", -1), ("active_microbatches", 1.5),
                                        ("partitions", True)])
def test_mp_positive_ints(key, value):
    e = error(mp({key: value}))
    assert e.field == f"{MP_FIELD}.{key}" and f"The number of {key} must be a positive integer" in e.problem


def test_mp_default_partition_required_without_auto_partition():
    e = error(mp({"partitions": 2, "auto_partition": False}))
    assert e.field == f"{MP_FIELD}.default_partition"
    assert "default_partition must be supplied if auto_partition is set to False" in e.problem
    assert hp(mp({"partitions": 2, "auto_partition": False, "default_partition": 0}))


def test_mp_default_partition_below_partitions():
    e = error(mp({"partitions": 2, "auto_partition": False, "default_partition": 2}))
    assert "default_partition must be less than the number of partitions" in e.problem


def test_mp_ddp_and_horovod_exclusive():
    e = error(mp({"partitions": 2, "ddp": True, "horovod": True}))
    assert e.field == f"{MP_FIELD}.ddp" and "'ddp' and 'horovod' cannot be simultaneously enabled" in e.problem


@pytest.mark.parametrize("params, key, fragment", [
    ({"pipeline": "fast"}, "pipeline", "pipeline must be a value in"),
    ({"placement_strategy": "x"}, "placement_strategy", "placement_strategy must be a value in"),
    ({"optimize": "cost"}, "optimize", "optimize must be a value in"),
    ({"ddp": "yes"}, "ddp", "ddp must be a value in"),
    ({"partition_file": 3}, "partition_file", "must be a str"),
    ({"memory_weight": 1.5}, "memory_weight", "between 0.0 and 1.0"),
    ({"ddp_port": 1234}, "ddp_port", "needs `ddp`"),
    ({"ddp": True, "ddp_port": -1}, "ddp_port", "Invalid port number -1"),
])
def test_mp_other_checks(params, key, fragment):
    e = error(mp(params))
    assert e.field == f"{MP_FIELD}.{key}" and fragment in e.problem


def test_mp_parameters_must_be_a_dict():
    e = error(mp("/path/to/config.json"))
    assert e.field == MP_FIELD and "must be a dict" in e.problem


# ---------------------------------------------------------------------------- strategy_of & friends


@pytest.mark.parametrize("distribution, expected", [
    (None, None),
    ({}, None),
    ({"torch_distributed": {"enabled": True}}, "torch_distributed"),
    ({"torch_distributed": {"enabled": False}}, None),
    ({"pytorchddp": {"enabled": True}}, "pytorchddp"),
    ({"mpi": {"enabled": True}}, "mpi"),
    ({"parameter_server": {"enabled": True}}, "parameter_server"),
    ({"multi_worker_mirrored_strategy": {"enabled": True}}, "multi_worker_mirrored_strategy"),
    ({"pytorchxla": {"enabled": True}}, "pytorchxla"),
    ({"smdistributed": {"dataparallel": {"enabled": True}}}, "smdistributed_dataparallel"),
    ({"smdistributed": {"dataparallel": {"enabled": True}}, "torch_distributed": {"enabled": True}},
     "smdistributed_dataparallel"),
    ({"smdistributed": {"modelparallel": {"enabled": True}}, "mpi": {"enabled": True}},
     "smdistributed_modelparallel"),
    ({"smdistributed": {"modelparallel": {"enabled": True}}, "torch_distributed": {"enabled": True}},
     "smdistributed_modelparallel"),
    ({"instance_groups": ["train"]}, None),
])
def test_strategy_of(distribution, expected):
    assert strategy_of(distribution) == expected


def test_processes_per_host():
    assert processes_per_host({"mpi": {"enabled": True, "processes_per_host": 4}}) == 4
    assert processes_per_host({"mpi": {"enabled": True}}) is None
    assert processes_per_host({"mpi": {"enabled": False, "processes_per_host": 4}}) is None
    assert processes_per_host({"torch_distributed": {"enabled": True}}) is None
    assert processes_per_host(None) is None


def test_module_imports_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys, airflow_smdist.specs.distribution, airflow_smdist.specs.best_practices, "
            "airflow_smdist.specs.builtin_algorithms, airflow_smdist.specs.images, airflow_smdist.specs.instances;"
            "heavy=[m for m in ('sagemaker','torch','boto3','botocore') if m in sys.modules];"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_launcher_the_local_backend_does_not_run_is_refused_with_the_launchers_of_its_framework():
    """TensorFlow's parameter_server: the fix names what runs locally for TensorFlow, not PyTorch's launchers."""
    from airflow_smdist.backends.local.job import training
    from airflow_smdist.specs.errors import SpecError
    from airflow_smdist.specs.training import build_training

    plan = build_training(job_name="ps", role="arn:aws:iam::123456789012:role/R", output_path="s3://b/o",
                          entry_point="train.py", source_dir="s3://b/src/sourcedir.tar.gz", framework="tensorflow",
                          framework_version="2.16", py_version="py310", instance_type="ml.c5.xlarge",
                          instance_count=2, distribution={"parameter_server": {"enabled": True}})
    with pytest.raises(SpecError) as info:
        training.check_request(plan.request)
    assert info.value.field == "distribution.parameter_server"
    assert "multi_worker_mirrored_strategy" in info.value.fix and "torch" not in info.value.fix, info.value.fix
