"""The training toolkit's rules (CLI args, launchers, sharding, hosts) and storage's traversal guard."""

from __future__ import annotations

import os

import pytest

from airflow_smdist.backends.local.job import contract
from airflow_smdist.backends.local.job.supervisor import shard
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.storage import Storage, StoredObject, relative_key, safe_join
from airflow_smdist import wire


def test_cli_args_as_the_training_toolkit_builds_them():
    hps = wire.decode_hyperparameters({"epochs": "3", "lr": "0.1", "name": '"abc"', "flag": "true",
                                           "d": '{"b": 1, "a": 2}', "raw": "not-json"})
    assert hps == {"epochs": 3, "lr": 0.1, "name": "abc", "flag": True, "d": {"b": 1, "a": 2}, "raw": "not-json"}
    assert wire.to_cmd_args(hps) == ["-d", "a=2,b=1", "--epochs", "3", "--flag", "True", "--lr", "0.1",
                                         "--name", "abc", "--raw", "not-json"]


def test_sagemaker_hyperparameters_are_split_out():
    user, fixed, extra = wire.split_hyperparameters(
        {"lr": 1, "sagemaker_program": "t.py", "sagemaker_mpi_enabled": True, "_tuning_objective_metric": "x"})
    assert user == {"lr": 1} and extra == {"sagemaker_mpi_enabled": True}
    assert set(fixed) == {"sagemaker_program", "_tuning_objective_metric"}


@pytest.mark.parametrize("hps, launcher", [
    ({"sagemaker_torch_distributed_enabled": True}, "torchrun"),
    ({"sagemaker_mpi_enabled": True, "sagemaker_torch_distributed_enabled": True}, "mpi"),
    ({"sagemaker_pytorch_ddp_enabled": True}, "smddp"),
    ({"sagemaker_distributed_dataparallel_enabled": True}, "smddp"),
    ({"sagemaker_multi_worker_mirrored_strategy_enabled": True}, "mwms"),
    ({}, "process"),
])
def test_launcher_order_of_the_pytorch_container(hps, launcher):
    assert contract.launcher_of(hps) == launcher


def test_torchrun_command_per_host():
    cluster = contract.make_cluster({"InstanceType": "ml.g5.12xlarge", "InstanceCount": 3}, (4, 2))
    assert cluster.names == ["127.4.2.1", "127.4.2.2", "127.4.2.3"]
    host = cluster.hosts[2]
    cmd = contract.host_command(launcher="torchrun", entry="train.py", args=["--lr", "0.1"], code_dir_outside="/x",
                                cluster=cluster, host=host, nproc=4, master_port=7777, python="py")
    assert cmd == ["py", "-m", "torch.distributed.run", "--nnodes", "3", "--nproc_per_node", "4", "--master_addr",
                   "127.4.2.1", "--master_port", "7777", "--node_rank", "2", "train.py", "--lr", "0.1"]
    with pytest.raises(ValueError, match="python programs"):
        contract.host_command(launcher="torchrun", entry="train.sh", args=[], code_dir_outside="/x",
                              cluster=cluster, host=host, nproc=1, master_port=7777)


def test_hosts_sort_lexicographically_like_sagemaker():
    cluster = contract.make_cluster({"InstanceType": "ml.m5.xlarge", "InstanceCount": 11}, (1, 0))
    assert cluster.names[:3] == ["127.1.0.1", "127.1.0.10", "127.1.0.11"]
    assert cluster.rank(cluster.hosts[1]) == 3  # 127.1.0.2 comes after .1, .10, .11


def test_heterogeneous_cluster_groups():
    cluster = contract.make_cluster({"InstanceGroups": [
        {"InstanceGroupName": "data", "InstanceType": "ml.c5.18xlarge", "InstanceCount": 2},
        {"InstanceGroupName": "gpu", "InstanceType": "ml.p4d.24xlarge", "InstanceCount": 1}]}, (1, 1))
    assert cluster.is_hetero and [h.group for h in cluster.hosts] == ["data", "data", "gpu"]
    rc = contract.resource_config_json(cluster, cluster.hosts[2])
    assert rc["current_group_name"] == "gpu" and rc["current_instance_type"] == "ml.p4d.24xlarge"
    assert [g["instance_group_name"] for g in rc["instance_groups"]] == ["data", "gpu"]


