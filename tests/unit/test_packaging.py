"""docker-compose.yaml and the Dockerfile (no Docker engine here: parsed, checked, and the Dockerfile's install
step resolved), the MWAA plugins.zip build, and the provider installing wherever Airflow runs: Airflow 3.3 on
Python 3.12 and 3.13 (MWAA 2.11+/3.x and the official image run 3.12) with nothing heavy added to Airflow's
environment. The resolutions ask uv, as pip would install, for the target Python on x86_64 Linux (PyPI is
reachable from these machines; a resolution needs no interpreter of that version)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_compose_file_has_the_official_shape_with_the_provider_installed():
    with open(os.path.join(REPO, "docker-compose.yaml")) as f:
        compose = yaml.safe_load(f)
    services = compose["services"]
    assert {"postgres", "redis", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-worker", "airflow-triggerer", "airflow-init"} <= set(services)
    assert services["postgres"]["image"] == "postgres:16" and services["redis"]["image"] == "redis:7.2-bookworm"
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-worker", "airflow-triggerer",
                 "airflow-dag-processor"):
        svc = services[name]
        assert svc["build"]["context"] == "." and svc["build"]["dockerfile"] == "Dockerfile"  # from this checkout
        assert svc["build"]["args"] == {"AIRFLOW_VERSION": "${AIRFLOW_VERSION:-3.3.2}",
                                        "PYTHON_VERSION": "${PYTHON_VERSION:-3.12}"}
        assert svc["user"] == "${AIRFLOW_UID:-50000}:0"  # the official image's non-root user, or yours
        assert "${AIRFLOW_PROJ_DIR:-.}/dags:/opt/airflow/dags" in svc["volumes"]
        env = svc["environment"]
        assert env["SMDIST_BACKEND"] == "${SMDIST_BACKEND:-local}"
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "false"
    assert services["airflow-apiserver"]["command"] == "api-server"
    assert services["airflow-worker"]["environment"]["DUMB_INIT_SETSID"] == "0"
    assert "airflow-smdist" in services["airflow-init"]["command"][1]  # init fails if the provider is missing
    with open(os.path.join(REPO, "Dockerfile")) as f:
        dockerfile = f.read()
    assert (dockerfile.startswith("# ")
            and "FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}" in dockerfile)
    # Airflow's documented way to extend the image: apache-airflow pinned to the image's version in the same install
    assert 'pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" "/opt/airflow-smdist[local]"' in dockerfile
    assert re.search(r"^ARG PIP_EXTRA_INDEX_URL=", dockerfile, re.M)  # a CPU torch index for the job runtimes


def test_mwaa_plugins_zip_carries_a_pure_python_wheel(tmp_path):
    out = subprocess.run(["bash", os.path.join(REPO, "mwaa", "build_plugins.sh")], cwd=REPO, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert out.returncode == 0, out.stderr[-2000:]
    dist = os.path.join(REPO, "dist", "mwaa")
    with zipfile.ZipFile(os.path.join(dist, "plugins.zip")) as z:
        names = z.namelist()
        provider = [n for n in names if n.startswith("airflow_smdist-")]
        assert len(provider) == 1 and provider[0].endswith("-py3-none-any.whl"), names
        assert "constraints.txt" in names  # pins every other wheel it carries (mwaa/requirements-private.txt)
        pinned = z.read("constraints.txt").decode().split()
        others = sorted(n for n in names if n.endswith(".whl") and n not in provider)
        assert len(others) == len(pinned), (others, pinned)  # every wheel the provider adds, and nothing else
        assert not [n for n in names if n.startswith(("torch-", "nvidia_", "sagemaker"))], names
        z.extract(provider[0], tmp_path)
    with zipfile.ZipFile(tmp_path / provider[0]) as wheel:
        members = wheel.namelist()
        assert "airflow_smdist/runtime/__init__.py" in members
        # what runs by path inside a job's hosts (backends/local/job/runtimes.py PLATFORM_FILES, launcher, mpi)
        in_host = ["airflow_smdist/runtime/batch_runner.py",
                   *(f"airflow_smdist/backends/local/inhost/{m}.py"
                     for m in ("hostinit", "mpiagent", "mpishim", "builtin_xgboost")),
                   "airflow_smdist/backends/local/inhost/xgbcontainer/sagemaker_xgboost_container/distributed.py"]
        assert not [m for m in in_host if m not in members], [m for m in in_host if m not in members]
        # every module and data file of the local backend's three rooms (the task side, job/ with its image
        # manifests, inhost/), as the checkout has them
        local = Path(REPO) / "airflow_smdist" / "backends" / "local"
        ours = sorted(str(f.relative_to(REPO)) for f in local.rglob("*") if f.suffix in (".py", ".json")
                      and "__pycache__" not in f.parts)
        assert "airflow_smdist/backends/local/job/images/xgboost.json" in ours
        assert "airflow_smdist/backends/local/job/training.py" in ours
        assert not [m for m in ours if m not in members], [m for m in ours if m not in members]
        # the image URI tables ship inside the wheel as data: no lookup needs the SageMaker SDK
        assert any(m.startswith("airflow_smdist/specs/image_tables/") and m.endswith(".json") for m in members)
        requires = wheel.read(next(m for m in members if m.endswith("METADATA"))).decode()
        assert not re.search(r"^Requires-Dist: sagemaker(-core)?\b(?!.*extra ==)", requires, re.M), requires
        assert not any(m.endswith((".so", ".pyd")) for m in members)
        entry_points = next(m for m in members if m.endswith("entry_points.txt"))
        assert "apache_airflow_provider" in wheel.read(entry_points).decode()
    with open(os.path.join(dist, "requirements.txt")) as f:
        req = f.read()
    assert "--constraint" in req and "--find-links /usr/local/airflow/plugins" in req and "airflow-smdist" in req


#: what must never come with the provider: CUDA wheels, torch, the SageMaker SDK (and sagemaker-core's pandas,
#: scipy, paramiko ...)
HEAVY = re.compile(r"^(torch|nvidia-[a-z0-9-]+|sagemaker|sagemaker-core|pandas|scipy|paramiko|mlflow|pyarrow)==",
                   re.M)


def _uv() -> str:
    uv = pytest.importorskip("uv", reason="uv (the [local] extra) resolves here")
    return str(uv.find_uv_bin())


def _compile(requirements: list[str], python_version: str) -> str:
    """`uv pip compile` of ``requirements`` for ``python_version``; the pinned lines, or the resolver's error."""
    cmd = [_uv(), "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python-version", python_version,
           "--python-platform", "x86_64-manylinux_2_28", "--index-strategy", "unsafe-best-match", "-"]
    for idx in ("/opt/pypi/simple", "/opt/pypi-more/simple"):  # this machine's mirrors, as pip.conf names them
        if os.path.isdir(idx):
            cmd[-1:-1] = ["--extra-index-url", f"file://{idx}"]
    out = subprocess.run(cmd, input="\n".join(requirements) + "\n", capture_output=True, text=True, timeout=600,
                         cwd=REPO)
    assert out.returncode == 0, f"does not resolve for Python {python_version}:\n{out.stderr[-4000:]}"
    return out.stdout


