"""The fast check (`scripts/check.sh`: `-m "not slow"`) holds no test that runs a real job or builds a runtime:
tests/conftest.py fails such a test unless it is marked slow. Checked here on a real pytest run of a small test
file under the suite's own conftest, as a contributor's new test meets it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from airflow_smdist.kinds import JOB_KINDS, kind_info

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: a command line of the shape LocalBackend._start_supervisor starts (a module that does not exist, so nothing
#: runs if the guard lets it through: Python exits 1 at once)
PROBE = textwrap.dedent('''
    import os
    import subprocess
    import sys

    import pytest

    SUPERVISOR = [sys.executable, "-m", "airflow_smdist.backends.local.job.no_such_kind", "/nonexistent"]


    def test_unmarked_starts_a_supervisor():
        subprocess.run(SUPERVISOR, capture_output=True)


    @pytest.mark.slow
    def test_marked_starts_a_supervisor():
        assert subprocess.run(SUPERVISOR, capture_output=True).returncode == 1


    def test_unmarked_builds_a_runtime(tmp_path):
        uv = os.path.join(os.path.dirname(sys.executable), "uv")  # the [local] extra's, as runtimes.py finds it
        assert subprocess.run([uv, "--version"], capture_output=True).returncode == 0
        subprocess.run([uv, "venv", str(tmp_path / "rt")], capture_output=True)


    def test_unmarked_leaves_a_job_made_by_a_subprocess():
        job = os.path.join(os.environ["SMDIST_LOCAL_ROOT"], "training", "made-elsewhere")
        subprocess.run(["sh", "-c", f"mkdir -p {job} && echo {{}} > {job}/request.json"], check=True)


    def test_unmarked_runs_other_commands():
        assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True).stdout == b"1\\n"
''')


def test_every_kinds_supervisor_is_a_module_the_guard_knows():
    """The guard recognises a supervisor by its module's package: every kind's local module is in it."""
    for kind in JOB_KINDS:
        assert kind_info(kind).local_module.startswith("airflow_smdist.backends.local.job."), kind


def test_a_test_that_starts_a_job_or_a_runtime_unmarked_fails_and_a_marked_one_passes(tmp_path):
    """The probe runs beside a copy of the suite's conftest.py, as a new file in tests/ would."""
    shutil.copy(os.path.join(REPO, "tests", "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: as pyproject.toml's\n")
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SMDIST_TESTS_"))}
    env.pop("SMDIST_LOCAL_ROOT", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-rfE",
                          "test_probe.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    report = out.stdout + out.stderr
    lines = {line.split(" - ")[0] for line in report.splitlines() if line.startswith(("FAILED", "ERROR"))}
    probe = "test_probe.py::"
    assert lines == {f"FAILED {probe}test_unmarked_starts_a_supervisor",
                     f"FAILED {probe}test_unmarked_builds_a_runtime",
                     f"ERROR {probe}test_unmarked_leaves_a_job_made_by_a_subprocess"}, report
    guard = "but is not marked slow: mark it @pytest.mark.slow"
    assert f"test_unmarked_starts_a_supervisor starts a local job's supervisor " \
           f"(airflow_smdist.backends.local.job.no_such_kind) {guard}" in report, report
    assert f"test_unmarked_builds_a_runtime starts an image runtime (uv venv) {guard}" in report, report
    assert "test_unmarked_leaves_a_job_made_by_a_subprocess ran a real job or built a runtime (" in report, report
    assert "2 failed, 3 passed, 1 error" in report, report  # the marked test and the other command pass
