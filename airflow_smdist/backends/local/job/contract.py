"""The training container contract, as the SageMaker training toolkit gives it to a script.

Everything here is what ``sagemaker-training-toolkit`` (TTK) and the PyTorch training toolkit derive from
``/opt/ml/input/config/*.json`` and the hyperparameters: the SM_* variables, the CLI arguments, the
command that runs the entry point, and which launcher runs it (docs/contracts.md
§1.4-1.6). Pure functions over dicts, so tests check the contract without running anything.

Upstream versions followed (docs/contracts.md §0): ``aws/sagemaker-training-toolkit`` at ``3383937``
(5.1.1.dev0; the oracle test runs the released ``sagemaker-training`` 5.1.x against this module's output) and
``aws/sagemaker-pytorch-training-toolkit`` at ``d929872``.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from airflow_smdist.wire import (  # the wire format, read here as the training toolkit reads it
    DISTRIBUTION_FLAGS,
    decode_hyperparameters,
    split_hyperparameters,
    to_cmd_args,
)

MASTER_PORT = 7777  # SageMaker's torchrun and PyTorch container port


@dataclass
class Host:
    label: str  # algo-N: SageMaker's name, used for log streams and directories
    address: str  # the host's IPv4 address: on the job's bridge (namespaces) or 127.A.B.N (fallback)
    group: str = "homogeneousCluster"
    instance_type: str = "ml.m5.xlarge"
    named: bool = False  # scripts see the label (namespaces, /etc/hosts resolves it) or the address

    @property
    def name(self) -> str:
        """The host name scripts see: SM_CURRENT_HOST, SM_HOSTS, resourceconfig.json."""
        return self.label if self.named else self.address


@dataclass
class Cluster:
    hosts: list[Host]
    groups: list[dict[str, Any]] = field(default_factory=list)  # [{instance_group_name, instance_type, hosts}]
    is_hetero: bool = False
    interface: str = "lo"  # resourceconfig's network_interface_name: eth0 in a namespace

    @property
    def names(self) -> list[str]:
        """SM_HOSTS: sorted lexicographically, as SageMaker does."""
        return sorted(h.name for h in self.hosts)

    def rank(self, host: Host) -> int:
        return self.names.index(host.name)

    def by_name(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def distribution_hosts(self, extra: dict[str, Any]) -> list[str]:
        """The hosts of ``sagemaker_distribution_instance_groups`` (all groups when unset), in SM_HOSTS order."""
        groups = extra.get("sagemaker_distribution_instance_groups") or [g["instance_group_name"] for g in self.groups]
        return [n for n in self.names if self.by_name(n).group in groups]

    @property
    def master(self) -> str:
        return self.names[0]


MAX_HOSTS = 253  # host N has address <subnet>.N (127.A.B.N in the fallback): .1 to .253


def make_cluster(resource_config: dict[str, Any], block: tuple[int, int], subnet: str | None = None) -> Cluster:
    """The job's hosts: named ``algo-N`` at ``<subnet>.N`` when ``subnet`` (a /24's network address, the
    namespace mode) is given, else named by their loopback address 127.A.B.N."""
    a, b = block
    prefix = subnet.rsplit(".", 1)[0] if subnet else f"127.{a}.{b}"
    groups_in = resource_config.get("InstanceGroups") or [
        {"InstanceGroupName": "homogeneousCluster", "InstanceType": resource_config["InstanceType"],
         "InstanceCount": resource_config["InstanceCount"]}]
    hosts: list[Host] = []
    groups: list[dict[str, Any]] = []
    for g in groups_in:
        members = []
        for _ in range(int(g["InstanceCount"])):
            n = len(hosts) + 1
            h = Host(f"algo-{n}", f"{prefix}.{n}", g["InstanceGroupName"], g["InstanceType"], named=bool(subnet))
            hosts.append(h)
            members.append(h.name)
        groups.append({"instance_group_name": g["InstanceGroupName"], "instance_type": g["InstanceType"],
                       "hosts": members})
    if len(hosts) > MAX_HOSTS:
        raise ValueError(f"{len(hosts)} instances: the local backend runs at most {MAX_HOSTS} hosts per job")
    return Cluster(hosts, groups, is_hetero=len(groups) > 1, interface="eth0" if subnet else "lo")


def check_instance_count(count: int, field_name: str) -> None:
    """Refuse, before the job starts, more hosts than the local backend can address."""
    if count > MAX_HOSTS:
        from airflow_smdist.specs.errors import SpecError

        raise SpecError(field_name, f"{count} instances: the local backend runs at most {MAX_HOSTS} simulated hosts "
                        "per job (one address each in a /24), all on this machine's cores.",
                        "use fewer instances locally (the distribution code is the same for 2 hosts as for 300), "
                        "or backend='sagemaker'.")


def etc_hosts(cluster: Cluster) -> str:
    """The /etc/hosts of every host of a namespaced job: each algo-N resolves to its address."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{h.address}\t{h.label}" for h in cluster.hosts]
    return "\n".join(lines) + "\n"