def _pins(resolved: str) -> dict[str, str]:
    return dict(line.split("==", 1) for line in resolved.splitlines() if "==" in line and not line.startswith("#"))


@pytest.mark.parametrize("python_version", ["3.12", "3.13"])
def test_the_provider_installs_beside_airflow_3_3_on_python_3_12_and_3_13_adding_nothing_heavy(python_version):
    airflow = ["apache-airflow==3.3.2", "apache-airflow-providers-amazon"]
    base = _pins(_compile(airflow, python_version))
    resolved = _compile([*airflow, f"airflow-smdist @ file://{REPO}"], python_version)
    assert not HEAVY.findall(resolved), HEAVY.findall(resolved)
    with_provider = _pins(resolved)
    added = sorted(name for name in with_provider if name not in base and name != "airflow-smdist")
    changed = sorted(f"{name} {base[name]} -> {v}" for name, v in with_provider.items()
                     if name in base and base[name] != v)
    print(f"Python {python_version}: the provider adds {added or 'nothing'}; moves {changed or 'nothing'}")
    # the Amazon provider's aiobotocore extra (async clients of the triggers) and what it needs, nothing else
    assert set(added) <= {"aiobotocore", "aioitertools", "wrapt", "multidict", "jmespath"}, added
    assert not [c for c in changed if c.split()[0].startswith(("apache-airflow", "importlib-metadata", "protobuf",
                                                                "rich"))], changed


def test_the_dockerfile_install_step_resolves_on_its_python_without_cuda():
    """The Dockerfile's `pip install "apache-airflow==${AIRFLOW_VERSION}" "...[local]"`, on the image's Python."""
    text = open(os.path.join(REPO, "Dockerfile")).read()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))
    assert {"AIRFLOW_VERSION", "PYTHON_VERSION"} <= set(args), args
    assert re.search(r'pip install .*"apache-airflow==\$\{AIRFLOW_VERSION\}" "/opt/airflow-smdist\[local\]"', text)
    resolved = _compile([f"apache-airflow=={args['AIRFLOW_VERSION']}", f"airflow-smdist[local] @ file://{REPO}"],
                        args["PYTHON_VERSION"])
    # scikit-learn, xgboost and pyspark bring scipy and pandas; torch, CUDA and the SDK never
    assert set(HEAVY.findall(resolved)) <= {"pandas", "scipy"}, HEAVY.findall(resolved)
    assert _pins(resolved)["apache-airflow"] == args["AIRFLOW_VERSION"]


def test_dockerignore_keeps_venvs_and_build_outputs_out_of_the_image():
    ignored = open(os.path.join(REPO, ".dockerignore")).read().split()
    for path in (".venv", ".venv-*", ".git", "dist", "artifacts", "**/__pycache__"):
        assert path in ignored, path
