"""pyproject depends on sagemaker-core, not the SDK meta-package: the provider's code may import only what
sagemaker-core ships (``sagemaker.core``; ``sagemaker.image_uris`` is the SDK 2.x fallback of the same
tables). The full SDK is the tests' oracle only (the [test] extra)."""

from __future__ import annotations

import ast
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).parents[2]
ALLOWED = ("sagemaker.core", "sagemaker.image_uris")


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


def test_the_provider_imports_only_what_sagemaker_core_ships():
    imports = sagemaker_imports()
    assert imports, "the image lookup's SDK fallback imports sagemaker.core.image_uris"
    bad = {path: [n for n in names if not n.startswith(ALLOWED)] for path, names in imports.items()}
    assert not any(bad.values()), bad


def test_pyproject_depends_on_sagemaker_core_and_tests_on_the_full_sdk():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = [d for d in project["dependencies"] if d.startswith("sagemaker")]
    assert [d.split(">")[0].split("=")[0] for d in runtime] == ["sagemaker-core"]
    assert any(d.startswith("sagemaker>=") for d in project["optional-dependencies"]["test"])