def resource_config_json(cluster: Cluster, host: Host) -> dict[str, Any]:
    """resourceconfig.json of ``host``: the documented fields plus the ones TTK reads (both group keys)."""
    return {
        "current_host": host.name,
        "current_instance_type": host.instance_type,
        "current_group_name": host.group,
        "current_instance_group": host.group,  # TTK's own fallback writer uses this key
        "hosts": cluster.names,
        "instance_groups": cluster.groups,
        "network_interface_name": cluster.interface,
    }


def input_data_config_json(request: dict[str, Any], channel_names: list[str] | None = None) -> dict[str, Any]:
    default_mode = request["AlgorithmSpecification"].get("TrainingInputMode", "File")
    out = {}
    for ch in request.get("InputDataConfig", []):
        if channel_names is not None and ch["ChannelName"] not in channel_names:
            continue
        s3 = ch.get("DataSource", {}).get("S3DataSource", {})
        entry = {"TrainingInputMode": ch.get("InputMode", default_mode),
                 "S3DistributionType": s3.get("S3DataDistributionType", "FullyReplicated"),
                 "RecordWrapperType": ch.get("RecordWrapperType", "None")}
        if ch.get("ContentType"):
            entry["ContentType"] = ch["ContentType"]
        out[ch["ChannelName"]] = entry
    return out


