"""FailureReason keeps the end: a deep traceback still names its exception within SageMaker's 1,024
characters (issue 12 "Errors", issue 18 "FailureReason of a training job")."""

from __future__ import annotations

import os
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.processing import build_processing, upload_plan
from airflow_smdist.specs.training import build_training
from airflow_smdist.storage import Storage
from jobs import wait

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAULTS = os.path.join(REPO, "tests", "fixtures", "faults")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
EXCEPTION_LINE = "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/smdist-expected-input.csv'"


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(tmp_path / "jobs")


@pytest.mark.slow
def test_training_failure_reason_ends_with_the_exception_line_of_a_deep_traceback(backend, tmp_path):
    name = f"deep-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point="deep_fail.py",
                          source_dir=FAULTS, image_uri=IMAGE, instance_type="ml.m5.xlarge")
    upload_source(plan.source_dir, "deep_fail.py", plan.source_uri)
    backend.submit("training", plan.request)
    reason = wait(backend, "training", name)["FailureReason"]
    assert len(reason) <= 1024
    assert reason.startswith("AlgorithmError: ")
    assert reason.rstrip('"').rstrip().endswith(EXCEPTION_LINE)
    assert "in descend_through" in reason  # context before it, as much as fits


@pytest.mark.slow
def test_processing_failure_reason_ends_with_the_exception_line(backend, tmp_path):
    name = f"deep-{uuid.uuid4().hex[:8]}"
    plan = build_processing(job_name=name, role=ROLE, image_uri=IMAGE, instance_type="ml.m5.xlarge",
                            instance_count=1, code=os.path.join(FAULTS, "deep_fail.py"),
                            code_location=f"file://{tmp_path}/code")
    upload_plan(plan, Storage())
    backend.submit("processing", plan.request)
    reason = wait(backend, "processing", name)["FailureReason"]
    assert len(reason) <= 1024
    assert reason.startswith("AlgorithmError: the processing command failed with exit code 1")
    assert reason.rstrip().endswith(EXCEPTION_LINE)


@pytest.mark.slow
def test_failure_reason_quotes_the_failing_ranks_traceback_through_other_ranks_lines(backend, tmp_path):
    """mpirun's --tag-output interleaves the ranks' lines: the reason quotes rank 3's traceback up to its
    exception line, without rank 1's lines printed meanwhile (they cut it short before)."""
    name = f"ranks-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out",
                          entry_point="interleaved_ranks.py", source_dir=FAULTS, image_uri=IMAGE,
                          instance_type="ml.m5.xlarge")
    upload_source(plan.source_dir, "interleaved_ranks.py", plan.source_uri)
    backend.submit("training", plan.request)
    reason = wait(backend, "training", name)["FailureReason"]
    assert reason.rstrip('"').rstrip().endswith("[1,3]<stderr>:ValueError: rank 3 failed on purpose"), reason
    assert "raise ValueError" in reason and "step 2" not in reason and "step 3" not in reason, reason
    assert "step 1 loss" in reason  # what was printed before the traceback is context


def test_the_shared_network_hint_keeps_the_exception_line_of_a_long_reason():
    """The fallback's hint (hosts share one network stack) fits in 1,024 characters with the reason's end."""
    from airflow_smdist.backends.local.job.supervisor import SHARED_NETWORK_HINT, fit_failure_reason, with_network_hint

    exception = "OSError: [Errno 98] Address already in use"
    frames = "\n".join(f'  File "train.py", line {i}, in layer_{i}\n    serve()' for i in range(60))
    reason = fit_failure_reason(f'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "Traceback '
                                f'(most recent call last):\n{frames}\n{exception}"')
    hinted = with_network_hint(reason, "none")
    assert len(hinted) <= 1024 and hinted.startswith("AlgorithmError: ExecuteUserScriptError:")
    assert hinted.endswith(f'{exception}"\n{SHARED_NETWORK_HINT}')
    assert with_network_hint(reason, "namespace") == reason  # each host has its own stack there
    torch = "torch.distributed.DistNetworkError: ... port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE"
    assert with_network_hint(torch, "none").endswith(SHARED_NETWORK_HINT)
    assert with_network_hint("ValueError: bad input", "none") == "ValueError: bad input"
