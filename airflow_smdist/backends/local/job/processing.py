"""The supervisor of one local processing job: ``python -m airflow_smdist.backends.local.job.processing <job dir>``.

It runs the CreateProcessingJob request as SageMaker Processing would, for real, on this machine:

* every simulated host (``InstanceCount`` of them, each with its own loopback address from the job's block)
  gets a ``/opt/ml`` tree under ``hosts/algo-N``: ``config/resourceconfig.json`` and
  ``config/processingjobconfig.json``, every input at the ``/opt/ml/processing/...`` LocalPath the request
  names (FullyReplicated: all objects; ShardedByS3Key: key i to the host of rank i % n, as for training;
  in a Spark job, whose other hosts run nothing here, their FullyReplicated copies are hard links to the
  primary's: downloaded once),
  every output LocalPath created empty, and ``output/`` for ``/opt/ml/output/message``. Where the OS allows
  a private mount namespace the host directory is bound on ``/opt/ml``, so the container paths work
  unchanged; otherwise they are relocated into the host directory wherever the request names them
  (entry point, arguments) and the job's log says so.
* ``smspark-submit ...`` (the SageMaker Spark container's entry point) runs the app on a real local Spark
  (the pyspark package's ``spark-submit``), on the primary host only (``sorted(hosts)[0]``), as smspark-submit
  does: the other hosts are the YARN workers there, and idle here. The instance count is honoured as the
  Spark master ``local[instance_count x cores_per_host]`` (one task slot per simulated core of every host;
  ``cores_per_host`` = this machine's cores / instance_count, at least 1), or, with
  ``SMDIST_LOCAL_SPARK_MASTER=local-cluster``, as ``local-cluster[instance_count, cores_per_host, MB]``:
  one real executor JVM per simulated host (heavier: every executor is its own JVM). The configuration
  (``conf`` input) is applied: ``spark-defaults`` as ``--conf``, ``spark-env`` exports in ``spark-env.sh``,
  ``spark-log4j`` / ``spark-metrics`` / ``spark-hive-site`` / ``core-site`` / ``hive-site`` as files in the
  job's ``SPARK_CONF_DIR``; YARN, Hadoop-daemon and Hive-daemon classifications have no local counterpart
  and are reported in the log. ``--local-spark-event-logs-dir`` turns the event log on; it is copied into
  that directory (``.inprogress`` dropped, as smspark's publisher does) and so uploaded with its output.
* any other entry point runs as the host command on every host (``python3``/``python`` = this interpreter).
* at the end, for a Completed job only, every ``EndOfJob`` output is uploaded from every host to its
  ``S3Output.S3Uri`` (keys relative to the LocalPath); nothing is uploaded from a Failed or Stopped job.
  ``Continuous`` outputs are uploaded while the job runs and once more at its end, whatever the status
  (that is what Continuous means on SageMaker, and why event logs of a failed Spark app are there to read).
* the exit code and the last error lines of a failed host become FailureReason (Spark's own INFO/WARN log
  lines are left out, so the Python traceback is what shows); ``/opt/ml/output/message`` of the hosts,
  concatenated, its first 1 KB, is ExitMessage.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_smdist.backends.local import ACCOUNT, dt, last_modified
from airflow_smdist.backends.local.job import contract, hostfs, runtimes
from airflow_smdist.backends.local.store import write_json_atomic
from airflow_smdist.backends.local.job.supervisor import (
    JobSupervisor,
    PlatformError,
    error_excerpt,
    fit_failure_reason,
    serve,
    shard,
)
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.storage import safe_join

if TYPE_CHECKING:
    from airflow_smdist.backends.local import LocalBackend

OPERATION = "CreateProcessingJob"
OPT_ML = "/opt/ml"
PROCESSING_ROOT = "/opt/ml/processing/"
SPARK_SUBMIT = "smspark-submit"
CONF_FILE = "/opt/ml/processing/input/conf/configuration.json"
EXIT_MESSAGE_LIMIT = 1024
#: smspark-submit's options that take a value, and its one flag (smspark cli.py)
SMSPARK_OPTIONS = ("--class", "--jars", "--py-files", "--files", "--spark-event-logs-s3-uri",
                   "--local-spark-event-logs-dir")
SMSPARK_FLAGS = ("-v", "--verbose")
#: classifications that configure daemons the local Spark does not run
NO_LOCAL_EFFECT = ("yarn-site", "yarn-env", "hadoop-env", "hadoop-log4j", "hive-env", "hive-log4j",
                   "hive-exec-log4j")
#: Spark's own log lines ("26/12/02 14:04:25 INFO MemoryStore: ..."): not what a FailureReason should show
SPARK_LOG_LINE = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (TRACE|DEBUG|INFO|WARN) ")
#: the SageMaker Spark container's core-site.xml (spark/processing/3.5/py3/hadoop-config/core-site.xml): S3A behind
#: s3:// too, credentials from the default chain (its role there; the job's Environment here). Its
#: ``fs.defaultFS`` (the cluster's HDFS) has no local counterpart: the local default stays file://
CONTAINER_CORE_SITE = {
    "fs.s3a.aws.credentials.provider": "com.amazonaws.auth.DefaultAWSCredentialsProviderChain",
    "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "fs.s3a.connection.maximum": "100",
}
#: where the AWS SDK for Java's default chain finds credentials in a host's environment
CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                   "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_PROFILE")
_CONTAINER_PATH = re.compile(r"(^|[=,:])/opt/ml(?=/|$|,|:)")


def resource_config(request: dict[str, Any]) -> dict[str, Any]:
    """A ResourceConfig-like dict (InstanceType, InstanceCount) from ProcessingResources.ClusterConfig, for
    :func:`contract.make_cluster`. With InstancePreferences the first preference is the one that runs."""
    cc = request["ProcessingResources"]["ClusterConfig"]
    itype, count = cc.get("InstanceType"), cc.get("InstanceCount")
    prefs = cc.get("InstancePreferences") or []
    if not itype and prefs:
        itype = prefs[0].get("InstanceType")
        count = count or prefs[0].get("InstanceCount")
    return {"InstanceType": itype or "ml.m5.xlarge", "InstanceCount": int(count or 1)}


def is_spark(request: dict[str, Any]) -> bool:
    entry = request["AppSpecification"].get("ContainerEntrypoint") or []
    return bool(entry) and os.path.basename(entry[0]) == SPARK_SUBMIT


def relocate(token: str, base: str) -> str:
    """``token`` with every container path ``/opt/ml/...`` (at its start, after ``=``, ``,`` or ``:``) moved
    under ``base``; unchanged when ``base`` is /opt/ml (the host runs in its own mount namespace)."""
    if base == OPT_ML:
        return token
    return _CONTAINER_PATH.sub(lambda m: m.group(1) + base, token)


def container_rel(path: str) -> str:
    """``/opt/ml/processing/input/data`` -> ``processing/input/data`` (where it is in a host directory)."""
    return os.path.relpath(os.path.normpath(path), OPT_ML)


def spark_home() -> str | None:
    """The pyspark package's Spark (its ``bin/spark-submit``), or ``SPARK_HOME``."""
    if os.environ.get("SPARK_HOME") and os.path.exists(os.path.join(os.environ["SPARK_HOME"], "bin", "spark-submit")):
        return os.environ["SPARK_HOME"]
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    home = list(spec.submodule_search_locations)[0]
    return home if os.path.exists(os.path.join(home, "bin", "spark-submit")) else None