def _env_value(v: Any) -> str:
    """TTK mapping.to_env_vars: strings as they are, others JSON (sorted, compact), None as ''."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


@dataclass
class HostPaths:
    """Where the /opt/ml paths of one host are, as seen by its processes."""

    base: str  # "/opt/ml" in a namespace; the host directory otherwise

    def p(self, *parts: str) -> str:
        return os.path.join(self.base, *parts)


def launcher_of(fixed_and_extra: dict[str, Any]) -> str:
    """Which runner the PyTorch training toolkit picks, in its order (contracts §1.6)."""
    hp = fixed_and_extra
    if hp.get("sagemaker_mpi_enabled"):
        return "mpi"
    if hp.get("sagemaker_pytorch_ddp_enabled"):
        return "smddp"
    if hp.get("sagemaker_torch_distributed_enabled"):
        return "torchrun"
    if hp.get("sagemaker_distributed_dataparallel_enabled"):
        return "smddp"
    if hp.get("sagemaker_pytorch_xla_multi_worker_enabled"):
        return "xla"
    if hp.get("sagemaker_parameter_server_enabled"):
        return "parameter_server"
    if hp.get("sagemaker_multi_worker_mirrored_strategy_enabled"):
        return "mwms"
    return "process"


def distribution_instance_groups(extra: dict[str, Any], host: Host) -> list[str]:
    """SM_DISTRIBUTION_INSTANCE_GROUPS as TTK computes it for ``host``: ``sagemaker_distribution_instance_groups``
    when given, else the host's own group when a distribution is enabled, else none
    (``get_distribution_instance_groups_from_resource_config``)."""
    if "sagemaker_distribution_instance_groups" in extra:
        return list(extra["sagemaker_distribution_instance_groups"] or [])
    return [host.group] if any(extra.get(flag, False) for flag in DISTRIBUTION_FLAGS) else []


def processes_per_host(extra: dict[str, Any], num_gpus: int) -> int:
    """``sagemaker_mpi_num_of_processes_per_host`` or SM_NUM_GPUS or 1, as the containers decide."""
    n = extra.get("sagemaker_mpi_num_of_processes_per_host")
    if n:
        return int(n)
    return num_gpus or 1


def requested_num_cpus(request: dict[str, Any]) -> int | None:
    """``SM_NUM_CPUS`` as the request's Environment sets it (then it is the job's value everywhere: the variable,
    ``SM_TRAINING_ENV``'s num_cpus, ``OMP_NUM_THREADS`` unless that is set too), else None."""
    value = (request.get("Environment") or {}).get("SM_NUM_CPUS")
    if value is None:
        return None
    n = int(value) if str(value).strip().isdigit() else 0
    if n < 1:
        from airflow_smdist.specs.errors import SpecError

        raise SpecError("Environment.SM_NUM_CPUS", f"{value!r} is not a whole number of CPUs of at least 1.",
                        "set it to a string such as '8', or leave it out for this machine's share of the cores.")
    return n


