"""Processing jobs in a few lines of a DAG: PySpark in SageMaker's Spark containers, or a plain script.

* :class:`SageMakerPySparkProcessingOperator` takes what the SageMaker SDK's ``PySparkProcessor`` (and its
  ``run``) takes and sends the same CreateProcessingJob request.
* :class:`SmdistProcessingOperator` runs a script (``code``) in a scikit-learn / framework / own image, as
  ``ScriptProcessor`` does, or an image with an explicit ``entrypoint`` (``Processor``). It is named with the
  ``Smdist`` prefix because the Amazon provider already has a ``SageMakerProcessingOperator`` (which takes a
  raw request dict and runs only on SageMaker).

Both run on the ``local`` backend (for real, on this machine; Spark on a local Spark) or on ``sagemaker``, and
share the job-name, reattach, wait, log and stop logic of :class:`SmdistJobOperator`. Local files the
request names (the app, its dependencies, the Spark configuration, local input sources) are uploaded to
``<code_location>/<job>/input/<channel>`` before the job is submitted; without ``code_location``, where the
SageMaker SDK puts them (its default bucket ``s3://sagemaker-<region>-<account>``), or under the local job
root on the local backend.
"""

from __future__ import annotations

from typing import Any, Sequence
from typing import TYPE_CHECKING
from typing import Callable

from airflow_smdist.operators._arguments import take_arguments, with_arguments
from airflow_smdist.operators.base import SmdistJobOperator, isoformat, require_role
from airflow_smdist.operators.links import BASE_AWS_CONSOLE_LINK, LocalJobPageLink, SmdistConsoleLink
from airflow_smdist.specs.arguments import PROCESSING, PYSPARK, SCRIPT

if TYPE_CHECKING:
    from airflow_smdist.specs.processing import ProcessingPlan

#: The builders' arguments (the argument dataclasses of specs/processing.py, as data), which the operators
#: pass on and template: common to both, PySparkProcessor's, ScriptProcessor/FrameworkProcessor's.
COMMON_FIELDS = PROCESSING
PYSPARK_FIELDS = PYSPARK
SCRIPT_FIELDS = SCRIPT
COMMON_ARGS = tuple(f.name for f in COMMON_FIELDS)
PYSPARK_ARGS = tuple(f.name for f in PYSPARK_FIELDS if f.name not in COMMON_ARGS)
SCRIPT_ARGS = tuple(f.name for f in SCRIPT_FIELDS if f.name not in COMMON_ARGS)
#: The operators' defaults where they differ from the builders': no role (the local backend uses a stand-in;
#: the sagemaker backend requires one, see operators.base.require_role).
OPERATOR_DEFAULTS: dict[str, Any] = {"role": None}
#: the builder arguments that say where local files are uploaded (all default to code_location)
LOCATION_ARGS = ("code_location", "dependency_location", "configuration_location")
RENDERERS = {"inputs": "json", "outputs": "json", "env": "json", "configuration": "json", "arguments": "json",
             "network_config": "json", "tags": "json"}


class SageMakerProcessingJobLink(SmdistConsoleLink):
    name = "SageMaker processing job"
    key = "smdist_processing_job"
    format_str = BASE_AWS_CONSOLE_LINK + "/sagemaker/home?region={region_name}#/processing-jobs/{job_name}"


class SageMakerProcessingLogsLink(SmdistConsoleLink):
    name = "Processing job logs (CloudWatch)"
    key = "smdist_processing_logs"
    format_str = (BASE_AWS_CONSOLE_LINK + "/cloudwatch/home?region={region_name}#logsV2:log-groups/log-group/"
                  "$252Faws$252Fsagemaker$252FProcessingJobs$3FlogStreamNameFilter$3D{job_name}")