def spark_version(home: str) -> str | None:
    """The version of the Spark at ``home``: a pyspark package's ``version.py``, a distribution's ``RELEASE``
    ("Spark 3.5.1 built for ...") or its ``python/pyspark/version.py``; None when none says."""
    for rel, pattern in (("version.py", r"__version__[^'\"]*['\"]([^'\"]+)"), ("RELEASE", r"Spark ([0-9][^ \s]*)"),
                         (os.path.join("python", "pyspark", "version.py"), r"__version__[^'\"]*['\"]([^'\"]+)")):
        try:
            with open(os.path.join(home, rel)) as f:
                m = re.search(pattern, f.read())
        except OSError:
            continue
        if m:
            return m.group(1)
    return None


def image_spark_version(request: dict[str, Any]) -> str | None:
    """The Spark version a SageMaker Spark processing image's tag names (``sagemaker-spark-processing:3.5-cpu``
    -> ``3.5``), else None."""
    parsed = runtimes.parse_image(request["AppSpecification"].get("ImageUri") or "")
    if not parsed or parsed[0] != "sagemaker-spark-processing":
        return None
    return runtimes.framework_version("spark", parsed[1])


def java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool((home and os.path.exists(os.path.join(home, "bin", "java"))) or shutil.which("java"))


def spark_master(n_hosts: int, n_cpus: int, conf: dict[str, str]) -> tuple[str, str]:
    """The local Spark master for the instance count (``SMDIST_LOCAL_SPARK_MASTER``), and why."""
    mode = os.environ.get("SMDIST_LOCAL_SPARK_MASTER", "local")
    if mode == "local-cluster":
        mem = _megabytes(conf.get("spark.executor.memory", "1g"))
        return (f"local-cluster[{n_hosts},{n_cpus},{mem}]",
                f"{n_hosts} executor JVM(s) (one per host) x {n_cpus} core(s), {mem} MB each")
    if mode == "local":
        return (f"local[{n_hosts * n_cpus}]",
                f"{n_hosts * n_cpus} task slot(s) = {n_hosts} host(s) x {n_cpus} core(s) per host, in one driver JVM")
    raise PlatformError(f"SMDIST_LOCAL_SPARK_MASTER={mode!r}: use 'local' (default) or 'local-cluster'")


def parse_smspark(argv: list[str]) -> dict[str, Any]:
    """smspark-submit's command line (options, then the app, then its arguments verbatim), as its click
    parser reads it (``allow_interspersed_args=False``)."""
    opts: dict[str, Any] = {"verbose": False}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok in SMSPARK_FLAGS:
            opts["verbose"] = True
            i += 1
            continue
        name, eq, value = tok.partition("=")
        if name in SMSPARK_OPTIONS:
            if not eq:
                if i + 1 >= len(argv):
                    raise ValueError(f"smspark-submit: option {name} requires a value")
                value = argv[i + 1]
                i += 1
            opts[name.lstrip("-").replace("-", "_")] = value
            i += 1
            continue
        if tok.startswith("-"):
            raise ValueError(f"smspark-submit: no such option: {tok} (it takes {', '.join(SMSPARK_OPTIONS)}, "
                             "-v; configure Spark through the configuration classifications)")
        opts["app"] = tok
        opts["app_arguments"] = list(argv[i + 1:])
        return opts
    raise ValueError("smspark-submit: missing parameter: app")


