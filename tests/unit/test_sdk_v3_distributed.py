"""SDK v3 ``ModelTrainer(distributed=...)`` configurations (the installed SDK's own Torchrun / MPI / SMP
objects, and their dict forms) build the same request as the SDK v2 ``distribution=`` dicts they stand for."""

from __future__ import annotations

import json

import pytest

from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.training import build_training

distributed = pytest.importorskip("sagemaker.train.distributed")
Torchrun, MPI, SMP = distributed.Torchrun, distributed.MPI, distributed.SMP


def request(**kwargs):
    """py_version of the image the distribution picks (the SDK's estimator needs it given): the SMP v2 image's
    Python (py310) is not the plain PyTorch 2.3 image's (py311)."""
    args = {"job_name": "v3-job", "role": "arn:aws:iam::123456789012:role/R", "output_path": "s3://b/out",
                "entry_point": "train.py", "source_dir": "s3://b/code/sourcedir.tar.gz", "framework": "pytorch",
                "framework_version": "2.3.0", "instance_type": "ml.p4d.24xlarge", "instance_count": 2,
                "allow_local_uris": False, "py_version": "py310" if smp(kwargs) else "py311"}
    args.update(kwargs)
    return build_training(**args).request


def smp(kwargs) -> bool:
    """Whether the v2 ``distribution`` or the v3 ``distributed`` asks for SMP v2 (its own image)."""
    v2, v3 = kwargs.get("distribution") or {}, kwargs.get("distributed")
    if isinstance(v3, dict):
        return "smp" in (v3.get("torchrun") or {})
    return "smdistributed" in v2 or isinstance(v3, SMP) or getattr(v3, "smp", None) is not None


SMP_V2 = {"torch_distributed": {"enabled": True},
          "smdistributed": {"modelparallel": {"enabled": True,
                                              "parameters": {"hybrid_shard_degree": 8, "tensor_parallel_degree": 2}}}}


@pytest.mark.parametrize("v3,v2", [
    (Torchrun(), {"torch_distributed": {"enabled": True}}),
    ({"torchrun": {}}, {"torch_distributed": {"enabled": True}}),
    (MPI(process_count_per_node=8, mpi_additional_options=["-x", "NCCL_DEBUG=INFO"]),
     {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": "-x NCCL_DEBUG=INFO"}}),
    ({"mpi": {"process_count_per_node": 8}}, {"mpi": {"enabled": True, "processes_per_host": 8}}),
    (Torchrun(smp=SMP(hybrid_shard_degree=8, tensor_parallel_degree=2)), SMP_V2),
    (SMP(hybrid_shard_degree=8, tensor_parallel_degree=2), SMP_V2),
    ({"torchrun": {"smp": {"hybrid_shard_degree": 8, "tensor_parallel_degree": 2}}}, SMP_V2),
])
def test_v3_configurations_build_the_v2_request(v3, v2):
    assert request(distributed=v3) == request(distribution=v2)


def test_smp_parameters_are_what_the_sdk_v3_sends():
    smp = SMP(hybrid_shard_degree=8, sm_activation_offloading=True, random_seed=7)
    ours = request(distributed=Torchrun(smp=smp))
    (expected,) = smp._to_mp_hyperparameters().values()  # SDK 3's own mp_parameters
    assert json.loads(ours["HyperParameters"]["mp_parameters"]) == json.loads(expected)
    assert "/smdistributed-modelparallel:" in ours["AlgorithmSpecification"]["TrainingImage"]


@pytest.mark.parametrize("v3,field", [
    (Torchrun(process_count_per_node=4), "distributed.torchrun.process_count_per_node"),
    ({"torchrun": {"proces_count_per_node": 4}}, "distributed.torchrun.proces_count_per_node"),
    ({"torchrunn": {}}, "distributed.torchrunn"),
    ({"mpi": {"mpi_additional_options": "-x A"}}, "distributed.mpi.mpi_additional_options"),
])
def test_what_the_containers_cannot_run_is_refused_with_the_field(v3, field):
    with pytest.raises(SpecError) as err:
        request(distributed=v3)
    assert err.value.field == field


def test_distribution_and_distributed_are_not_both_given():
    with pytest.raises(SpecError) as err:
        request(distributed=Torchrun(), distribution={"torch_distributed": {"enabled": True}})
    assert err.value.field == "distributed"
