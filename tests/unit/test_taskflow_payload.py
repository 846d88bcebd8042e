"""@task.smdist without jobs: registration with Airflow, and the shipped runner's Python compatibility."""

from __future__ import annotations

import ast
import os

import pytest

from airflow_smdist.decorators.payload import RUNTIME_FILES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_task_smdist_and_smdist_processing_are_registered_with_airflow():
    try:
        from airflow.sdk import task
    except ImportError:  # Airflow 2
        from airflow.decorators import task
    from airflow_smdist.decorators.processing import smdist_processing_task
    from airflow_smdist.decorators.smdist import smdist_task

    assert task.smdist is smdist_task
    assert task.smdist_processing is smdist_processing_task


@pytest.mark.parametrize("rel", RUNTIME_FILES)
def test_the_runner_shipped_into_jobs_parses_on_the_oldest_image_python(rel):
    """Images run Python 3.8 .. 3.12: what travels in the payload must not use newer syntax."""
    with open(os.path.join(REPO, rel)) as f:
        ast.parse(f.read(), filename=rel, feature_version=(3, 8))


def pickled_function(x):
    return x + 1


def test_the_job_side_pickle_check_refuses_another_python_or_cloudpickle(tmp_path):
    """serializer="cloudpickle": the payload records the client's Python and cloudpickle, and the runner in the
    job refuses to unpickle under a different one (a clear RuntimeMismatch, not a broken unpickle)."""
    import json
    import sys

    import cloudpickle

    from airflow_smdist.decorators.payload import write_payload
    from airflow_smdist.runtime.function import (
        PAYLOAD_JSON,
        RuntimeMismatch,
        check_pickle_runtime,
        load_function,
        load_payload,
    )

    write_payload(tmp_path, function=pickled_function, args=[1], kwargs={}, serializer="cloudpickle",
                  requirements=None, max_result_bytes=1000, kind="training")
    recorded = json.loads((tmp_path / PAYLOAD_JSON).read_text())
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert recorded["client"]["python"] == here
    assert recorded["client"]["cloudpickle"] == cloudpickle.__version__
    payload = load_payload(str(tmp_path))
    check_pickle_runtime(payload)  # the same Python and cloudpickle: accepted
    function, args, kwargs = load_function(str(tmp_path), payload)
    assert function(*args, **kwargs) == 2

    other_python = {**payload, "client": {**payload["client"], "python": "3.7"}}
    with pytest.raises(RuntimeMismatch, match=rf"pickled by Python 3\.7 but the job runs Python {here}.*py_version"):
        check_pickle_runtime(other_python)
    with pytest.raises(RuntimeMismatch, match="pickled by Python 3.7"):
        load_function(str(tmp_path), other_python)  # checked before anything is unpickled
    other_cloudpickle = {**payload, "client": {**payload["client"], "cloudpickle": "0.0.1"}}
    with pytest.raises(RuntimeMismatch, match=rf"job has cloudpickle {cloudpickle.__version__}, the client "
                                              r"pickled with 0\.0\.1"):
        check_pickle_runtime(other_cloudpickle)


def test_a_failure_is_placed_on_the_ranks_own_host_and_on_the_log_stream_without_a_rank():
    """mpirun on algo-1 relays rank 3's record (ranks 2-3 ran on algo-2); a record without a rank (the runner
    failed before it knew its place, its host is only the machine's name) takes the host of its log stream."""
    import json

    from airflow_smdist.backends.base import LogEvent
    from airflow_smdist.decorators.results import error_records, first_failure
    from airflow_smdist.runtime.function import ERROR_MARKER, error_record

    def line(ident, exc):
        try:
            raise exc
        except ValueError as caught:
            return ERROR_MARKER + json.dumps(error_record(caught, ident, "train()"))

    ranked = line({"rank": 3, "host": "algo-2", "world_size": 4}, ValueError("rank 3"))
    events = [LogEvent(1.0, "algo-1", f"[1,3]<stderr>: {ranked}")]
    error = first_failure(error_records(events), "job", "training")
    assert (error.host, error.rank) == ("algo-2", 3) and "rank 3 on algo-2" in str(error)
    assert "Traceback on algo-2:" in str(error)

    rankless = line({"rank": None, "host": "ip-10-0-1-17"}, ValueError("no resource config"))
    error = first_failure(error_records([LogEvent(1.0, "algo-2", rankless)]), "job", "training")
    assert error.host == "algo-2" and "rank None on algo-2" in str(error)


def test_a_processing_run_without_a_results_directory_fails_saying_so(tmp_path, monkeypatch, capfd):
    """The runner of a processing job needs --smdist-results: without it the failure names the flag (it was a
    TypeError from os.path.join before, which mypy --strict found)."""
    import json

    from airflow_smdist.runtime.function import FORMAT, PAYLOAD_JSON, run

    for name in ("SM_OUTPUT_FAILURE", "SM_HOSTS", "SM_CHANNEL_TRAIN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(tmp_path))
    (tmp_path / PAYLOAD_JSON).write_text(json.dumps({"format": FORMAT, "function": "f"}))
    assert run(str(tmp_path), "processing", None) == 1
    message = (tmp_path / "output" / "message").read_text()
    assert message.startswith("ValueError: --smdist-results DIR is required with --smdist-kind processing")
    assert "--smdist-results" in capfd.readouterr().err
