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
