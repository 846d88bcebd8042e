"""The ``sagemaker`` backend: the request goes to the real SageMaker API, through the Amazon provider's hooks.

Clients come from ``SageMakerHook`` / ``AwsLogsHook``, so everything an Airflow ``aws`` connection carries
(credentials, role assumption, region, ``endpoint_url``, ``config_kwargs``) is honoured; tests point the
connection's ``endpoint_url`` at a moto server. Retries use botocore's adaptive mode (10 attempts) unless
the connection's ``config_kwargs`` say otherwise. Every ClientError keeps its AWS code and message.

Only ``wait_for_change`` sleeps (the poll interval); the rest of waiting belongs to sensors and triggers.
"""

from __future__ import annotations

import time
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_smdist.backends.base import (
    CAPABILITIES,
    TERMINAL_STATES,
    BackendError,
    FileCursorStore,
    JobNotFound,
    LogEvent,
    ModelNotFound,
    ResourceExists,
    tuning_log_events,
)
from airflow_smdist.backends.sagemaker_common import (
    _client_error_parts,
    host_of_stream,
    is_not_found,
    job_error,
)
from airflow_smdist.kinds import kind_info, snake_case
from airflow_smdist.specs.errors import SpecError, SpecErrors
from airflow_smdist.specs.validate import LOCAL_URI_PREFIXES, operation_model, validate_request

__all__ = ["DEFAULT_RETRIES", "SageMakerBackend", "host_of_stream", "is_not_found", "job_error"]

if TYPE_CHECKING:
    from airflow_smdist.backends.sagemaker_async import SageMakerStatusSource
    from airflow_smdist.storage import Storage

#: Retries for every client unless the connection's ``config_kwargs`` set their own.
DEFAULT_RETRIES = {"mode": "adaptive", "max_attempts": 10}

#: Pages read from one stream in one log_events call (a bound, never reached in practice).
_MAX_PAGES_PER_STREAM = 100


def _local_uri_errors(operation_name: str, request: dict[str, Any]) -> list[SpecError]:
    """file:// values in URI fields (those whose model pattern takes a scheme), named like validate.py does."""
    found: list[SpecError] = []

    def walk(shape: Any, value: Any, path: str) -> None:
        t = shape.type_name
        if t == "structure" and isinstance(value, dict):
            for key, v in value.items():
                if key in shape.members:
                    walk(shape.members[key], v, f"{path}.{key}")
        elif t == "list" and isinstance(value, list):
            for i, v in enumerate(value):
                walk(shape.member, v, f"{path}[{i}]")
        elif t == "map" and isinstance(value, dict):
            for k, v in value.items():
                walk(shape.value, v, f"{path}[{k!r}]")
        elif t == "string" and isinstance(value, str) and value.startswith(LOCAL_URI_PREFIXES):
            if "://" in shape.metadata.get("pattern", ""):
                found.append(SpecError(
                    path,
                    f"{value!r} is a local URI; file:// URIs only work on the local backend, and SageMaker "
                    "reads and writes s3:// only.",
                    "upload the data to S3 and give its s3:// URI, or run this job with backend='local'.",
                ))

    walk(operation_model(operation_name).input_shape, request, operation_name)
    return found


