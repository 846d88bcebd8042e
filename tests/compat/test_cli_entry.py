"""The provider's commands reach users on every Airflow line: `airflow smdist ...` where Airflow's CLI takes a
provider's commands (>= 3.2), the `smdist` console script (and `python -m airflow_smdist.cli`) everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    # the smdist connection from the environment, as a deployment may declare it: this AIRFLOW_HOME has no
    # metadata database (Airflow 2 would look a connection up there and fail on its missing table)
    conn = json.dumps({"conn_type": "smdist", "extra": {"backend": "local"}})
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "SMDIST_LOCAL_ROOT": str(tmp_path / "jobs"),
           "AIRFLOW_CONN_SMDIST_DEFAULT": conn}
    env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))


def test_the_module_entry_lists_jobs_on_every_line(tmp_path):
    out = run([sys.executable, "-m", "airflow_smdist.cli", "jobs", "list", "-o", "json"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == []


def test_airflow_cli_serves_the_commands_where_it_takes_providers_commands(tmp_path):
    from airflow_smdist._compat import provider_cli_supported
    from airflow_smdist.cli.definition import get_smdist_cli_commands

    if provider_cli_supported():
        from airflow.providers_manager import ProvidersManager

        assert get_smdist_cli_commands in ProvidersManager().cli_command_functions
        airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
        out = run([airflow, "smdist", "jobs", "--help"], tmp_path)
        assert out.returncode == 0 and "prune" in out.stdout, out.stderr[-2000:]
    script = os.path.join(os.path.dirname(sys.executable), "smdist")
    if os.path.exists(script):  # installed with pip (the MWAA rows install the wheel, with its scripts)
        out = run([script, "jobs", "prune", "--older-than", "7d", "--dry-run", "-o", "json"], tmp_path)
        assert out.returncode == 0 and json.loads(out.stdout) == [], out.stderr[-2000:]