def check_request(request: dict[str, Any]) -> None:
    """What the local backend cannot run, refused before anything is written, with the way out."""
    app = request["AppSpecification"]
    entry = app.get("ContainerEntrypoint")
    if not entry:
        raise SpecError("AppSpecification.ContainerEntrypoint",
                        f"is not set, so {app.get('ImageUri')!r} would run its own built-in command, which needs "
                        "Docker or SageMaker.",
                        "give the command (e.g. ['python3', '/opt/ml/processing/input/code/preprocess.py'], or "
                        "build the request with processing_request(code=...) / pyspark_processing_request), or "
                        "use backend='sagemaker'.")
    for i, inp in enumerate(request.get("ProcessingInputs") or []):
        where = f"ProcessingInputs[{inp.get('InputName', i)}]"
        if inp.get("DatasetDefinition"):
            raise SpecError(f"{where}.DatasetDefinition", "Athena / Redshift dataset definitions run queries in AWS.",
                            "export the data to S3 (or file://) and give an S3Input, or use backend='sagemaker'.")
        s3 = inp.get("S3Input")
        if not s3:
            continue
        if s3.get("S3InputMode", "File") == "Pipe":
            raise SpecError(f"{where}.S3Input.S3InputMode", "Pipe mode is not emulated by the local backend.",
                            "use File locally.")
        local = s3.get("LocalPath") or ""
        if not inp.get("AppManaged") and not (local.startswith(PROCESSING_ROOT) and ".." not in local.split("/")):
            raise SpecError(f"{where}.S3Input.LocalPath", f"{local!r} is not under {PROCESSING_ROOT}.",
                            f"give a path under {PROCESSING_ROOT} (the processing container contract).")
    for i, out in enumerate((request.get("ProcessingOutputConfig") or {}).get("Outputs") or []):
        where = f"ProcessingOutputConfig.Outputs[{out.get('OutputName', i)}]"
        if out.get("FeatureStoreOutput"):
            raise SpecError(f"{where}.FeatureStoreOutput", "Feature Store ingestion needs SageMaker.",
                            "write an S3Output (or file://) instead, or use backend='sagemaker'.")
        s3 = out.get("S3Output") or {}
        local = s3.get("LocalPath") or ""
        if s3 and not out.get("AppManaged") and not (local.startswith(PROCESSING_ROOT)
                                                      and ".." not in local.split("/")):
            raise SpecError(f"{where}.S3Output.LocalPath", f"{local!r} is not under {PROCESSING_ROOT}.",
                            f"give a path under {PROCESSING_ROOT}.")
    if is_spark(request):
        try:
            parse_smspark(list(entry[1:]) + list(app.get("ContainerArguments") or []))
        except ValueError as e:
            raise SpecError("AppSpecification.ContainerEntrypoint", str(e), "fix the smspark-submit command.") from None
        if runtimes.runtime_mode() == "worker" and spark_home() is None:
            raise SpecError("AppSpecification.ContainerEntrypoint",
                            "smspark-submit runs on a local Spark, but the pyspark package is not installed here.",
                            "pip install 'airflow-smdist[local]' (pyspark), or use backend='sagemaker'.")
        if not java_available():
            raise SpecError("AppSpecification.ContainerEntrypoint",
                            "smspark-submit runs on a local Spark, which needs Java (17 or 21), and there is none "
                            "on PATH or in JAVA_HOME.", "install a JDK (e.g. apt-get install openjdk-17-jre-headless).")
        return
    from airflow_smdist.specs.processing import is_python_command  # the request specs: not a supervisor's

    head = entry[0]
    if not (is_python_command(head) or head.startswith(OPT_ML + "/") or shutil.which(head)):
        raise SpecError("AppSpecification.ContainerEntrypoint[0]",
                        f"{head!r} is a command of the container image and is not on this machine.",
                        "use python3 (runs on this interpreter), a script under /opt/ml/processing, a command "
                        "installed here, or backend='sagemaker'.")


