"""docker-compose.yaml (no Docker engine here: parsed and checked), and the MWAA plugins.zip build."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_compose_file_has_the_official_shape_with_the_provider_installed():
    with open(os.path.join(REPO, "docker-compose.yaml")) as f:
        compose = yaml.safe_load(f)
    services = compose["services"]
    assert {"postgres", "redis", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-worker", "airflow-triggerer", "airflow-init"} <= set(services)
    assert services["postgres"]["image"] == "postgres:16" and services["redis"]["image"] == "redis:7.2-bookworm"
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-worker", "airflow-triggerer", "airflow-dag-processor"):
        svc = services[name]
        assert svc["build"] == {"context": ".", "dockerfile": "Dockerfile"}  # the provider from this checkout
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
    assert dockerfile.startswith("# ") and "FROM ${AIRFLOW_IMAGE}" in dockerfile
    assert 'pip install --no-cache-dir "/opt/airflow-smdist[local]"' in dockerfile


def test_mwaa_plugins_zip_carries_a_pure_python_wheel(tmp_path):
    out = subprocess.run(["bash", os.path.join(REPO, "mwaa", "build_plugins.sh")], cwd=REPO, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert out.returncode == 0, out.stderr[-2000:]
    dist = os.path.join(REPO, "dist", "mwaa")
    with zipfile.ZipFile(os.path.join(dist, "plugins.zip")) as z:
        names = z.namelist()
        assert len(names) == 1 and names[0].endswith("-py3-none-any.whl")
        z.extract(names[0], tmp_path)
    with zipfile.ZipFile(tmp_path / names[0]) as wheel:
        members = wheel.namelist()
        assert "airflow_smdist/runtime/__init__.py" in members
        assert not any(m.endswith((".so", ".pyd")) for m in members)
        entry_points = next(m for m in members if m.endswith("entry_points.txt"))
        assert "apache_airflow_provider" in wheel.read(entry_points).decode()
    with open(os.path.join(dist, "requirements.txt")) as f:
        req = f.read()
    assert "--constraint" in req and "--find-links /usr/local/airflow/plugins" in req and "airflow-smdist" in req
