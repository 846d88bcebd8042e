"""Cluster facts for code running *inside* a job, the same on SageMaker and on the local backend.

    from airflow_smdist.runtime import cluster
    c = cluster()
    c.hosts, c.current_host, c.master_addr, c.master_port, c.host_rank, c.rank, c.world_size, c.is_master

Read from ``resourceconfig.json`` (training: ``<base>/input/config``, processing: ``<base>/config``, where
``<base>`` is ``SAGEMAKER_BASE_DIR`` or ``/opt/ml``), falling back to the SM_* variables. ``channels`` maps
each input to its directory: training channels from SM_CHANNEL_*, processing inputs from
``<base>/config/processingjobconfig.json`` (their LocalPath). Process ranks come
from the launcher's variables (torchrun's RANK / WORLD_SIZE / LOCAL_RANK, Open MPI's OMPI_COMM_WORLD_*),
and default to one process per host. Imports nothing outside the standard library.
"""

from __future__ import annotations

from typing import Any

import json
import os
from dataclasses import dataclass, field

__all__ = ["Cluster", "cluster", "resource_config"]


@dataclass(frozen=True)
class Cluster:
    hosts: list[str]
    current_host: str
    master_addr: str
    master_port: int
    host_rank: int
    num_hosts: int
    rank: int
    world_size: int
    local_rank: int
    instance_type: str
    num_gpus: int
    num_cpus: int
    channels: dict[str, str] = field(default_factory=dict)
    model_dir: str | None = None
    output_data_dir: str | None = None
    checkpoint_dir: str | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)

    @property
    def is_master(self) -> bool:
        """True on the one process that should checkpoint and save: global rank 0."""
        return self.rank == 0

    @property
    def is_master_host(self) -> bool:
        return self.host_rank == 0


def _base_dir() -> str:
    return os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")


def resource_config() -> dict[str, Any]:
    """The job's resourceconfig.json, or one made from SM_HOSTS / SM_CURRENT_HOST, or a one-host default."""
    base = _base_dir()
    for path in (os.path.join(base, "input", "config", "resourceconfig.json"),
                 os.path.join(base, "config", "resourceconfig.json")):
        try:
            with open(path) as f:
                config: dict[str, Any] = json.load(f)
                return config
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
    if os.environ.get("SM_HOSTS"):
        hosts = json.loads(os.environ["SM_HOSTS"])
        return {"hosts": hosts, "current_host": os.environ.get("SM_CURRENT_HOST", hosts[0]),
                "current_instance_type": os.environ.get("SM_CURRENT_INSTANCE_TYPE", "local")}
    return {"hosts": ["algo-1"], "current_host": "algo-1", "current_instance_type": "local"}


#: inputs a processing job gets from the provider itself, not from the DAG author
_OWN_PROCESSING_INPUTS = ("code", "smdist-function")


def processing_inputs() -> dict[str, str]:
    """Input name -> local directory of a processing job's S3 inputs (empty outside processing jobs)."""
    base = _base_dir()
    try:
        with open(os.path.join(base, "config", "processingjobconfig.json")) as f:
            config = json.load(f)
    except (FileNotFoundError, NotADirectoryError, PermissionError, ValueError):
        return {}
    out = {}
    for item in config.get("ProcessingInputs") or []:
        local = (item.get("S3Input") or {}).get("LocalPath")
        if not local or item.get("InputName") in _OWN_PROCESSING_INPUTS:
            continue
        if base != "/opt/ml" and local.startswith("/opt/ml/"):
            local = base + local[len("/opt/ml"):]
        out[item["InputName"]] = local
    return out


def _int_env(*names: str) -> int | None:
    for n in names:
        if os.environ.get(n, "").strip().lstrip("-").isdigit():
            return int(os.environ[n])
    return None


def cluster() -> Cluster:
    rc = resource_config()
    hosts = sorted(rc["hosts"])
    current = rc["current_host"]
    host_rank = hosts.index(current) if current in hosts else 0
    world = _int_env("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")
    rank = _int_env("RANK", "OMPI_COMM_WORLD_RANK")
    local_rank = _int_env("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")
    base = _base_dir()
    channels = {}
    for key, value in os.environ.items():
        if key.startswith("SM_CHANNEL_"):
            channels[key[len("SM_CHANNEL_"):].lower()] = value
    if not channels:
        channels = processing_inputs()
    try:
        hps = json.loads(os.environ.get("SM_HPS", "{}"))
    except ValueError:
        hps = {}
    ckpt = os.path.join(base, "checkpoints")
    return Cluster(
        hosts=hosts,
        current_host=current,
        master_addr=os.environ.get("MASTER_ADDR") or os.environ.get("SM_MASTER_ADDR") or hosts[0],
        master_port=int(os.environ.get("MASTER_PORT") or os.environ.get("SM_MASTER_PORT") or 7777),
        host_rank=host_rank,
        num_hosts=len(hosts),
        rank=rank if rank is not None else host_rank,
        world_size=world if world is not None else len(hosts),
        local_rank=local_rank if local_rank is not None else 0,
        instance_type=rc.get("current_instance_type") or os.environ.get("SM_CURRENT_INSTANCE_TYPE", "local"),
        num_gpus=int(os.environ.get("SM_NUM_GPUS", "0") or 0),
        num_cpus=int(os.environ.get("SM_NUM_CPUS", "0") or os.cpu_count() or 1),
        channels=channels,
        model_dir=os.environ.get("SM_MODEL_DIR") or os.path.join(base, "model"),
        output_data_dir=os.environ.get("SM_OUTPUT_DATA_DIR") or os.path.join(base, "output", "data"),
        checkpoint_dir=ckpt if os.path.isdir(ckpt) else None,
        hyperparameters=hps,
    )