def _training_env(hps: dict, environment: dict | None = None, host: int = 0) -> dict:
    import json

    cluster = contract.make_cluster({"InstanceGroups": [
        {"InstanceGroupName": "data", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
        {"InstanceGroupName": "gpu", "InstanceType": "ml.g5.xlarge", "InstanceCount": 2}]}, (1, 2))
    request = {"TrainingJobName": "j", "AlgorithmSpecification": {"TrainingInputMode": "File"},
               "HyperParameters": {k: json.dumps(v) for k, v in hps.items()}, "Environment": environment or {}}
    env = contract.host_environment(request=request, cluster=cluster, host=cluster.hosts[host],
                                    paths=contract.HostPaths("/opt/ml"), channels=[], num_cpus=1)
    return {**json.loads(env["SM_TRAINING_ENV"]),
            "SM_DISTRIBUTION_INSTANCE_GROUPS": json.loads(env["SM_DISTRIBUTION_INSTANCE_GROUPS"])}


@pytest.mark.parametrize("hps, groups, master", [
    ({}, [], "127.1.2.1"),  # no distribution: none, and the first host is the master
    ({"sagemaker_torch_distributed_enabled": True}, ["gpu"], "127.1.2.2"),  # the host's own group
    ({"sagemaker_mpi_enabled": True, "sagemaker_distribution_instance_groups": ["gpu"]}, ["gpu"], "127.1.2.2"),
])
def test_distribution_groups_and_master_as_the_training_toolkit_derives_them(hps, groups, master):
    env = _training_env(hps, host=1)
    assert env["distribution_instance_groups"] == env["SM_DISTRIBUTION_INSTANCE_GROUPS"] == groups
    assert env["distribution_hosts"] == (["127.1.2.2", "127.1.2.3"] if groups else [])
    assert env["master_hostname"] == master
    assert env["topology"] == []


@pytest.mark.parametrize("environment, enabled", [
    ({}, None), ({"SM_HP_MP_PARAMETERS": "{}"}, False), ({"SM_HP_MP_PARAMETERS": '{"partitions": 2}'}, True)])
def test_model_parallel_flag_reads_the_containers_environment_as_the_toolkit_does(environment, enabled):
    assert _training_env({}, environment)["is_modelparallel_enabled"] is enabled


def test_python_entry_point_runs_after_the_end_of_options_marker_but_not_under_mpi4py():
    from airflow_smdist.backends.local.job import mpi

    cmd = contract.entry_command("train.py", ["--lr", "0.1"], "/nowhere", python="py")
    assert cmd == ["py", "--", "train.py", "--lr", "0.1"]  # TTK 5.1's ProcessRunner
    assert mpi.rank_program(cmd, "py") == ["py", "-m", "mpi4py", "train.py", "--lr", "0.1"]  # its MasterRunner


def test_sharded_by_s3_key_gives_each_host_about_one_nth_and_never_splits_objects():
    objects = [StoredObject(f"s3://b/p/{i:02d}", f"p/{i:02d}", 1) for i in range(10)]
    shares = [shard(objects, r, 3) for r in range(3)]
    assert [len(s) for s in shares] == [4, 3, 3]
    assert sorted(o.key for s in shares for o in s) == sorted(o.key for o in objects)
    assert shard(objects[:1], 1, 2) == []  # fewer objects than hosts: some hosts get none


def test_relative_keys_and_traversal_rejected(tmp_path):
    obj = lambda key: StoredObject(f"s3://b/{key}", key, 1)  # noqa: E731
    assert relative_key("s3://b/data/train", obj("data/train/a.csv")) == "a.csv"
    assert relative_key("s3://b/data/train/", obj("data/train/sub/a.csv")) == "sub/a.csv"
    assert relative_key("s3://b/data/train.csv", obj("data/train.csv")) == "train.csv"
    for bad in ("../evil", "a/../../evil", "/etc/passwd"):
        with pytest.raises(SpecError):
            safe_join(tmp_path, bad)
    assert relative_key("s3://b/data/", obj("data//etc/passwd")) == "/etc/passwd"
    with pytest.raises(SpecError, match="absolute"):
        safe_join(tmp_path, relative_key("s3://b/data/", obj("data//etc/passwd")))
    os.symlink("/", tmp_path / "link")
    with pytest.raises(SpecError, match="outside"):
        safe_join(tmp_path, "link/etc/passwd")
    assert safe_join(tmp_path, "ok/file.txt") == tmp_path / "ok" / "file.txt"


def test_file_storage_lists_by_string_prefix(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "a.csv").write_text("1")
    (tmp_path / "train2").mkdir()
    (tmp_path / "train2" / "b.csv").write_text("22")
    store = Storage()
    assert [o.key for o in store.list(f"file://{tmp_path}/train/")] == [f"{tmp_path}/train/a.csv"]
    assert len(store.list(f"file://{tmp_path}/train")) == 2  # S3 semantics: a string prefix
    with pytest.raises(SpecError, match="scheme"):
        store.list("gs://bucket/x")


def test_runtime_reads_resourceconfig_and_launcher_ranks(tmp_path, monkeypatch):
    import json

    from airflow_smdist.runtime import cluster

    (tmp_path / "input" / "config").mkdir(parents=True)
    (tmp_path / "input" / "config" / "resourceconfig.json").write_text(json.dumps(
        {"current_host": "algo-2", "hosts": ["algo-2", "algo-1"], "current_instance_type": "ml.g5.12xlarge"}))
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(tmp_path))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    c = cluster()
    assert (c.hosts, c.current_host, c.host_rank, c.rank, c.world_size, c.master_addr) == (
        ["algo-1", "algo-2"], "algo-2", 1, 1, 2, "algo-1")
    assert not c.is_master and c.instance_type == "ml.g5.12xlarge"
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    c = cluster()
    assert (c.rank, c.world_size, c.host_rank) == (5, 8, 1)
