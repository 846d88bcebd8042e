"""Issue 42: no example DAG names an image heavier than its job needs. A task that names a PyTorch or Hugging Face
image (gigabytes of torch, CUDA where the machine has no CPU wheel) must run code that imports torch: its
source_dir's scripts, or the function of an ``@task.smdist`` task."""

from __future__ import annotations

import ast
import inspect
import os
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_FRAMEWORKS = ("pytorch", "huggingface")


def imports_torch(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n == "torch" or n.startswith("torch.") for n in names):
            return True
    return False


def code_of(task) -> list[str]:
    """The code a task's job runs: the function of an @task.smdist task, else its source_dir's Python files."""
    function = getattr(task, "python_callable", None)
    if function is not None:
        return [textwrap.dedent(inspect.getsource(function))]
    source_dir = getattr(task, "source_dir", None)
    if not source_dir or not os.path.isdir(source_dir):
        return []
    return [open(os.path.join(root, f)).read() for root, _d, files in os.walk(source_dir)
            for f in files if f.endswith(".py")]


@pytest.fixture(scope="module")
def dagbag():
    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow >= 3.1
    except ImportError:
        from airflow.models.dagbag import DagBag
    extra = {"include_examples": False} if "include_examples" in inspect.signature(DagBag).parameters else {}
    bag = DagBag(dag_folder=os.path.join(REPO, "dags"), **extra)
    assert not bag.import_errors, bag.import_errors
    return bag


def test_every_task_that_names_a_torch_image_imports_torch(dagbag):
    heavy = [(dag_id, task.task_id) for dag_id, dag in dagbag.dags.items() for task in dag.tasks
             if getattr(task, "framework", None) in TORCH_FRAMEWORKS]
    assert heavy, "no example names a PyTorch image: the check checks nothing"
    needless = [f"{dag_id}.{task_id}" for dag_id, task_id in heavy
                if not any(imports_torch(code) for code in code_of(dagbag.dags[dag_id].get_task(task_id)))]
    assert needless == [], f"these tasks name a torch image but their code imports no torch: {needless}"


def test_the_check_sees_a_torch_import():
    assert imports_torch("import torch.distributed as dist") and imports_torch("from torch import nn")
    assert not imports_torch("import torchvision_like\nfrom torchx import y")
