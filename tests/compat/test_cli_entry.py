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


NOT_A_NAME = ("Error: {!r} is not a job name: a job name is 1 to 63 letters, digits and hyphens, starting and ending "
              "with a letter or digit. Fix: give the name as `jobs list` shows it")


def test_a_name_that_is_no_job_name_gets_one_line_that_says_so(tmp_path):
    """A path (``a/b``), a dotted name (``.creating.x``) or an empty one, given to each command that takes a job's
    name: exit 1 and one line naming the name and the rule, no traceback and no job kind (none was looked up)."""
    import pytest

    from airflow_smdist.cli.definition import main

    out = run([sys.executable, "-m", "airflow_smdist.cli", "jobs", "describe", "a/b"], tmp_path)  # as users meet it
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == NOT_A_NAME.format("a/b"), out.stderr
    for command in ("describe", "logs", "stop"):
        for name in (".creating.x", "../training/x", "x.y", "x-", "a" * 64):
            with pytest.raises(SystemExit) as exit_:
                main(["jobs", command, name, "--root", str(tmp_path / "jobs")])
            assert exit_.value.code == NOT_A_NAME.format(name), (command, name)