def host_environment(*, request: dict[str, Any], cluster: Cluster, host: Host, paths: HostPaths, channels: list[str],
                     num_cpus: int, num_gpus: int = 0, master_port: int = MASTER_PORT,
                     region: str = "us-east-1", account: str = "000000000000") -> dict[str, str]:
    """Every variable the platform, TTK and the PyTorch container set for a script (contracts §1.5)."""
    job = request["TrainingJobName"]
    hps = decode_hyperparameters(request.get("HyperParameters", {}))
    user, fixed, extra = split_hyperparameters(hps)
    input_data_config = input_data_config_json(request, channels)
    rc = resource_config_json(cluster, host)
    entry = fixed.get("sagemaker_program") or ""
    channel_dirs = {ch: paths.p("input", "data", ch) for ch in sorted(channels)}
    dist_groups = distribution_instance_groups(extra, host)
    dist_hosts = [a for g in cluster.groups if g["instance_group_name"] in dist_groups for a in g["hosts"]]
    mp_parameters = (request.get("Environment") or {}).get("SM_HP_MP_PARAMETERS")
    training_env = {
        "additional_framework_parameters": extra,
        "channel_input_dirs": channel_dirs,
        "current_host": host.name,
        "current_instance_group": host.group,
        "current_instance_group_hosts": next(g["hosts"] for g in cluster.groups
                                             if g["instance_group_name"] == host.group),
        "current_instance_type": host.instance_type,
        "distribution_hosts": dist_hosts,
        "distribution_instance_groups": dist_groups,
        "framework_module": os.environ.get("SAGEMAKER_TRAINING_MODULE", "sagemaker_pytorch_container.training:main"),
        "hosts": cluster.names,
        "hyperparameters": user,
        "input_config_dir": paths.p("input", "config"),
        "input_data_config": input_data_config,
        "input_dir": paths.p("input"),
        "instance_groups": [g["instance_group_name"] for g in cluster.groups],
        "instance_groups_dict": {g["instance_group_name"]: g for g in cluster.groups},
        "is_hetero": cluster.is_hetero,
        "is_master": host.name == (dist_hosts[0] if dist_hosts else cluster.master),
        # TTK: ``os.environ.get("SM_HP_MP_PARAMETERS")`` when Environment() is made, i.e. the container's own
        # environment (the request's Environment), not the hyperparameter: None when unset
        "is_modelparallel_enabled": mp_parameters and mp_parameters != "{}",
        "is_smddpmprun_installed": False,
        "is_smddprun_installed": False,
        "job_name": job,
        "log_level": int(fixed.get("sagemaker_container_log_level", 20)),
        "master_hostname": dist_hosts[0] if dist_hosts else cluster.master,
        "model_dir": paths.p("model"),
        "module_dir": fixed.get("sagemaker_submit_directory", ""),
        "module_name": entry[:-3] if entry.endswith(".py") else entry,
        "network_interface_name": cluster.interface,
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "num_neurons": 0,
        "output_data_dir": paths.p("output", "data"),
        "output_dir": paths.p("output"),
        "output_intermediate_dir": paths.p("output", "intermediate"),
        "resource_config": rc,
        "topology": rc.get("topology", []),  # TTK: only GB200 Ultraservers' resourceconfig.json has one
        "user_entry_point": entry,
    }
    env: dict[str, str] = {
        "TRAINING_JOB_NAME": job,
        "TRAINING_JOB_ARN": f"arn:aws:sagemaker:{region}:{account}:training-job/{job.lower()}",
        "SAGEMAKER_BASE_DIR": paths.base,
        "SAGEMAKER_PROGRAM": entry,
        "SAGEMAKER_SUBMIT_DIRECTORY": fixed.get("sagemaker_submit_directory", ""),
        "SAGEMAKER_REGION": str(fixed.get("sagemaker_region", region)),
        "SAGEMAKER_JOB_NAME": job,
        "CURRENT_HOST": host.name,
        "SM_HOSTS": _env_value(cluster.names),
        "SM_NETWORK_INTERFACE_NAME": cluster.interface,
        "SM_HPS": _env_value(user),
        "SM_USER_ENTRY_POINT": entry,
        "SM_FRAMEWORK_PARAMS": _env_value(extra),
        "SM_RESOURCE_CONFIG": _env_value(rc),
        "SM_INPUT_DATA_CONFIG": _env_value(input_data_config),
        "SM_OUTPUT_DATA_DIR": paths.p("output", "data"),
        "SM_CHANNELS": _env_value(sorted(channels)),
        "SM_CURRENT_HOST": host.name,
        "SM_CURRENT_INSTANCE_TYPE": host.instance_type,
        "SM_CURRENT_INSTANCE_GROUP": host.group,
        "SM_CURRENT_INSTANCE_GROUP_HOSTS": _env_value(training_env["current_instance_group_hosts"]),
        "SM_INSTANCE_GROUPS": _env_value(training_env["instance_groups"]),
        "SM_INSTANCE_GROUPS_DICT": _env_value(training_env["instance_groups_dict"]),
        "SM_DISTRIBUTION_INSTANCE_GROUPS": _env_value(dist_groups),
        "SM_IS_HETERO": _env_value(cluster.is_hetero),
        "SM_MODULE_NAME": training_env["module_name"],
        "SM_MODULE_DIR": training_env["module_dir"],
        "SM_LOG_LEVEL": str(training_env["log_level"]),
        "SM_FRAMEWORK_MODULE": training_env["framework_module"],
        "SM_INPUT_DIR": paths.p("input"),
        "SM_INPUT_CONFIG_DIR": paths.p("input", "config"),
        "SM_OUTPUT_DIR": paths.p("output"),
        "SM_MODEL_DIR": paths.p("model"),
        "SM_OUTPUT_INTERMEDIATE_DIR": paths.p("output", "intermediate"),
        "SM_NUM_CPUS": str(num_cpus),
        "SM_NUM_GPUS": str(num_gpus),
        "SM_NUM_NEURONS": "0",
        "SM_TRAINING_ENV": _env_value(training_env),
        "SM_USER_ARGS": _env_value(to_cmd_args(user)),
        # only the names of the v2 toolkit (SageMaker's framework containers); the SDK v3 driver's
        # (SM_MASTER_ADDR, SM_HOST_COUNT, ...) are not set by them, so a script relying on them fails here too
        # the PyTorch container's distributed settings
        "MASTER_ADDR": training_env["master_hostname"],
        "MASTER_PORT": str(master_port),
        "NCCL_SOCKET_IFNAME": cluster.interface,
        "GLOO_SOCKET_IFNAME": cluster.interface,
        "NCCL_IB_DISABLE": "1",
        "NCCL_DEBUG": "WARN",
    }
    for name, path in channel_dirs.items():
        env[f"SM_CHANNEL_{name.upper()}"] = path
    for key, value in user.items():
        env[f"SM_HP_{key.upper()}"] = _env_value(value)
    env.update(request.get("Environment") or {})
    if fixed.get("sagemaker_s3_output"):
        env["SM_S3_OUTPUT"] = str(fixed["sagemaker_s3_output"])
    return env


