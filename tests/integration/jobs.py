"""Helpers the integration tests share for real local jobs."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from airflow_smdist.kinds import kind_info


def wait(backend: Any, kind: str, name: str, timeout: float = 300) -> dict:
    """The job's Describe* response once it is terminal; on timeout an AssertionError with its supervisor log.
    Waits on the backend's own change notification (``wait_for_change``), as the operators do."""
    status_key = kind_info(kind).status_key
    deadline = time.monotonic() + timeout
    while True:
        d = backend.describe(kind, name)
        if d[status_key] in ("Completed", "Failed", "Stopped"):
            return d
        left = deadline - time.monotonic()
        if left <= 0:
            log = backend.job_dir(kind, name) / "supervisor.log"
            raise AssertionError(f"{kind} job {name} still {d[status_key]} after {timeout} s; "
                                 f"supervisor log:\n{log.read_text()[-3000:] if log.exists() else '(none)'}")
        backend.wait_for_change(kind, name, min(left, 5.0))


def capture_log(obj: Any, records: list) -> list:
    """Send what ``obj`` (an operator or a trigger) logs into ``records``, and return them: the lines the task's
    (or the triggerer's) log shows, read from the object's own logger."""

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger(f"smdist.test.log.{uuid.uuid4().hex}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(Keep())
    obj._log = logger
    obj._cached_logger = logger  # an operator's logger on Airflow >= 3.3 (airflow.sdk's GenericDAGNode.log)
    return records