class ProcessingSupervisor(JobSupervisor):
    kind = "processing"

    def __init__(self, job_dir: Path) -> None:
        super().__init__(job_dir)
        self.uploaded: dict[str, str] = {}  # "<host>:<uri>" -> size:mtime of the file uploaded there
        self.clashes: set[str] = set()  # URIs two hosts wrote (warned about once)
        self.spark: dict[str, str | None] | None = None  # the Spark run's event-log directories, once launched
        self.event_copies: dict[str, tuple[int, int]] = {}  # event log copy -> size, mtime of what it copied

    # -- staging ---------------------------------------------------------------------------------
    def inputs(self) -> list[dict[str, Any]]:
        return [i for i in self.request.get("ProcessingInputs") or [] if i.get("S3Input") and not i.get("AppManaged")]

    def outputs(self) -> list[dict[str, Any]]:
        return [o for o in (self.request.get("ProcessingOutputConfig") or {}).get("Outputs") or []
                if o.get("S3Output") and not o.get("AppManaged")]

    def processing_job_config(self) -> dict[str, Any]:
        """``/opt/ml/config/processingjobconfig.json``: the whole request as the platform echoes it."""
        req: dict[str, Any] = json.loads(json.dumps(self.request))
        req.pop("Tags", None)
        req["ProcessingJobArn"] = self.state.get("arn") or self.arn()
        app = req["AppSpecification"]
        app.setdefault("ContainerEntrypoint", None)
        app.setdefault("ContainerArguments", None)
        req.setdefault("Environment", {})
        req.setdefault("StoppingCondition", {"MaxRuntimeInSeconds": 86400})
        req["ProcessingResources"]["ClusterConfig"].setdefault("VolumeKmsKeyId", None)
        for inp in req.get("ProcessingInputs") or []:
            s3 = inp.get("S3Input")
            if s3:
                for key, default in (("S3InputMode", "File"), ("S3DataDistributionType", "FullyReplicated"),
                                     ("S3CompressionType", "None")):
                    s3.setdefault(key, default)
        if req.get("ProcessingOutputConfig"):
            req["ProcessingOutputConfig"].setdefault("KmsKeyId", None)
        return req

    def arn(self) -> str:
        region = self.state.get("region", "us-east-1")
        return f"arn:aws:sagemaker:{region}:{ACCOUNT}:processing-job/{self.name.lower()}"

    def stage(self, cluster: contract.Cluster) -> None:
        listings = {}
        for inp in self.inputs():
            s3 = inp["S3Input"]
            if s3.get("S3DataType", "S3Prefix") == "ManifestFile":
                listings[inp["InputName"]] = self.manifest_objects(s3["S3Uri"])
            else:
                listings[inp["InputName"]] = (s3["S3Uri"], self.storage.list(s3["S3Uri"]))
            if not listings[inp["InputName"]][1]:
                raise PlatformError(f"ClientError: No S3 objects found under S3 URL \"{s3['S3Uri']}\" given in input "
                                    f"data source {inp['InputName']!r}. Please ensure that the bucket exists in the "
                                    "selected region, that objects exist under that S3 prefix, and that the role has "
                                    "access.")
        job_config = self.processing_job_config()
        order = cluster.names
        primary = cluster.by_name(cluster.master)
        first: dict[str, tuple[Path, list[Path]]] = {}  # input -> the primary's copy (where, files)
        for host in [primary, *(h for h in cluster.hosts if h is not primary)]:
            hd = self.host_dir(host)
            for sub in ("config", "output", "processing"):
                (hd / sub).mkdir(parents=True, exist_ok=True)
            write_json_atomic(hd / "config" / "resourceconfig.json", contract.resource_config_json(cluster, host))
            write_json_atomic(hd / "config" / "processingjobconfig.json", job_config)
            staged = {}
            for inp in self.inputs():
                s3 = inp["S3Input"]
                prefix, objects = listings[inp["InputName"]]
                sharded = s3.get("S3DataDistributionType") == "ShardedByS3Key"
                if sharded:
                    objects = shard(objects, order.index(host.name), len(order))
                dest = safe_join(hd, container_rel(s3["LocalPath"]))
                dest.mkdir(parents=True, exist_ok=True)
                if host is not primary and not sharded and is_spark(self.request):
                    link_copies(*first[inp["InputName"]], dest)  # an idle host: the primary's copy, linked
                else:
                    first.setdefault(inp["InputName"], (dest, self.storage.download_prefix(prefix, dest, objects)))
                staged[inp["InputName"]] = len(objects)
            for out in self.outputs():
                safe_join(hd, container_rel(out["S3Output"]["LocalPath"])).mkdir(parents=True, exist_ok=True)
            if staged:
                links = (f" (FullyReplicated inputs linked to {primary.label}'s copy: this host runs no Spark here)"
                         if host is not primary and is_spark(self.request) else "")
                self.say(f"{host.label} ({host.address}): "
                         + ", ".join(f"{n}: {c} object(s)" for n, c in staged.items()) + links)

    # -- outputs ---------------------------------------------------------------------------------
    def upload_outputs(self, cluster: contract.Cluster, modes: tuple[str, ...]) -> dict[str, int]:
        """Upload every output of ``modes`` from every host; unchanged files are not uploaded twice."""
        seen, warned = self.uploaded, self.clashes
        counts: dict[str, int] = {}
        writers: dict[str, str] = {}
        for out in self.outputs():
            s3 = out["S3Output"]
            if s3.get("S3UploadMode", "EndOfJob") not in modes:
                continue
            counts.setdefault(out["OutputName"], 0)
            base_uri = s3["S3Uri"].rstrip("/")
            for host in cluster.hosts:
                # opened inside the host's directory: a link the job made out of it is skipped, never followed
                for key, f, st in hostfs.walk(self.host_dir(host), container_rel(s3["LocalPath"]),
                                              say=self.host_skipped(host)):
                    uri = f"{base_uri}/{key}"
                    if uri in writers and writers[uri] != host.label and uri not in warned:
                        warned.add(uri)
                        self.say(f"warning: {s3['LocalPath']}/{key} was written by both {writers[uri]} and "
                                 f"{host.label}; on SageMaker the hosts' files land under one S3 prefix, so the "
                                 "last one uploaded wins: give each host its own file names")
                    writers[uri] = host.label
                    stamp = f"{st.st_size}:{st.st_mtime_ns}"
                    if seen.get(f"{host.label}:{uri}") == stamp:
                        continue
                    self.storage.upload_fileobj(f, uri)
                    seen[f"{host.label}:{uri}"] = stamp
                    counts[out["OutputName"]] += 1
        return counts

    def copy_event_logs(self) -> None:
        """smspark's publisher: Spark writes events to a private directory; they are copied into the
        ``--local-spark-event-logs-dir`` (``.inprogress`` dropped) for the output to upload, each when it
        changed (a copy rewrites the file, and a Continuous output uploads every rewritten file again)."""
        spark = self.spark or {}
        events_tmp, events_dir = spark.get("events_tmp"), spark.get("events_dir")
        if not events_tmp or not events_dir:
            return
        src, dst = Path(events_tmp), Path(events_dir)
        hd = self.host_dir(self.cluster.by_name(self.cluster.master))
        rel_dst = os.path.relpath(dst, hd)
        if rel_dst.startswith(".."):
            self.say(f"warning: the Spark event log directory {dst} is outside the host: not copied")
            return
        # Spark (the job's code) writes src and the job owns dst: neither is followed out of its directory
        for rel, f, st in hostfs.walk(src, say=self.say):
            name = rel.rsplit("/", 1)[-1]
            if name.endswith(".crc"):
                continue
            target = f"{rel_dst}/{rel[:-len(name)]}{name.replace('.inprogress', '')}"
            stamp = (st.st_size, st.st_mtime_ns)
            if self.event_copies.get(target) == stamp and hostfs.exists(hd, target):
                continue  # unchanged since the last copy (Spark's final rename keeps both): nothing to do
            try:
                with hostfs.create(hd, target) as out:
                    shutil.copyfileobj(f, out)
            except OSError as e:
                self.say(f"warning: did not copy the Spark event log {rel}: {e.strerror or e}")
                continue
            self.event_copies[target] = stamp

    def periodic(self) -> None:
        self.copy_event_logs()
        try:
            self.upload_outputs(self.cluster, ("Continuous",))
        except Exception as e:  # noqa: BLE001 - a failed Continuous upload is retried next time
            self.say(f"warning: Continuous upload failed, will retry: {e}")

    # -- running ---------------------------------------------------------------------------------
    def keep_paths(self) -> list[str]:
        """Also the Spark that runs the app and the Java it starts, wherever they are (a distribution unpacked
        under /tmp would be hidden by the host's own /tmp)."""
        homes = [(self.spark or {}).get("home"), os.environ.get("JAVA_HOME")]
        return super().keep_paths() + [h for h in homes if h and os.path.isdir(h)]

    def writable_paths(self) -> list[str]:
        """Also the Spark application's work directories (its event logs, its executors' files)."""
        spark = self.dir / "spark"
        spark.mkdir(exist_ok=True)
        return super().writable_paths() + [str(spark)]

    def network_isolated(self) -> bool:
        return bool((self.request.get("NetworkConfig") or {}).get("EnableNetworkIsolation"))

    def host_env(self, host: contract.Host, base: str, n_cpus: int) -> dict[str, str]:
        env = self.resolved_runtime.apply(self.base_env())
        env.update({"SAGEMAKER_BASE_DIR": base, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS") or str(n_cpus)})
        env.update(self.request.get("Environment") or {})
        return env

    def command(self, entry: list[str], base: str) -> list[str]:
        from airflow_smdist.specs.processing import is_python_command

        cmd = [relocate(t, base) for t in entry]
        if cmd and is_python_command(cmd[0]):
            cmd[0] = self.resolved_runtime.python
        return cmd

    def launch(self, cluster: contract.Cluster, isolation: str) -> None:
        app = self.request["AppSpecification"]
        argv = list(app["ContainerEntrypoint"]) + list(app.get("ContainerArguments") or [])
        n_cpus = max(1, (os.cpu_count() or 1) // len(cluster.hosts))
        if is_spark(self.request):
            self.launch_spark(cluster, isolation, argv, n_cpus)
        else:
            for host in cluster.hosts:
                hd = self.host_dir(host)
                base = OPT_ML if isolation == "namespace" else str(hd)
                cmd = self.command(argv, base)
                self.say(f"{host.label} ({host.address}, {host.instance_type}): {' '.join(argv)}")
                self.start_host(host, cmd, self.host_env(host, base, n_cpus), base)
        self.save(host_pids={label: p.pid for label, p in self.procs.items()})

    def launch_spark(self, cluster: contract.Cluster, isolation: str, argv: list[str], n_cpus: int) -> None:
        primary = cluster.by_name(cluster.master)
        hd = self.host_dir(primary)
        base = OPT_ML if isolation == "namespace" else str(hd)
        opts = parse_smspark([relocate(t, base) for t in argv[1:]])
        outside: Callable[[str], str] = lambda p: relocate(p, str(hd))  # noqa: E731 - the supervisor's view of a container path
        inside: Callable[[str], str] = lambda p: base + p[len(str(hd)):] if p.startswith(str(hd) + "/") else p  # noqa: E731 - the host's
        work = self.dir / "spark" / primary.label
        conf_dir, events_tmp, deps_dir, cwd = work / "conf", work / "events", work / "deps", work / "work"
        for d in (conf_dir, events_tmp, deps_dir, cwd):
            d.mkdir(parents=True, exist_ok=True)
        n_hosts = len(cluster.hosts)
        env = self.host_env(primary, base, n_cpus)
        python = self.resolved_runtime.python
        env.update({"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
                    "SPARK_LOCAL_IP": primary.address, "SPARK_CONF_DIR": str(conf_dir)})
        home = real_home = self.runtime_spark_home()
        self.say_spark_mismatch(home)

        conf: dict[str, str] = {}
        configuration = self.read_configuration(hd)
        s3_jars, core_site = self.spark_s3(real_home, env)
        conf.update(self.apply_configuration(configuration, conf_dir, core_site))
        for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath") if s3_jars else ():
            conf[key] = ":".join([conf[key], *s3_jars] if conf.get(key) else s3_jars)  # the app's own first
        for key in ("spark.master", "spark.submit.deployMode"):
            if conf.pop(key, None) is not None:
                self.say(f"spark-defaults {key} is ignored: smspark-submit sets the master itself "
                         "(yarn on SageMaker, a local master here)")
        events_dir = opts.get("local_spark_event_logs_dir")
        if opts.get("spark_event_logs_s3_uri") and not events_dir:
            self.say("--spark-event-logs-s3-uri without --local-spark-event-logs-dir: the local Spark does not "
                     f"publish it to S3; the event log is kept in the job directory ({events_tmp}) instead")
        if events_dir or opts.get("spark_event_logs_s3_uri"):
            conf["spark.eventLog.enabled"] = "true"
            conf["spark.eventLog.dir"] = "file://" + str(events_tmp)
            # one plain JSON-lines file per app, as the SageMaker Spark 3.x containers write it and its history
            # server reads it (Spark 4 defaults to rolling, zstd-compressed logs); spark-defaults may override
            conf.setdefault("spark.eventLog.rolling.enabled", "false")
            conf.setdefault("spark.eventLog.compress", "false")
        master, why = spark_master(n_hosts, n_cpus, conf)
        if master.startswith("local-cluster"):
            home = self.shadow_spark_home(home, work / "spark-home")
        conf.setdefault("spark.driver.host", primary.address)
        conf.setdefault("spark.driver.bindAddress", primary.address)

        env["SPARK_HOME"] = home
        cmd = [os.path.join(home, "bin", "spark-submit"), "--master", master]
        if opts.get("verbose"):
            cmd.append("--verbose")
        if opts.get("class"):
            cmd += ["--class", opts["class"]]
        for opt in ("jars", "py_files", "files"):
            if opts.get(opt):
                cmd += [f"--{opt.replace('_', '-')}", self.expand_deps(opts[opt], outside, deps_dir, inside)]
        for key in sorted(conf):
            cmd += ["--conf", f"{key}={conf[key]}"]
        cmd += [opts["app"], *opts["app_arguments"]]
        events_out = next((o["S3Output"]["S3Uri"] for o in self.outputs() if events_dir and
                           outside(o["S3Output"]["LocalPath"]).rstrip("/") == outside(events_dir).rstrip("/")), None)
        self.spark = {"events_tmp": str(events_tmp) if "spark.eventLog.dir" in conf else None,
                      "events_dir": outside(events_dir) if events_dir else None, "events_uri": events_out,
                      "master": master, "home": real_home}
        self.save(spark={"master": master, "command": cmd, "primary": primary.label})
        self.say(f"{primary.label} ({primary.address}) is the Spark primary (sorted(hosts)[0]); smspark-submit runs "
                 f"spark-submit there: master {master}: {why}")
        self.say(f"Spark UI on http://{primary.address}:4040 while the app runs (the next free port if taken)")
        for host in cluster.hosts:
            if host is not primary:
                self.host_line(host, f"smspark-submit: worker host of the Spark cluster; the application runs on "
                                     f"the primary {primary.address} ({primary.label}), whose master {master} "
                                     "counts this host's cores")
        self.start_host(primary, cmd, env, str(cwd))

    def runtime_spark_home(self) -> str:
        """The Spark of the job's runtime (its pyspark: the image's Spark version), or the worker's."""
        home = spark_home() if self.resolved_runtime.is_worker else self.resolved_runtime.spark_home()
        if home is None:
            raise PlatformError(f"ClientError: the job's runtime ({self.resolved_runtime.name}) has no pyspark to run "
                                "smspark-submit with")
        return home

    def say_spark_mismatch(self, home: str) -> None:
        """A warning line when the Spark that runs the job is not the image's version (framework_version)."""
        wanted, running = image_spark_version(self.request), spark_version(home)
        if not wanted or not running or running == wanted or running.startswith(wanted + "."):
            return
        if not self.resolved_runtime.is_worker:
            source, fix = (f"the job's runtime ({self.resolved_runtime.name}), the nearest that installs here",
                           "backend='sagemaker' runs the image's own")
        else:
            source = (f"SPARK_HOME={home}" if os.environ.get("SPARK_HOME") == home
                      else f"the worker's pyspark ({self.resolved_runtime.name})")
            fix = f"{runtimes.RUNTIME_ENV}=image (the default) runs it on pyspark {wanted}"
        self.say(f"warning: the image runs Spark {wanted} (framework_version {wanted}) but this job runs on Spark "
                 f"{running}, from {source}: APIs and defaults may differ; {fix}")

    @staticmethod
    def shadow_spark_home(home: str, shadow: Path) -> str:
        """A SPARK_HOME of links to the real one but with its own ``work/``: local-cluster workers put their
        executors' directories under ``$SPARK_HOME/work`` (they take no other), which must stay in the job."""
        shadow.mkdir(parents=True, exist_ok=True)
        (shadow / "work").mkdir(exist_ok=True)
        for entry in os.listdir(home):
            if entry != "work" and not (shadow / entry).exists():
                (shadow / entry).symlink_to(os.path.join(home, entry))
        return str(shadow)

    def say_event_log(self) -> None:
        """Where the Spark UI can be replayed from, once the event log is out."""
        uri = (self.spark or {}).get("events_uri")
        if uri:
            self.say(f"Spark event log: {uri} (the Spark UI of this run: a history server with "
                     "spark.history.fs.logDirectory pointing there, e.g. pyspark's sbin/start-history-server.sh, or "
                     "SageMaker's PySparkProcessor.start_history_server)")

    def host_line(self, host: contract.Host, message: str) -> None:
        with open(self.dir / "logs" / f"{host.label}.jsonl", "a") as f:
            f.write(json.dumps({"t": time.time(), "m": message}) + "\n")

    def expand_deps(self, value: str, outside: Callable[[str], str], deps_dir: Path,
                    inside: Callable[[str], str] = lambda p: p) -> str:
        """smspark's _get_list_of_files: a directory becomes the files in it; s3:// (and file://) URIs are
        fetched into the job directory by the platform (with the job's storage, as smspark does before spark-submit:
        the app's own S3A may have no credentials). Paths as the host sees them
        (``inside``: a namespaced host sees its own files under /opt/ml, not under the job directory)."""
        out = []
        for item in value.split(","):
            if not item:
                continue
            if "://" in item:
                target = deps_dir / os.path.basename(item.split("://", 1)[1].rstrip("/"))
                self.storage.download(item, target)
                out.append(str(target))
                continue
            path = Path(outside(item))
            if path.is_dir():
                files = sorted(str(f) for f in path.iterdir() if f.is_file())
                if not files:
                    raise PlatformError(f"ClientError: smspark-submit found zero files in {item}")
                out += [inside(f) for f in files]
            elif path.is_file():
                out.append(inside(str(path)))
            else:
                raise PlatformError(f"ClientError: smspark-submit: file path {item} does not exist")
        return ",".join(out)

    def read_configuration(self, hd: Path) -> list[dict[str, Any]]:
        path = safe_join(hd, container_rel(CONF_FILE))
        if not path.exists():
            return []
        data = json.loads(path.read_text())
        return data if isinstance(data, list) else [data]

    def spark_s3(self, home: str, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """Spark's ``s3://`` and ``s3a://`` as the SageMaker Spark container has them: the S3A file system of
        hadoop-aws and the AWS SDK bundle (the runtime's, :data:`runtimes.SPARK_S3_PACKAGE`) on the class path,
        and the container's core-site.xml (:data:`CONTAINER_CORE_SITE`) pointed at the job's S3 endpoint
        (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``: path-style, as a local endpoint needs); the app's own
        core-site classification goes over it. Returns (the jars, the core-site defaults); says which in the log."""
        jars = runtimes.spark_s3_jars(os.path.dirname(os.path.realpath(home)))
        if not jars:
            self.say(f"Spark's s3:// and s3a:// paths: no S3 file system here ({self.spark_s3_missing()}): the app "
                     "reaches S3 only through its ProcessingInputs and ProcessingOutputs (/opt/ml/processing); on "
                     "SageMaker the container's S3A serves them")
            return [], {}
        core_site = dict(CONTAINER_CORE_SITE)
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        where = "S3's own endpoint"
        if endpoint:
            core_site.update({"fs.s3a.endpoint": endpoint, "fs.s3a.path.style.access": "true"})
            where = f"the job's S3 endpoint {endpoint} (path-style)"
        versions = " with ".join(f"{name} {runtimes.jar_version(path)}" for name, path in jars.items())
        self.say(f"Spark's s3:// and s3a:// file system: S3A ({versions}, PyPI's {runtimes.SPARK_S3_PACKAGE} jars), "
                 f"as the container's core-site.xml sets it (fs.s3.impl), on {where}")
        if not any(env.get(k) for k in CREDENTIAL_KEYS):
            self.say("warning: the job's Environment has no AWS credentials (a local job never gets the worker's): "
                     "Spark's reads and writes of s3:// paths fail with 'No AWS Credentials provided', where on "
                     "SageMaker the job's role serves them; give the job AWS_ACCESS_KEY_ID and "
                     "AWS_SECRET_ACCESS_KEY in its Environment")
        return list(jars.values()), core_site

    def spark_s3_missing(self) -> str:
        """Why the job's Spark has no S3A jars (as its runtime's build recorded it)."""
        if self.resolved_runtime.is_worker:
            return (f"the worker's pyspark ({runtimes.RUNTIME_ENV}=worker) has no {runtimes.SPARK_S3_PACKAGE} "
                    "beside it")
        return (self.resolved_runtime.spark_s3.get("why")
                or f"the job's runtime has no {runtimes.SPARK_S3_PACKAGE} (built before it was added)")

    def apply_configuration(self, configuration: list[dict[str, Any]], conf_dir: Path,
                            core_site: dict[str, str] | None = None) -> dict[str, str]:
        """Write the classifications into the job's SPARK_CONF_DIR (the core-site classification over
        ``core_site``, the container's own); return the spark-defaults (as --conf)."""
        defaults: dict[str, str] = {}
        env_lines: list[str] = []
        log4j: dict[str, str] = {}
        metrics: dict[str, str] = {}
        site: dict[str, dict[str, str]] = {"core-site.xml": dict(core_site)} if core_site else {}
        for entry in configuration:
            name, props = entry.get("Classification"), entry.get("Properties") or {}
            if name == "spark-defaults":
                defaults.update(props)
            elif name == "spark-env":
                for sub in entry.get("Configurations") or []:
                    if sub.get("Classification") == "export":
                        env_lines += [f"export {k}={v}" for k, v in (sub.get("Properties") or {}).items()]
            elif name == "spark-log4j":
                log4j.update(props)
            elif name == "spark-metrics":
                metrics.update(props)
            elif name in ("core-site", "hive-site", "spark-hive-site"):
                site.setdefault("core-site.xml" if name == "core-site" else "hive-site.xml", {}).update(props)
            elif name in NO_LOCAL_EFFECT:
                self.say(f"configuration {name}: no effect on the local backend (it configures a YARN, Hadoop or "
                         "Hive daemon the local Spark does not run)")
        if env_lines:
            (conf_dir / "spark-env.sh").write_text("\n".join(env_lines) + "\n")
        if log4j:
            (conf_dir / "log4j2.properties").write_text(_log4j2_properties(log4j))
        if metrics:
            (conf_dir / "metrics.properties").write_text("".join(f"{k}={v}\n" for k, v in metrics.items()))
        for fname, props in site.items():
            body = "".join(f"  <property>\n    <name>{_xml(k)}</name>\n    <value>{_xml(v)}</value>\n  </property>\n"
                           for k, v in props.items())
            (conf_dir / fname).write_text('<?xml version="1.0"?>\n<configuration>\n' + body + "</configuration>\n")
        applied = [e["Classification"] for e in configuration
                   if e.get("Classification") and e["Classification"] not in NO_LOCAL_EFFECT]
        if applied:
            self.say(f"configuration applied: {', '.join(applied)}")
        return defaults

    def failure_reason(self, host: contract.Host, code: int) -> str:
        for t in self.readers:
            t.join(timeout=5)
        path = self.dir / "logs" / f"{host.label}.jsonl"
        tail = [json.loads(x)["m"] for x in path.read_text().splitlines()[-400:]] if path.exists() else []
        lines = [x for x in tail if x.strip() and not SPARK_LOG_LINE.match(x)]
        error_lines = error_excerpt(lines)  # up to the last traceback's exception line, else the tail
        sig = f" (killed by signal {-code})" if code < 0 else ""
        what = "spark-submit" if is_spark(self.request) else "the processing command"
        text = (f"AlgorithmError: {what} failed with exit code {code}{sig} on host {host.label} ({host.address}):\n"
                + "\n".join(error_lines))
        return fit_failure_reason(text)

    def exit_message(self, cluster: contract.Cluster) -> str | None:
        parts = []
        for host in sorted(cluster.hosts, key=lambda h: cluster.rank(h)):
            # read inside the host's directory (a message file linked out of it is not read)
            text = hostfs.read_text(self.host_dir(host), "output/message", EXIT_MESSAGE_LIMIT * 4)
            if text is not None:
                parts.append(text)
        text = "".join(parts)
        return text.encode("utf-8")[:EXIT_MESSAGE_LIMIT].decode("utf-8", "ignore") or None

    # -- main ------------------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        (self.dir / "logs").mkdir(exist_ok=True)
        status, reason, stage_done = "Failed", None, False
        cluster: contract.Cluster | None = None  # (none when its hosts could not be made: the reason says why)
        try:
            self.cluster = cluster = self.build_cluster(resource_config(self.request))
            self.save(status="InProgress", started=time.time(), arn=self.arn(),
                      hosts=[{"label": h.label, "address": h.address, "instance_type": h.instance_type}
                             for h in cluster.hosts])
            if self.isolation == "none":
                self.say("/opt/ml paths in the entry point and arguments are relocated into each host's directory")
            self.secondary("Downloading", "Downloading input data")
            self.stage(cluster)
            stage_done = True
            self.runtime = runtimes.resolve(self.request["AppSpecification"].get("ImageUri"),
                                            local_root=self.store.root, job_dir=self.dir,
                                            environment=self.request.get("Environment") or {},
                                            declared=self.state.get("runtimes") or {}, log=self.say,
                                            field_name="AppSpecification.ImageUri")
            self.save(runtime=self.runtime.to_json())
            if self.stop_requested or (self.dir / "stop").exists():
                status = "Stopped"
            else:
                self.secondary("Processing", f"Processing on {len(cluster.hosts)} host(s): "
                               + ", ".join(f"{h.label}={h.address}" for h in cluster.hosts))
                self.launch(cluster, self.isolation)
                status, secondary, reason = self.watch(cluster)
                if secondary == "MaxRuntimeExceeded":
                    self.say(f"the job exceeded MaxRuntimeInSeconds={self.max_runtime():.0f} and was stopped")
                for t in self.readers:
                    t.join(timeout=10)
            self.copy_event_logs()
            modes = ("Continuous", "EndOfJob") if status == "Completed" else ("Continuous",)
            if status == "Completed":
                self.secondary("Uploading", "Uploading output data")
            elif any(o["S3Output"].get("S3UploadMode", "EndOfJob") == "EndOfJob" for o in self.outputs()):
                self.say(f"job {status}: EndOfJob outputs are not uploaded")
            counts = self.upload_outputs(cluster, modes)
            if counts:
                self.say("uploaded: " + ", ".join(f"{n}: {c} file(s)" for n, c in counts.items()))
            self.say_event_log()
        except Exception as e:  # noqa: BLE001 - any platform error fails the job with its reason
            self.log.write(traceback.format_exc())
            if self.procs:
                self.end_all(5)
            status = "Failed"
            if isinstance(e, (PlatformError, runtimes.RuntimeSetupError)):
                reason = str(e)
            else:  # staging reads the user's data (their error); after it, ours
                reason = f"{'InternalServerError' if stage_done else 'ClientError'}: {type(e).__name__}: {e}"
        self.secondary(status, {"Completed": "Processing job completed", "Failed": "Processing job failed",
                                "Stopped": "Processing job stopped"}[status])
        self.state["transitions"][-1]["end"] = time.time()
        self.save(status=status, failure_reason=reason, exit_message=cluster and self.exit_message(cluster),
                  ended=time.time())
        return 0 if status == "Completed" else 1


def link_copies(source: Path, files: list[Path], dest: Path) -> None:
    """``files`` (under ``source``) at the same places under ``dest``: hard links (no second download or copy
    of the data), or copies where the file system has none."""
    for f in files:
        target = dest / f.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(f, target)
        except OSError:
            shutil.copyfile(f, target)


def _megabytes(value: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", str(value).lower())
    if not m:
        return 1024
    n, unit = int(m.group(1)), m.group(2)
    return max(1, {"k": n // 1024, "": n // (1024 * 1024), "m": n, "g": n * 1024, "t": n * 1024 * 1024}[unit])


def _xml(text: str) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _log4j2_properties(props: dict[str, str]) -> str:
    """A log4j2.properties: Spark's default console setup, then the classification's properties. log4j 1
    style root settings (``log4j.rootCategory=WARN, console``, as older Spark containers take them) set the
    root level; ``log4j.logger.<name>=LEVEL`` a logger's level."""
    lines = ["rootLogger.level = info", "rootLogger.appenderRef.stdout.ref = console",
             "appender.console.type = Console", "appender.console.name = console",
             "appender.console.target = SYSTEM_ERR", "appender.console.layout.type = PatternLayout",
             "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"]
    n = 0
    for key, value in props.items():
        if key in ("log4j.rootCategory", "log4j.rootLogger"):
            lines.append(f"rootLogger.level = {value.split(',')[0].strip().lower()}")
        elif key.startswith("log4j.logger."):
            n += 1
            lines += [f"logger.smdist{n}.name = {key[len('log4j.logger.'):]}",
                      f"logger.smdist{n}.level = {value.split(',')[0].strip().lower()}"]
        elif key.startswith("log4j."):
            continue  # appender settings of log4j 1 have no log4j2 counterpart here
        else:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def describe(backend: LocalBackend, request: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """DescribeProcessingJob's response for a local job."""
    name = request["ProcessingJobName"]
    d: dict[str, Any] = {
        "ProcessingJobName": name,
        "ProcessingJobArn": backend.arn("processing", name),
        "ProcessingJobStatus": state["status"],
        "ProcessingResources": request["ProcessingResources"],
        "AppSpecification": request["AppSpecification"],
        "RoleArn": request.get("RoleArn"),
        "CreationTime": dt(state.get("created")),
        "LastModifiedTime": last_modified(state),
    }
    for key in ("ProcessingInputs", "ProcessingOutputConfig", "StoppingCondition", "Environment", "NetworkConfig",
                "ExperimentConfig"):
        if request.get(key):
            d[key] = request[key]
    if state.get("started"):
        d["ProcessingStartTime"] = dt(state["started"])
    if state.get("ended"):
        d["ProcessingEndTime"] = dt(state["ended"])
    if state.get("failure_reason"):
        d["FailureReason"] = state["failure_reason"]
    if state.get("exit_message"):
        d["ExitMessage"] = state["exit_message"]
    return d


def main(argv: list[str] | None = None) -> int:
    return serve(ProcessingSupervisor, argv)


if __name__ == "__main__":
    sys.exit(main())
