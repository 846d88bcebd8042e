"""Local batch transform: ``python -m airflow_smdist.backends.local.job.transform <job dir>`` (the supervisor).

The supervisor does what the batch transform platform does: it finds the job's model (CreateModel, kept
by this module in ``<root>/models/<name>.json``), lists the input (S3Prefix or ManifestFile), maps whole
objects to the ``InstanceCount`` instances (keys sorted, object *i* to the instance of rank *i mod n*;
never one object over two instances), gives each instance its own ``/opt/ml/model`` (model.tar.gz
extracted; the inference code of a ``sourcedir.tar.gz`` ``SAGEMAKER_SUBMIT_DIRECTORY`` beside it), stages
each instance's objects into its directory, and starts one worker process per instance that has objects:
instances run in parallel on the cores, each a simulated host (its own namespaces with its directory on
``/opt/ml`` where the OS allows it) with the clean environment every host gets (no worker credentials: the
supervisor moves the data, as SageMaker's agent does outside the container). Each worker, the inference
engine (:mod:`airflow_smdist.runtime.batch_runner`) in the image's runtime, loads the model once with the
inference toolkit's handlers, splits, batches and transforms its objects (``MaxConcurrentTransforms`` requests
in flight), and writes an object's ``.out`` only when the whole object succeeded; the supervisor uploads it
to ``<S3OutputPath>/<key below the prefix>.out``. A failing record fails the job; its FailureReason names the
object and the record. Statuses are DescribeTransformJob's
(InProgress, Completed, Failed, Stopping, Stopped); StopTransformJob ends every worker.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import tarfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from airflow_smdist.backends.base import ModelNotFound, ResourceExists
from airflow_smdist.backends.local import ACCOUNT, dt
from airflow_smdist.backends.local.job import contract, hostfs, runtimes
from airflow_smdist.runtime import batch_runner as inference
from airflow_smdist.backends.local.store import (
    private_dir,
    read_json,
    write_json_atomic,
)
from airflow_smdist.backends.local.job.supervisor import (
    EndedBeforeHosts,
    JobSupervisor,
    PlatformError,
    serve,
    shard,
)
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.sharding import output_uri
from airflow_smdist.storage import relative_key

if TYPE_CHECKING:
    from airflow_smdist.backends.local import LocalBackend

OPERATION = "CreateTransformJob"
MODELS_DIR = "models"
#: SplitTypes the local workers split (RecordIO / TFRecord need SageMaker)
LOCAL_SPLIT_TYPES = ("None", "Line")


class ModelRecord(TypedDict):
    """A local model as ``<root>/models/<name>.json`` keeps it."""

    request: dict[str, Any]
    created: float
    arn: str


# -- models (CreateModel / DescribeModel / DeleteModel) -------------------------------------------------------
def model_arn(backend: LocalBackend, name: str) -> str:
    return f"arn:aws:sagemaker:{backend.region}:{ACCOUNT}:model/{name.lower()}"


def _model_path(root: Path, name: str) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise SpecError("ModelName", f"{name!r} is not a model name.", "give the name the model was created with.")
    return Path(root) / MODELS_DIR / f"{name}.json"


def check_model(request: dict[str, Any]) -> None:
    """What the local backend cannot serve, refused before anything is written."""
    if request.get("Containers") and not request.get("PrimaryContainer"):
        raise SpecError("Containers", "inference pipelines (several containers) are not run by the local backend.",
                        "give one PrimaryContainer, or use backend='sagemaker'.")
    container = request.get("PrimaryContainer")
    if not container:
        raise SpecError("PrimaryContainer", "is required by the local backend.",
                        "give PrimaryContainer={'Image': ..., 'ModelDataUrl': 's3://.../model.tar.gz'}.")
    if container.get("Mode") == "MultiModel":
        raise SpecError("PrimaryContainer.Mode", "multi-model containers are not served by the local backend.",
                        "use Mode='SingleModel', or backend='sagemaker'.")
    source = (container.get("ModelDataSource") or {}).get("S3DataSource")
    if not container.get("ModelDataUrl") and not source:
        raise SpecError("PrimaryContainer.ModelDataUrl", "is required: the local backend runs the model's artifact.",
                        "give the model.tar.gz URI (a training job's ModelArtifacts.S3ModelArtifacts).")
    if source and source.get("S3DataType") == "S3Object" and source.get("CompressionType") != "Gzip":
        raise SpecError("PrimaryContainer.ModelDataSource.S3DataSource.CompressionType",
                        "an S3Object model must be a gzip tarball here.", "give CompressionType='Gzip'.")


def create_model(backend: LocalBackend, request: dict[str, Any]) -> str:
    """CreateModel on the local backend: validated, stored as ``<root>/models/<name>.json``. Returns the
    ARN. A second model of the same name fails as SageMaker fails it."""
    from airflow_smdist.specs.validate import validate_request

    validate_request("CreateModel", request, allow_local_uris=True)
    check_model(request)
    runtimes.check_image("model", request, getattr(backend, "local_runtimes", None))
    name = request["ModelName"]
    path = _model_path(backend.store.root, name)
    private_dir(path.parent, chmod=True)
    arn = model_arn(backend, name)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)  # its Environment may hold secrets
    except FileExistsError:
        raise ResourceExists(f'Cannot create already existing model "{arn}".', code="ValidationException",
                             operation="CreateModel") from None
    with os.fdopen(fd, "w") as f:
        json.dump({"request": request, "created": time.time(), "arn": arn}, f, indent=1, sort_keys=True)
    return arn


def check_model_image(backend: LocalBackend, request: dict[str, Any]) -> None:
    """CreateTransformJob: the model it names must have a local runtime for its image (checked again here: the
    model may have been created while jobs ran in the worker's runtime, or with other declared runtimes).
    A missing model is left to the job, which fails as SageMaker's does."""
    record: ModelRecord | None = read_json(_model_path(backend.store.root, request["ModelName"]))
    if record is not None:
        runtimes.check_image("model", record["request"], getattr(backend, "local_runtimes", None),
                             context=f"model {request['ModelName']!r}, which this transform job runs")


def _stored_model(root: Path, backend_region: str, name: str, operation: str) -> ModelRecord:
    record: ModelRecord | None = read_json(_model_path(root, name))
    if record is None:
        arn = f"arn:aws:sagemaker:{backend_region}:{ACCOUNT}:model/{name.lower()}"
        raise ModelNotFound(f'Could not find model "{arn}".', operation=operation)
    return record


def describe_model(backend: LocalBackend, name: str) -> dict[str, Any]:
    """DescribeModel's response for a local model. Raises ModelNotFound if missing."""
    record = _stored_model(backend.store.root, backend.region, name, "DescribeModel")
    req = record["request"]
    d = {"ModelName": req["ModelName"], "ModelArn": record["arn"], "CreationTime": dt(record["created"]),
         "EnableNetworkIsolation": bool(req.get("EnableNetworkIsolation", False))}
    for key in ("PrimaryContainer", "Containers", "InferenceExecutionConfig", "ExecutionRoleArn", "VpcConfig"):
        if req.get(key):
            d[key] = req[key]
    return d


def delete_model(backend: LocalBackend, name: str) -> None:
    _stored_model(backend.store.root, backend.region, name, "DeleteModel")
    _model_path(backend.store.root, name).unlink()


def list_models(backend: LocalBackend) -> list[str]:
    base = Path(backend.store.root) / MODELS_DIR
    return sorted(p.stem for p in base.glob("*.json")) if base.is_dir() else []


# -- the request ------------------------------------------------------------------------------------------
def check_request(request: dict[str, Any]) -> None:
    """What the local backend cannot run, refused before anything is written, with the way out."""
    contract.check_instance_count(int(request["TransformResources"]["InstanceCount"]),
                                  "TransformResources.InstanceCount")
    ti = request["TransformInput"]
    split = ti.get("SplitType") or "None"
    if split not in LOCAL_SPLIT_TYPES:
        raise SpecError("TransformInput.SplitType", f"{split!r} records are not split by the local backend.",
                        "use SplitType None or Line locally, or backend='sagemaker' for RecordIO / TFRecord.")
    data_type = ti["DataSource"]["S3DataSource"]["S3DataType"]
    if data_type not in ("S3Prefix", "ManifestFile"):
        raise SpecError("TransformInput.DataSource.S3DataSource.S3DataType",
                        f"{data_type!r} inputs are not supported by batch transform locally.",
                        "use S3Prefix or ManifestFile.")
    if request.get("DataProcessing") and any(request["DataProcessing"].get(k) not in (None, "$")
                                             for k in ("InputFilter", "OutputFilter")):
        import importlib.util

        if importlib.util.find_spec("jsonpath_ng") is None:
            raise SpecError("DataProcessing", "JSONPath filters need jsonpath-ng on this machine.",
                            "pip install 'airflow-smdist[local]' (or jsonpath-ng).")
    payload = request.get("MaxPayloadInMB")
    concurrent = request.get("MaxConcurrentTransforms")
    if payload is not None and payload > 100:
        raise SpecError("MaxPayloadInMB", f"{payload} is above the maximum 100.", "use at most 100.")
    if concurrent and (6 if payload is None else payload) * concurrent > 100:
        raise SpecError("MaxConcurrentTransforms", "MaxConcurrentTransforms x MaxPayloadInMB is above 100.",
                        "lower one of them.")


def describe(backend: LocalBackend, request: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """DescribeTransformJob's response for a local job."""
    name = request["TransformJobName"]
    d: dict[str, Any] = {
        "TransformJobName": name,
        "TransformJobArn": backend.arn("transform", name),
        "TransformJobStatus": state["status"],
        "ModelName": request["ModelName"],
        "TransformInput": request["TransformInput"],
        "TransformOutput": request["TransformOutput"],
        "TransformResources": request["TransformResources"],
        "CreationTime": dt(state.get("created")),
    }
    for key in ("MaxConcurrentTransforms", "ModelClientConfig", "MaxPayloadInMB", "BatchStrategy", "Environment",
                "DataCaptureConfig", "DataProcessing", "ExperimentConfig"):
        if request.get(key) is not None:
            d[key] = request[key]
    if state.get("started"):
        d["TransformStartTime"] = dt(state["started"])
    if state.get("ended"):
        d["TransformEndTime"] = dt(state["ended"])
    if state.get("failure_reason"):
        d["FailureReason"] = state["failure_reason"]
    return d


# -- the supervisor ---------------------------------------------------------------------------------------
class TransformSupervisor(JobSupervisor):
    kind = "transform"

    def model(self) -> dict[str, Any]:
        name = self.request["ModelName"]
        record: ModelRecord | None = read_json(_model_path(Path(self.state.get("root") or self.store.root), name))
        if record is None:
            arn = f"arn:aws:sagemaker:{self.state.get('region', 'us-east-1')}:{ACCOUNT}:model/{name.lower()}"
            raise PlatformError(f'ValidationException: Could not find model "{arn}".')
        return record["request"]

    def inputs(self) -> list[dict[str, Any]]:
        """[{uri, rel, output, size}] of every input object, keys sorted."""
        src = self.request["TransformInput"]["DataSource"]["S3DataSource"]
        out_path = self.request["TransformOutput"]["S3OutputPath"]
        if src["S3DataType"] == "ManifestFile":
            prefix, objects = self.manifest_objects(src["S3Uri"])
        else:
            prefix, objects = src["S3Uri"], self.storage.list(src["S3Uri"])
        if not objects:
            raise PlatformError(f"ClientError: No S3 objects found under S3 URL \"{src['S3Uri']}\" given in input "
                                "data source. Please ensure that the bucket exists in the selected region, that "
                                "objects exist under that S3 prefix, and that the role has access.")
        items: list[dict[str, Any]] = []
        for obj in sorted(objects, key=lambda o: o.key):
            rel = relative_key(prefix, obj)
            items.append({"uri": obj.uri, "key": obj.key, "rel": rel, "size": obj.size,
                          "output": output_uri(out_path, rel)})
        return items

    def stage_model(self, cluster: contract.Cluster, container: dict[str, Any],
                    hosts: list[contract.Host]) -> str | None:
        """Each instance's /opt/ml/model from the artifact, and its code/ from a sourcedir URI. Returns the code
        directory relative to the host's /opt/ml, or None for the model's own code/."""
        source: Any = (container.get("ModelDataSource") or {}).get("S3DataSource")  # the request's JSON, or None
        url = container.get("ModelDataUrl")
        archive = None
        if url or (source and source.get("S3DataType") == "S3Object"):
            archive = self.dir / "model.tar.gz"
            self.storage.download(url or source["S3Uri"], archive)
        submit = (container.get("Environment") or {}).get("SAGEMAKER_SUBMIT_DIRECTORY", "")
        sourcedir = None
        if "://" in submit:
            sourcedir = self.dir / "sourcedir.tar.gz"
            self.storage.download(submit, sourcedir)
        for host in hosts:
            hd = self.host_dir(host)
            (hd / "output").mkdir(parents=True, exist_ok=True)
            model_dir = hd / "model"
            model_dir.mkdir(parents=True, exist_ok=True)
            if archive is not None:
                try:
                    inference.extract_model(str(archive), str(model_dir))
                except (tarfile.TarError, ValueError, OSError) as e:
                    raise PlatformError(f"ClientError: the model artifact {url or source['S3Uri']} is not a valid "
                                        f"model.tar.gz: {e}") from None
            elif source:
                self.storage.download_prefix(source["S3Uri"], model_dir)
            if sourcedir is not None:
                inference.extract_model(str(sourcedir), str(hd / "code"))
        return "code" if sourcedir is not None else None

    def install_requirements(self, host: contract.Host, code_rel: str | None,
                             container: dict[str, Any]) -> runtimes.Runtime:
        """What the serving container does before its model server starts: the inference code directory's
        ``requirements.txt`` installed (sagemaker-inference's ``model_server._install_requirements``, the
        scikit-learn and XGBoost containers' module install), here into the job's layer, inside the first
        instance with its environment and network; every instance then imports from the layer."""
        assert self.runtime is not None, "run() resolves the job's runtime first"
        rel = code_rel or "model/code"
        code = self.host_dir(host) / rel
        if not code.is_dir():
            return self.runtime
        inside = f"/opt/ml/{rel}" if self.isolation == "namespace" else str(code)
        env = {**self.runtime.apply(self.worker_env(container, host, str(self.host_dir(host)), 1)),
               **runtimes.installer_env()}
        rt = runtimes.install_layer(self.runtime, code, self.dir / "layer", log=self.say, cwd=inside,
                                    run=lambda cmd, cwd: self.run_in_host(host, cmd, env, cwd, self.say),
                                    installer="the serving container's, before its model server starts")
        self.save(runtime=rt.to_json())
        return rt

    def worker_command(self, host: contract.Host, base: str, items: list[dict[str, Any]], code_rel: str | None,
                       defaults: str) -> list[str]:
        """One instance's command: the inference engine, run by path in the image's runtime over the instance's
        objects, staged here into ``.transform/input`` (SageMaker's agent feeds the container the same way, from
        outside: the model's code never holds the storage credentials); :meth:`upload_outputs` uploads the
        ``.out`` objects it writes."""
        assert self.runtime is not None, "run() resolves the job's runtime first"
        staged = self.host_dir(host) / ".transform"
        for item in items:
            self.storage.download(item["uri"], staged / "input" / item["rel"])
        (staged / "output").mkdir(parents=True, exist_ok=True)
        write_json_atomic(staged / "names.json", {item["rel"]: item["uri"] for item in items})
        args = ["--input", f"{base}/.transform/input", "--output", f"{base}/.transform/output",
                "--model", f"{base}/model", "--defaults", defaults, "--failure-file", f"{base}/output/failure",
                "--names", f"{base}/.transform/names.json"]
        if code_rel:
            args += ["--code-dir", f"{base}/{code_rel}"]
        return [self.runtime.python, self.runtime.platform_script("batch_runner.py"), *args,
                *inference.Settings.from_request(self.request).to_args()]

    def upload_outputs(self, hosts: list[contract.Host], work: dict[str, list[_Key]], *, complete: bool) -> None:
        """Every object's ``<rel>.out`` the engine wrote (whole objects only), to its output URI: all of them for
        a Completed job, those done before the failure or stop otherwise."""
        for host in hosts:
            for key in work[host.label]:
                rel = f".transform/output/{key.item['rel']}.out"
                # opened inside the host's directory: an output the job linked out of it is not uploaded
                f = hostfs.open_file(self.host_dir(host), rel)
                if f is None:
                    if os.path.islink(self.host_dir(host) / rel):
                        self.host_skipped(host)(f"skipped {rel}: a link out of the host")
                    elif complete:
                        raise FileNotFoundError(errno.ENOENT, "no output", str(self.host_dir(host) / rel))
                    continue
                with f:
                    self.storage.upload_fileobj(f, key.item["output"])

    def network_isolated(self) -> bool:
        """The model's EnableNetworkIsolation: the platform moves the data outside the container, so an
        isolated model's code reaches nothing (its host still gets its staged objects)."""
        return bool(self.model().get("EnableNetworkIsolation"))

    def worker_env(self, container: dict[str, Any], host: contract.Host, base: str, n_cpus: int) -> dict[str, str]:
        env = self.base_env()  # the allow-list every host gets: no worker credentials, AIRFLOW_* or PYTHONPATH
        env.update(container.get("Environment") or {})
        env.update(self.request.get("Environment") or {})
        env["SAGEMAKER_BATCH"] = "true"
        env["SAGEMAKER_BASE_DIR"] = base
        if self.request.get("MaxPayloadInMB") is not None:
            env["SAGEMAKER_MAX_PAYLOAD_IN_MB"] = str(self.request["MaxPayloadInMB"])
        if self.request.get("BatchStrategy"):
            env["SAGEMAKER_BATCH_STRATEGY"] = {"SingleRecord": "SINGLE_RECORD",
                                               "MultiRecord": "MULTI_RECORD"}[self.request["BatchStrategy"]]
        if self.request.get("MaxConcurrentTransforms"):
            env["SAGEMAKER_MAX_CONCURRENT_TRANSFORMS"] = str(self.request["MaxConcurrentTransforms"])
        env["SM_CURRENT_HOST"] = host.name
        env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS") or str(n_cpus)
        return env

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        (self.dir / "logs").mkdir(exist_ok=True)
        res = self.request["TransformResources"]
        status, reason = "Failed", None
        try:
            self.cluster = cluster = self.build_cluster({"InstanceType": res["InstanceType"],
                                                         "InstanceCount": res["InstanceCount"]})
            self.save(status="InProgress", started=time.time(),
                      hosts=[{"label": h.label, "address": h.address, "instance_type": h.instance_type}
                             for h in cluster.hosts])
            isolation = self.state.get("isolation", "none")
            container = self.model()["PrimaryContainer"]
            self.items = items = self.inputs()
            order = cluster.names
            work = {h.label: shard([_Key(i) for i in items], order.index(h.name), len(order))
                    for h in cluster.hosts}
            busy = [h for h in cluster.hosts if work[h.label]]
            self.say(f"{len(items)} object(s) over {len(cluster.hosts)} instance(s) ({res['InstanceType']}): "
                     + ", ".join(f"{h.label}={h.address}: {len(work[h.label])}" for h in cluster.hosts))
            for h in cluster.hosts:
                if not work[h.label]:
                    self.say(f"{h.label} gets no object and stays idle (SageMaker maps whole objects to instances)")
            if self.request.get("DataCaptureConfig"):
                self.say("DataCaptureConfig is not emulated by the local backend: no capture is written")
            self.say(f"Downloading the model artifact for {self.request['ModelName']}")
            code_rel = self.stage_model(cluster, container, busy)
            defaults = inference.defaults_for_image(container.get("Image"))
            self.runtime = runtimes.resolve(container.get("Image"), local_root=self.store.root, job_dir=self.dir,
                                            environment=container.get("Environment") or {},
                                            declared=self.state.get("runtimes") or {}, log=self.say,
                                            field_name="PrimaryContainer.Image")
            self.save(runtime=self.runtime.to_json())
            self.runtime = self.install_requirements(busy[0], code_rel, container)
            if self.stop_requested or (self.dir / "stop").exists():
                status = "Stopped"
            else:
                n_cpus = max(1, (os.cpu_count() or 1) // len(busy))
                for host in busy:
                    base = "/opt/ml" if isolation == "namespace" else str(self.host_dir(host))
                    items = [k.item for k in work[host.label]]
                    cmd = self.worker_command(host, base, items, code_rel, defaults)
                    env = self.runtime.apply(self.worker_env(container, host, base, n_cpus))
                    self.start_host(host, cmd, env, base)
                self.save(host_pids={label: p.pid for label, p in self.procs.items()})
                self.say(f"Transforming on {len(busy)} instance(s) with the {defaults} inference defaults")
                status, _secondary, reason = self.watch(cluster)
                for t in self.readers:
                    t.join(timeout=10)
                self.upload_outputs(busy, work, complete=status == "Completed")
        except EndedBeforeHosts as ended:  # stopped during the serving container's install
            status, _secondary, reason = ended.outcome
        except (PlatformError, runtimes.RuntimeSetupError) as e:
            status, reason = "Failed", str(e)
        except runtimes.LayerError as e:  # the model server never started: the container's install failed
            status, reason = "Failed", f"ClientError: the inference code's requirements did not install: {e}"
        except Exception as e:  # noqa: BLE001 - any platform error fails the job with its reason
            self.log.write(traceback.format_exc())
            if self.procs:
                self.end_all(5)
            status, reason = "Failed", f"InternalServerError: {type(e).__name__}: {e}"
        self.say({"Completed": "Transform job completed", "Failed": f"Transform job failed: {reason}",
                  "Stopped": "Transform job stopped"}[status])
        self.save(status=status, failure_reason=reason, ended=time.time())
        return 0 if status == "Completed" else 1


class _Key:
    """An input item that :func:`supervisor.shard` can sort by key."""

    def __init__(self, item: dict[str, Any]) -> None:
        self.item = item
        self.key = item["key"]


def main(argv: list[str] | None = None) -> int:
    return serve(TransformSupervisor, argv)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["OPERATION", "check_request", "create_model", "delete_model", "describe", "describe_model",
           "list_models", "main", "model_arn"]