class SageMakerBackend:
    """Runs Create*Job requests on Amazon SageMaker (or anything speaking its API, e.g. moto)."""

    name = "sagemaker"
    #: requests name s3:// only; jobs run as a real IAM role; the AWS console's links; waits of several jobs in
    #: coalesced List and FilterLogEvents rounds
    capabilities = CAPABILITIES["sagemaker"]
    #: CloudWatch holds a job's lines only once its containers run: a wait reads none while the job's secondary
    #: status says they have not started (JobKindInfo.silent_secondary_statuses)
    silent_before_containers = True
    #: S3 as the aws connection reaches it (see :meth:`storage`), no endpoint of this backend's own
    s3_endpoint_url: str | None = None

    def __init__(self, aws_conn_id: str | None = "aws_default", region_name: str | None = None) -> None:
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    # ---- clients -------------------------------------------------------------------------------------
    def _client_from(self, hook: Any) -> Any:
        from botocore.config import Config

        # The hook's own ``config`` would replace the connection's config_kwargs wholesale; merging keeps
        # whatever the connection sets (it wins) and adds adaptive retries where it sets none.
        config = Config(retries=dict(DEFAULT_RETRIES)).merge(hook.config)
        return hook.get_client_type(region_name=hook.region_name, config=config)

    @cached_property
    def sagemaker_hook(self) -> Any:
        from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

        return SageMakerHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)  # type: ignore[no-untyped-call]

    @cached_property
    def client(self) -> Any:
        """boto3 ``sagemaker`` client (lazy)."""
        return self._client_from(self.sagemaker_hook)

    @cached_property
    def logs_client(self) -> Any:
        """boto3 ``logs`` client (lazy), same connection."""
        from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook

        return self._client_from(AwsLogsHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name))

    @cached_property
    def cloudwatch_client(self) -> Any:
        """boto3 ``cloudwatch`` client (lazy), same connection: job metrics and instance metrics."""
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

        return self._client_from(AwsBaseHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name,
                                             client_type="cloudwatch"))

    def _call(self, op: str, **kwargs: Any) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer: dict[str, Any] = getattr(self.client, snake_case(op))(**kwargs)
            return answer
        except ClientError as exc:
            code, message = _client_error_parts(exc)
            raise BackendError(message, code=code, operation=op) from exc
        except BotoCoreError as exc:  # no credentials, endpoint unreachable, ...
            raise BackendError(str(exc), code=type(exc).__name__, operation=op) from exc

    # ---- the protocol ---------------------------------------------------------------------------------
    def check(self, kind: str, request: dict[str, Any]) -> None:
        """Validate ``request`` against botocore's model, file:// URIs rejected (every problem at once, as
        SpecErrors); calls nothing."""
        op = kind_info(kind).create_op
        local = _local_uri_errors(op, request)
        local_fields = {e.field for e in local}
        try:
            validate_request(op, request, allow_local_uris=False)
            others: list[SpecError] = []
        except SpecErrors as exc:
            others = [e for e in exc.errors if e.field not in local_fields]
        if local or others:
            raise SpecErrors(local + others)

    def submit(self, kind: str, request: dict[str, Any]) -> str:
        """Validate ``request`` (:meth:`check`) and call Create*Job. Returns the job name."""
        info = kind_info(kind)
        self.check(kind, request)
        self._call(info.create_op, **request)
        return info.job_name(request)

    def describe(self, kind: str, name: str) -> dict[str, Any]:
        """Describe*Job, without ``ResponseMetadata``. Raises JobNotFound for a missing job."""
        info = kind_info(kind)
        try:
            response = self._call(info.describe_op, **{info.name_key: name})
        except BackendError as exc:
            if is_not_found(exc.code, str(exc)):
                raise JobNotFound(kind, name) from exc
            raise
        response.pop("ResponseMetadata", None)
        return response

    def list_tags(self, kind: str, name: str) -> list[dict[str, str]]:
        """ListTags of the job (DescribeXJob does not return them): every page."""
        arn = self.describe(kind, name)[kind_info(kind).arn_key]
        tags: list[dict[str, str]] = []
        kwargs: dict[str, Any] = {"ResourceArn": arn, "MaxResults": 100}
        while True:
            page = self._call("ListTags", **kwargs)
            tags += page.get("Tags", [])
            if not page.get("NextToken"):
                return tags
            kwargs["NextToken"] = page["NextToken"]

    def stop(self, kind: str, name: str) -> None:
        """Stop*Job. A job already finished is left alone; a missing one raises JobNotFound."""
        info = kind_info(kind)
        if info.status(self.describe(kind, name)) in TERMINAL_STATES:
            return
        try:
            self._call(info.stop_op, **{info.name_key: name})
        except BackendError as exc:
            # It finished between our Describe and the Stop: "... the training job is in status Completed."
            if exc.code == "ValidationException" and "in status" in str(exc):
                return
            if is_not_found(exc.code, str(exc)):
                raise JobNotFound(kind, name) from exc
            raise

    def status_source(self) -> SageMakerStatusSource:
        """Statuses and log lines of many jobs with few calls (List*Jobs, one FilterLogEvents for all), as
        the triggers read them and :class:`~airflow_smdist.lifecycle.CoalescedRounds` waits with (not yet
        acquired; its aiobotocore clients are made on first use)."""
        from airflow_smdist.backends.sagemaker_async import SageMakerStatusSource

        return SageMakerStatusSource(self.aws_conn_id, self.region_name)

    def status_source_key(self) -> tuple[Any, ...]:
        """Backends of the same connection and region share a status source in a triggerer."""
        return ("sagemaker", self.aws_conn_id, self.region_name)

    def first_log_cursor(self, created: float | None) -> Any:
        """A wait reads a job's CloudWatch lines from its creation on (see sagemaker_async.CloudWatchLogReader)."""
        return {"t": int(created * 1000), "seen": []} if created else None

    def log_cursor_store(self, kind: str, name: str) -> FileCursorStore:
        """A file under the local root (SageMaker keeps nothing of ours): per region, kind and job. Only for a
        trigger without a task instance: one with it keeps the cursor in its XCom (``shared_log_cursor``), which
        every triggerer reads."""
        import os

        from airflow_smdist.backends.local.store import default_root

        region = self.region_name or os.environ.get("AWS_DEFAULT_REGION") or "default"
        return FileCursorStore(default_root() / "trigger-log-cursors" / "sagemaker" / region / kind / f"{name}.json")

    def job_dir(self, kind: str, name: str) -> Path | None:
        """None: a SageMaker job keeps no directory on this machine."""
        return None

    def storage(self) -> Storage:
        """The Airflow ``aws`` connection's S3 client (through the Amazon provider's S3Hook)."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from airflow_smdist.storage import Storage

        hook = S3Hook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        return Storage(region_name=hook.region_name, client=hook.get_conn())

    def default_code_location(self) -> str:
        """The SageMaker SDK's default bucket ``s3://sagemaker-<region>-<account>`` (the account from STS
        through the aws connection)."""
        from airflow.providers.amazon.aws.hooks.sts import StsHook

        region = self.region_name or "us-east-1"
        sts = StsHook(aws_conn_id=self.aws_conn_id, region_name=region)  # type: ignore[no-untyped-call]
        account = sts.get_account_number()
        return f"s3://sagemaker-{region}-{account}"

    def wait_for_change(self, kind: str, names: str | list[str], timeout: float) -> None:
        """Wait ``timeout`` seconds (the poll interval): SageMaker has no change notification to wait on."""
        time.sleep(timeout)

    def log_events(self, kind: str, name: str, cursor: Any = None) -> tuple[list[LogEvent], Any]:
        """New CloudWatch events of all hosts (streams ``<name>/...``), merged by time.

        ``cursor`` maps stream name -> the ``nextForwardToken`` to read that stream from next time; a
        stream not in it is read from its head. Returns a new cursor; the given one is not modified.
        No log group or no streams yet: ``([], cursor)``.
        """
        info = kind_info(kind)  # rejects an unknown kind
        cursor = dict(cursor or {})
        if kind == "tuning":
            # A tuning job writes no logs of its own; its trials' logs are the training jobs' streams
            # (/aws/sagemaker/TrainingJobs/<trial>/...), found through ListTrainingJobsForHyperParameterTuningJob.
            return tuning_log_events(self, name, cursor)
        group = info.log_group
        try:
            streams = self._log_streams(group, name)
        except BackendError as exc:
            if exc.code == "ResourceNotFoundException":  # the log group does not exist (yet)
                return [], cursor
            raise
        events: list[tuple[int, int, LogEvent]] = []
        for order, stream in enumerate(streams):
            host = host_of_stream(name, stream)
            try:
                read = self._read_stream(group, stream, cursor)
            except BackendError as exc:
                if exc.code == "ResourceNotFoundException":  # the stream went away meanwhile
                    continue
                raise
            events.extend((ts, order, LogEvent(timestamp=ts / 1000.0, host=host, message=msg)) for ts, msg in read)
        # Merge all hosts by time (not stream after stream, the provider's async bug); equal timestamps keep
        # stream order, and each stream keeps its own order (the sort is stable).
        events.sort(key=lambda e: (e[0], e[1]))
        return [e[2] for e in events], cursor

    def _logs_call(self, op: str, **kwargs: Any) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer: dict[str, Any] = getattr(self.logs_client, snake_case(op))(**kwargs)
            return answer
        except ClientError as exc:
            code, message = _client_error_parts(exc)
            raise BackendError(message, code=code, operation=op) from exc
        except BotoCoreError as exc:
            raise BackendError(str(exc), code=type(exc).__name__, operation=op) from exc

    def _log_streams(self, group: str, name: str) -> list[str]:
        streams: list[str] = []
        kwargs: dict[str, Any] = {"logGroupName": group, "logStreamNamePrefix": f"{name}/"}
        while True:
            page = self._logs_call("DescribeLogStreams", **kwargs)
            streams.extend(s["logStreamName"] for s in page.get("logStreams", []))
            token = page.get("nextToken")
            if not token or token == kwargs.get("nextToken"):
                return sorted(streams)
            kwargs["nextToken"] = token

    def _read_stream(self, group: str, stream: str, cursor: dict[str, str]) -> list[tuple[int, str]]:
        """All events of ``stream`` after ``cursor[stream]`` as (epoch ms, message); updates
        ``cursor[stream]`` once the whole read succeeded. CloudWatch marks the end of a stream by handing
        back the token it was given."""
        out: list[tuple[int, str]] = []
        token = cursor.get(stream)
        for _ in range(_MAX_PAGES_PER_STREAM):
            kwargs: dict[str, Any] = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
            if token:
                kwargs["nextToken"] = token
            page = self._logs_call("GetLogEvents", **kwargs)
            out.extend((e["timestamp"], e["message"]) for e in page.get("events", []))
            new_token = page.get("nextForwardToken")
            if not new_token or new_token == token:
                break
            token = new_token
        if token:
            cursor[stream] = token
        return out

    def list_training_jobs_for_tuning_job(self, name: str, *, status_equals: str | None = None,
                                          sort_by: str | None = None, sort_order: str | None = None,
                                          page_size: int = 100) -> list[dict[str, Any]]:
        """ListTrainingJobsForHyperParameterTuningJob: every trial's HyperParameterTrainingJobSummary (all pages)."""
        kwargs: dict[str, Any] = {"HyperParameterTuningJobName": name, "MaxResults": page_size}
        for key, value in (("StatusEquals", status_equals), ("SortBy", sort_by), ("SortOrder", sort_order)):
            if value:
                kwargs[key] = value
        summaries: list[dict[str, Any]] = []
        while True:
            page = self._call("ListTrainingJobsForHyperParameterTuningJob", **kwargs)
            summaries.extend(page.get("TrainingJobSummaries", []))
            token = page.get("NextToken")
            if not token or token == kwargs.get("NextToken"):
                return summaries
            kwargs["NextToken"] = token

    # ---- models (CreateModel for transform jobs) -------------------------------------------------------
    def create_model(self, request: dict[str, Any]) -> str:
        local = _local_uri_errors("CreateModel", request)
        if local:
            raise SpecErrors(local)
        validate_request("CreateModel", request, allow_local_uris=False)
        try:
            return str(self._call("CreateModel", **request)["ModelArn"])
        except BackendError as exc:  # "Cannot create already existing model ..."
            if exc.code == "ValidationException" and "already exist" in str(exc):
                raise ResourceExists(str(exc), code=exc.code, operation="CreateModel") from exc
            raise

    def describe_model(self, name: str) -> dict[str, Any]:
        """DescribeModel, without ``ResponseMetadata``. Raises ModelNotFound for a missing model."""
        try:
            d = self._call("DescribeModel", ModelName=name)
        except BackendError as exc:
            if is_not_found(exc.code, str(exc)):
                raise ModelNotFound(str(exc), operation="DescribeModel") from exc
            raise
        d.pop("ResponseMetadata", None)
        return d

    def delete_model(self, name: str) -> None:
        self._call("DeleteModel", ModelName=name)

    # ---- beyond the protocol ----------------------------------------------------------------------------
    def list_jobs(
        self, kind: str, *, name_contains: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        """List*Jobs summaries (all pages), optionally filtered by name substring and status."""
        info = kind_info(kind)
        op = info.list_op
        # 100 a page (the service's default is 10): fewer calls against List* quotas as low as 2/s.
        kwargs: dict[str, Any] = {"MaxResults": 100}
        if name_contains:
            kwargs["NameContains"] = name_contains
        if status:
            kwargs["StatusEquals"] = status
        summaries: list[dict[str, Any]] = []
        while True:
            page = self._call(op, **kwargs)
            summaries.extend(page.get(info.summaries_key, []))
            token = page.get("NextToken")
            if not token or token == kwargs.get("NextToken"):
                return summaries
            kwargs["NextToken"] = token