class _ProcessingOperator(SmdistJobOperator):
    """What both processing operators share: the common arguments, uploads, links and the result."""

    kind = "processing"
    name_prefix = "smdist"
    ui_color = "#c9daf8"
    operator_extra_links = (SageMakerProcessingJobLink(), SageMakerProcessingLogsLink(), LocalJobPageLink())
    template_fields_renderers = RENDERERS
    builder_args: tuple[str, ...] = ()
    #: one of the builder arguments (set in __init__, one attribute each)
    code_location: str | None

    def __init__(self, *, builder_arguments: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name, value in builder_arguments.items():  # the builder's arguments, one attribute each
            setattr(self, name, value)
        self._plan: ProcessingPlan | None = None

    def builder(self) -> Callable[..., ProcessingPlan]:
        raise NotImplementedError

    def plan(self, job_name: str, backend_name: str) -> ProcessingPlan:
        require_role(self, backend_name)  # before anything is built or uploaded
        from airflow_smdist.backends.base import capabilities
        from airflow_smdist.specs.errors import MissingUploadLocation

        local_uris = capabilities(backend_name).local_uris

        args = {name: getattr(self, name) for name in self.builder_args}
        build = self.builder()
        try:
            return build(job_name=job_name, region=self.hook.region_name, allow_local_uris=local_uris,
                         **args)
        except MissingUploadLocation as exc:
            # local files to upload and nowhere given to put them: where the SageMaker SDK would put them
            if self.code_location or exc.field not in LOCATION_ARGS:
                raise
        args["code_location"] = self.default_code_location()
        return build(job_name=job_name, region=self.hook.region_name, allow_local_uris=local_uris,
                     **args)

    def default_code_location(self) -> str:
        """The SDK's default: the session's bucket ``s3://sagemaker-<region>-<account>`` on SageMaker (the
        account from STS through the aws connection); ``file://<local job root>/code`` on the local backend."""
        location = self.get_backend().default_code_location()
        self.log.info("code_location not given: local files go to %s/<job>/input/ (as the SageMaker SDK's default "
                      "bucket); give code_location to choose.", location)
        return location

    def build_request(self, job_name: str, backend_name: str, context: Any) -> dict[str, Any]:
        self._plan = plan = self.plan(job_name, backend_name)
        if plan.uploads:
            self.check_before_upload(plan.request)
            from airflow_smdist.specs.processing import upload_plan
            from airflow_smdist.storage import Storage

            storage = Storage.for_backend(self.get_backend())  # sagemaker: the aws connection's S3 client
            for uri in upload_plan(plan, storage):
                self.log.info("Uploaded %s", uri)
        return plan.request

    def result(self, description: dict[str, Any]) -> dict[str, Any]:
        return processing_result(description, self.get_backend().name)


class SageMakerPySparkProcessingOperator(_ProcessingOperator):
    """Run a PySpark application as a SageMaker Spark processing job (``PySparkProcessor``).

    ``submit_app`` (a local .py file, uploaded to ``code_location``, or an s3:// URI), ``submit_py_files`` /
    ``submit_jars`` / ``submit_files`` (spark-submit's --py-files / --jars / --files), ``arguments`` (the
    app's), ``configuration`` (EMR-style classifications: ``[{"Classification": "spark-defaults",
    "Properties": {...}}]``), ``spark_event_logs_s3_uri``, ``framework_version`` (the Spark version: picks
    the region's ``sagemaker-spark-processing`` image) or ``image_uri``, ``instance_type`` x
    ``instance_count``, ``inputs`` / ``outputs`` (``{name: uri}`` or ``{name: {"source", "destination",
    "distribution": "ShardedByS3Key", ...}}``), ``env``, ``network_config``, ``max_runtime_in_seconds``.
    See :func:`airflow_smdist.specs.processing.build_pyspark_processing`.

    On the local backend the app runs on a real local Spark with one task slot per simulated core of every
    host. Returns (XCom) ``job_name``, ``status``, ``outputs`` (name -> S3 URI, for the next task's
    channels), ``exit_message`` and a few more small fields.
    """

    template_fields: Sequence[str] = ("job_name", "backend", "deferrable", *COMMON_ARGS, *PYSPARK_ARGS)
    builder_args = COMMON_ARGS + PYSPARK_ARGS

    @with_arguments(PYSPARK_FIELDS, OPERATOR_DEFAULTS)
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(builder_arguments=take_arguments(kwargs, PYSPARK_FIELDS, OPERATOR_DEFAULTS), **kwargs)

    def builder(self) -> Callable[..., ProcessingPlan]:
        from airflow_smdist.specs.processing import build_pyspark_processing

        return build_pyspark_processing


class SmdistProcessingOperator(_ProcessingOperator):
    """Run a plain processing job: a script in a scikit-learn / framework / own image (``ScriptProcessor``),
    or an image with an explicit ``entrypoint`` (``Processor``).

    ``code`` (a local script, uploaded to ``code_location``, or an s3:// URI) runs as ``command`` (default
    ``["python3"]``) ``+ ["/opt/ml/processing/input/code/<script>"] + arguments``; the image is ``image_uri``
    or ``framework`` ("sklearn", "xgboost", "pytorch", "tensorflow") + ``framework_version`` from the SDK's
    data. With ``source_dir``, ``code`` names the script in that directory, which is shipped as
    sourcedir.tar.gz with a runproc.sh that installs its requirements.txt, as SDK 2's ``FrameworkProcessor``
    does. ``instance_count`` hosts each run it; ``ShardedByS3Key`` inputs give each host its share of the
    objects (the seed's embarrassingly parallel Option 3). See
    :func:`airflow_smdist.specs.processing.build_processing`. Returns the same XCom dict as
    :class:`SageMakerPySparkProcessingOperator`.
    """

    template_fields: Sequence[str] = ("job_name", "backend", "deferrable", *COMMON_ARGS, *SCRIPT_ARGS)
    builder_args = COMMON_ARGS + SCRIPT_ARGS

    @with_arguments(SCRIPT_FIELDS, OPERATOR_DEFAULTS)
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(builder_arguments=take_arguments(kwargs, SCRIPT_FIELDS, OPERATOR_DEFAULTS), **kwargs)

    def builder(self) -> Callable[..., ProcessingPlan]:
        from airflow_smdist.specs.processing import build_processing

        return build_processing


def processing_result(description: dict[str, Any], backend: Any) -> dict[str, Any]:
    """The small, JSON-safe XCom result of a processing job (the full description stays on the backend)."""
    backend_name = backend if isinstance(backend, str) else backend.name  # a Backend or its name
    cluster = (description.get("ProcessingResources") or {}).get("ClusterConfig") or {}
    outputs = (description.get("ProcessingOutputConfig") or {}).get("Outputs") or []
    start, end = description.get("ProcessingStartTime"), description.get("ProcessingEndTime")
    out = {
        "job_name": description["ProcessingJobName"],
        "job_arn": description.get("ProcessingJobArn"),
        "status": description["ProcessingJobStatus"],
        "backend": backend_name,
        "image_uri": (description.get("AppSpecification") or {}).get("ImageUri"),
        "instance_type": cluster.get("InstanceType"),
        "instance_count": cluster.get("InstanceCount"),
        "inputs": {i["InputName"]: i["S3Input"]["S3Uri"] for i in description.get("ProcessingInputs") or []
                   if i.get("S3Input")},
        "outputs": {o["OutputName"]: o["S3Output"]["S3Uri"] for o in outputs if o.get("S3Output")},
        "exit_message": description.get("ExitMessage"),
        "start_time": isoformat(start),
        "end_time": isoformat(end),
        "processing_time_seconds": int((end - start).total_seconds()) if start and end and hasattr(end, "year")
        else None,
    }
    if description.get("FailureReason"):
        out["failure_reason"] = description["FailureReason"]
    return out
