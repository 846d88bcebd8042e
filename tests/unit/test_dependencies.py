"""The provider installs without the SageMaker SDK (issue 30: sagemaker-core needs importlib-metadata<7, which
Airflow 3 on Python >= 3.12 cannot have): pyproject depends on neither ``sagemaker`` nor ``sagemaker-core``, and
no module of the provider imports them; the image URI tables ship inside the package as data. The SDK is an
extra: ``sdk`` (the refresh script's source) and ``oracle`` (the tests' oracle, where it installs)."""

from __future__ import annotations

import ast
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).parents[2]


def sagemaker_imports() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in (ROOT / "airflow_smdist").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                if name == "sagemaker" or name.startswith("sagemaker."):
                    found.setdefault(str(path.relative_to(ROOT)), []).append(name)
    return found


def test_the_provider_imports_nothing_of_the_sagemaker_sdk():
    assert sagemaker_imports() == {}


def test_pyproject_depends_on_no_sdk_and_keeps_it_in_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("sagemaker")]
    extras = project["optional-dependencies"]
    assert [d for d in extras["sdk"] if d.startswith("sagemaker-core")]
    assert [d for d in extras["oracle"] if d.startswith("sagemaker>=")]
    # nothing a user installs for the local backend or the tests pulls the SDK or an unpinned torch
    for extra in ("local", "test"):
        assert not [d for d in extras[extra] if d.startswith(("sagemaker", "torch"))], extra
