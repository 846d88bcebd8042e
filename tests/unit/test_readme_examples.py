"""The README's operator examples run as written: the code blocks of "A training job in a DAG" and the
one-line examples of the operator table are executed in a DAG (each imported from the module the table names),
and each operator they make that plans a job builds its request (validated against botocore's model) for the
local backend."""

from __future__ import annotations

import pathlib
import re

import pytest

README = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
#: operators and sensors of the table whose one-line example stands alone (the others name their neighbours'
#: tasks); those with a plan build their request, the others (sharded inference, sensors) are constructed
TABLE_OPERATORS = ("SageMakerDistributedTrainingOperator", "SageMakerPySparkProcessingOperator",
                   "SmdistProcessingOperator", "SmdistTuningOperator", "SageMakerShardedBatchInferenceOperator",
                   "SageMakerDistributedTrainingSensor", "SmdistProcessingSensor",
                   "SageMakerShardedBatchInferenceSensor", "SmdistTuningSensor")


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end >= 0 else None]


def training_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", section("A training job in a DAG"), re.S)


def table_row(operator: str) -> str:
    return next(line for line in section("Operators, sensors, hooks").splitlines()
                if line.startswith(f"| `{operator}` |"))


def table_example(operator: str) -> str:
    return table_row(operator).rsplit("| `", 1)[1].rstrip("` |")


def table_module(operator: str) -> str:
    """The module the table's second column names for the class."""
    return table_row(operator).split("|")[2].strip().strip("`")


def dag():
    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk import DAG
    else:
        from airflow import DAG
    return DAG("readme", schedule=None)


def planned(namespace: dict) -> dict:
    from airflow_smdist._compat import BaseOperator

    ops = [v for v in namespace.values() if isinstance(v, BaseOperator)]
    assert ops
    return {op.task_id: op.plan(f"readme-{op.task_id}".replace("_", "-"), "local").request for op in ops}


@pytest.fixture(autouse=True)
def local_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))


def test_the_training_examples_run_and_v2_and_v3_spellings_build_the_same_request():
    pytest.importorskip("sagemaker.train.distributed")  # the v3 example's config classes are the SDK's
    blocks = training_blocks()
    assert len(blocks) == 2
    namespace: dict = {}
    with dag():
        for block in blocks:
            exec(compile(block, "README.md", "exec"), namespace)  # the README's own code
    requests = planned(namespace)
    assert requests["train"]["HyperParameters"]["sagemaker_torch_distributed_enabled"] == "true"
    v3 = requests["train_v3"]
    assert "/smdistributed-modelparallel:" in v3["AlgorithmSpecification"]["TrainingImage"]
    # the commented v2 spelling of the v3 example builds the same request
    v2_text = re.search(r"# distribution=(\{.*?\}\}\}),\n", blocks[1].replace("\n    #" + " " * 14, ""), re.S)
    assert v2_text, blocks[1]
    namespace2: dict = {}
    with dag():
        exec(compile(blocks[0].split("\n\n")[0] + "\n" + blocks[1].split("\n\n", 1)[1].replace(
            "distributed=Torchrun(smp=SMP(hybrid_shard_degree=8)),", f"distribution={v2_text[1]},"),
            "README.md", "exec"),
             namespace2)
    assert planned(namespace2)["train_v3"] == v3


@pytest.mark.parametrize("operator", TABLE_OPERATORS)
def test_the_operator_table_examples_run(operator):
    namespace: dict = {}
    exec(f"from {table_module(operator)} import {operator}", namespace)
    with dag():
        op = eval(table_example(operator), namespace)  # the README's own code
    assert type(op).__name__ == operator
    if hasattr(op, "plan"):
        (request,) = planned({"op": op}).values()
        assert request
