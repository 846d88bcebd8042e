"""What the sagemaker backend's blocking half (:mod:`airflow_smdist.backends.sagemaker`) and its asynchronous
half (:mod:`airflow_smdist.backends.sagemaker_async`) share: how the API says "no such job", and which host a
CloudWatch log stream belongs to. Both import it; it imports neither."""

from __future__ import annotations

import re

from airflow_smdist.backends.base import BackendError, JobNotFound

#: How SageMaker says "no such job" (DescribeTrainingJob: "Requested resource not found.").
_NOT_FOUND = re.compile(r"not found|does not exist|could not find|can't find|cannot find", re.IGNORECASE)

#: "<epoch>" suffix SageMaker appends to a host's stream name ("algo-1-1700000000").
_STREAM_EPOCH = re.compile(r"-\d{9,}$")


def _client_error_parts(exc: Exception) -> tuple[str | None, str]:
    error = (getattr(exc, "response", None) or {}).get("Error", {})
    return error.get("Code"), error.get("Message") or str(exc)


def is_not_found(code: str | None, message: str) -> bool:
    """Whether an error of the SageMaker API says "no such job/model". The API has no code of its own for
    it (DescribeTrainingJob answers ValidationException "Requested resource not found."), so this is the
    one place that reads the message; everything above it sees :class:`JobNotFound`."""
    return code in ("ValidationException", "ResourceNotFound") and bool(_NOT_FOUND.search(message))


def job_error(exc: Exception, kind: str, name: str, op: str) -> BackendError:
    """The typed error for a botocore ClientError of a call about job ``name`` (the triggers' async clients
    call botocore directly): JobNotFound when the service says the job does not exist, else a BackendError
    keeping the service's code and message."""
    code, message = _client_error_parts(exc)
    if is_not_found(code, message):
        return JobNotFound(kind, name)
    return BackendError(message, code=code, operation=op)


def host_of_stream(job_name: str, stream_name: str) -> str:
    """``"<job>/algo-1-1700000000"`` -> ``"algo-1"``; ``"<job>/i-0ab-1700000000/data-log"`` ->
    ``"i-0ab/data-log"``."""
    rest = stream_name[len(job_name) + 1:] if stream_name.startswith(job_name + "/") else stream_name
    first, _, more = rest.partition("/")
    host = _STREAM_EPOCH.sub("", first) or first
    return f"{host}/{more}" if more else host