def entry_command(entry: str, args: list[str], code_dir_outside: str, python: str = sys.executable) -> list[str]:
    """How TTK's ProcessRunner runs the entry point (``_entry_point_type``)."""
    if os.path.exists(os.path.join(code_dir_outside, "setup.py")) and entry.endswith(".py"):
        return [python, "-m", entry[:-3].replace("/", "."), *args]
    if entry.endswith(".py"):
        return [python, "--", entry, *args]  # TTK 5.1: the end-of-options marker, so the name is a script's
    return ["/bin/sh", "-c", f"./{entry} {shlex.join(args)}"]


def host_command(*, launcher: str, entry: str, args: list[str], code_dir_outside: str, cluster: Cluster,
                 host: Host, nproc: int, master_port: int, python: str = sys.executable,
                 mpishim: str | None = None, dist_hosts: list[str] | None = None) -> list[str]:
    """The command of one simulated host for the launcher the container would use (``mpishim``: the path of
    the MPI shim's private copy, run by path in a job runtime that has no ``airflow_smdist``). A heterogeneous
    cluster runs the distributed launcher only on the distribution instance groups' hosts (``dist_hosts``);
    the other hosts run the entry point as a plain process, as the toolkits do."""
    dist = cluster.names if dist_hosts is None else dist_hosts
    if launcher in ("torchrun", "mpi", "smddp") and host.name not in dist:
        return entry_command(entry, args, code_dir_outside, python)
    if launcher == "torchrun":
        if not entry.endswith(".py"):
            raise ValueError("torch_distributed runs only python programs (*.py)")
        return [python, "-m", "torch.distributed.run", "--nnodes", str(len(dist)), "--nproc_per_node", str(nproc),
                "--master_addr", dist[0], "--master_port", str(master_port),
                "--node_rank", str(dist.index(host.name)), entry, *args]
    if launcher in ("mpi", "smddp"):
        inner = entry_command(entry, args, code_dir_outside, python)
        shim = [python, mpishim] if mpishim else [python, "-m", "airflow_smdist.backends.local.inhost.mpishim"]
        return [*shim, "--np", str(nproc), "--nodes", str(len(dist)),
                "--node-rank", str(dist.index(host.name)), "--", *inner]
    return entry_command(entry, args, code_dir_outside, python)


#: the TensorFlow training toolkit's port for multi_worker_mirrored_strategy workers
MWMS_PORT = 8890


def tf_config(workers: list[str], host: str, port: int = MWMS_PORT) -> dict[str, Any]:
    """TF_CONFIG of the TensorFlow container for multi_worker_mirrored_strategy: every host of the distribution
    instance groups a worker, whatever their number (sagemaker-tensorflow-training-toolkit's ``train`` and
    ``_build_tf_config_for_mwms``; hosts of other groups get none)."""
    return {"cluster": {"worker": [f"{h}:{port}" for h in workers]}, "environment": "cloud",
            "task": {"index": workers.index(host), "type": "worker"}}
