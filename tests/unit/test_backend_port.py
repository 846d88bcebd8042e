"""The Backend protocol is the whole contract: both adapters satisfy it, and nothing outside backends/ asks a
backend for its name to decide what to do (capabilities and methods say it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from airflow_smdist.backends.base import CAPABILITIES, Backend, Capabilities, capabilities

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_smdist"
NAMES = {"local", "sagemaker"}


def test_both_adapters_are_backends_with_their_capabilities(tmp_path):
    from airflow_smdist.backends.local import LocalBackend
    from airflow_smdist.backends.sagemaker import SageMakerBackend

    local, sagemaker = LocalBackend(tmp_path / "jobs"), SageMakerBackend("aws_default", "us-east-1")
    for backend in (local, sagemaker):
        assert isinstance(backend, Backend)
        assert capabilities(backend) is CAPABILITIES[backend.name] is capabilities(backend.name)
    assert (local.capabilities.local_uris, local.capabilities.iam_role, local.capabilities.console) == (
        True, False, "plugin")
    assert (sagemaker.capabilities.local_uris, sagemaker.capabilities.iam_role, sagemaker.capabilities.console) == (
        False, True, "aws")
    assert sagemaker.capabilities.coalesced_waits and not local.capabilities.coalesced_waits
    assert sagemaker.silent_before_containers and not local.silent_before_containers
    assert capabilities("no-such-backend") == capabilities(None) == Capabilities()
    # each adapter's status source: made on demand, keyed so that backends of one place share it
    assert local.status_source_key() == LocalBackend(tmp_path / "jobs").status_source_key()
    assert sagemaker.status_source_key() != SageMakerBackend("aws_default", "eu-west-1").status_source_key()
    assert local.job_dir("training", "j") is not None and sagemaker.job_dir("training", "j") is None
    assert local.first_log_cursor(1.5) is None and sagemaker.first_log_cursor(1.5) == {"t": 1500, "seen": []}
    assert local.log_cursor_store("training", "j").path == local.job_dir("training", "j") / "trigger-log-cursor.json"
    assert sagemaker.capabilities.shared_log_cursor and not local.capabilities.shared_log_cursor


def _name_switches(tree: ast.AST) -> list[int]:
    """Lines comparing a backend's name (``x.name``, ``backend``, ``backend_name``, ``getattr(b, "name")``,
    ``kwargs.get("backend")``) with "local" or "sagemaker"."""

    def names_a_backend(node: ast.expr) -> bool:
        text = ast.unparse(node)
        return "backend" in text or text.endswith(".name")

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            literal = any(isinstance(s, ast.Constant) and s.value in NAMES for s in sides)
            if literal and any(names_a_backend(s) for s in sides if not isinstance(s, ast.Constant)):
                found.append(node.lineno)
    return found


def test_the_switch_finder_finds_a_switch():
    assert _name_switches(ast.parse('if backend.name == "local": pass\nif x == "sagemaker": pass\n'
                                    'ok = getattr(backend, "name", None) != "sagemaker"')) == [1, 3]


@pytest.mark.parametrize("path", sorted(p for p in PACKAGE.rglob("*.py") if "backends" not in p.parts),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_backend_name_switch_outside_backends(path):
    lines = _name_switches(ast.parse(path.read_text(), str(path)))
    assert not lines, f"{path.relative_to(PACKAGE)}:{lines} decides by a backend's name: use its capabilities"
