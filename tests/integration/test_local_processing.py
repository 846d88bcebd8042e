"""The local backend runs processing requests for real: the container contract, sharding, outputs only
from completed jobs, PySpark on a real local Spark (instance count, configuration, dependencies, event
logs), failures with a clear reason, stop, and the operators under Airflow.

Each Spark start costs seconds on a small machine, so the two Spark jobs (one that succeeds and checks
everything it can from inside, one that fails) run at once in one module fixture and are shared."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
import uuid
import zipfile
from types import SimpleNamespace

import pytest

from airflow_smdist.backends.base import BackendError, JobNotFound
from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.processing import build_processing, build_pyspark_processing, upload_plan
from airflow_smdist.specs.validate import service_model
from jobs import wait

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
TERMINAL = ("Completed", "Failed", "Stopped")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"




def files_under(uri: str) -> dict[str, str]:
    root = uri[len("file://"):]
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = open(p, errors="replace").read()
    return out


def host_log(backend, name, host) -> list[str]:
    events, _ = backend.log_events("processing", name)
    return [e.message for e in events if e.host == host]


def describe_members_are_the_apis(d: dict) -> None:
    shape = service_model().operation_model("DescribeProcessingJob").output_shape
    assert set(d) <= set(shape.members), set(d) - set(shape.members)
    assert set(shape.required_members) <= set(d)


# ---- the Spark jobs (one module fixture; both run at once) ------------------------------------------------------
SPARK_APP = textwrap.dedent('''
    import glob, json, os, sys
    import pyspark
    from pyspark import SparkFiles
    from pyspark.sql import SparkSession
    import smdist_helper  # shipped with --py-files

    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    spark = SparkSession.builder.appName("smdist-contract").getOrCreate()
    sc = spark.sparkContext
    base = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")
    raw = spark.read.csv(args["--input"], header=True, inferSchema=True)
    facts = {
        "argv": sys.argv[1:],
        "master": sc.master,
        "default_parallelism": sc.defaultParallelism,
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "jars": sc.getConf().get("spark.jars", ""),
        "helper": smdist_helper.VALUE,
        "lookup": open(SparkFiles.get("lookup.txt")).read().strip(),
        "spark_env": os.environ.get("SMDIST_FROM_SPARK_ENV"),
        "core_site": sc._jsc.hadoopConfiguration().get("smdist.test.key"),
        "request_env": os.environ.get("STAGE"),
        "resourceconfig": json.load(open(os.path.join(base, "config", "resourceconfig.json"))),
        "jobconfig": json.load(open(os.path.join(base, "config", "processingjobconfig.json"))),
        "opt_ml": os.path.isfile("/opt/ml/config/resourceconfig.json"),
        "sharded": sorted(os.path.basename(p) for p in glob.glob(os.path.join(args["--shards"], "*"))),
        "rows": raw.count(),
        "row_sum": raw.groupBy().sum("value").first()[0],
        "executor_tasks": sc.parallelize(range(100), sc.defaultParallelism).map(lambda x: x * 2).sum(),
        "pyspark": pyspark.__version__,
        "driver_python": sys.executable,
        "executor_python": sc.parallelize([0], 1).map(lambda _x: __import__("sys").executable).first(),
    }
    out = args["--output"]
    with open(os.path.join(out, "facts.json"), "w") as f:
        json.dump(facts, f)
    raw.groupBy("key").count().coalesce(1).write.mode("overwrite").option("header", True).csv(args["--agg"])
    with open(os.path.join(base, "output", "message"), "w") as f:
        f.write(f"rows={facts['rows']}")
    print("facts written", flush=True)
    spark.stop()
''')

FAILING_APP = textwrap.dedent('''
    import os, sys
    from pyspark.sql import SparkSession

    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    spark = SparkSession.builder.appName("smdist-fail").getOrCreate()
    n = spark.read.csv(args["--input"], header=True).where("value > 1000000").count()
    with open(os.path.join(args["--output"], "partial.txt"), "w") as f:
        f.write("written before the failure")
    base = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")
    with open(os.path.join(base, "output", "message"), "w") as f:
        f.write("no rows survived the filter")
    raise ValueError(f"no rows survived the filter (kept {n})")
''')


#: a Java exception PySpark does not convert: Py4JJavaError, whose message is "An error occurred while calling
#: ..." and, on the next line, ": <the Java exception>" before the JVM's stack frames
JAVA_FAILING_APP = textwrap.dedent('''
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.appName("smdist-java-fail").getOrCreate()
    spark.sparkContext._jvm.java.io.FileInputStream("/opt/ml/processing/input/no-such-file.csv")
''')


@pytest.fixture(scope="module")
def spark_jobs(tmp_path_factory):
    """Both Spark jobs run in their image's runtime (framework_version 3.5: pyspark 3.5.x), as by default."""
    if sys.version_info >= (3, 13):  # a runtime is built on the worker's Python
        pytest.skip("the Spark 3.5 image's runtime does not build on Python 3.13 here: PySpark 3.5 needs numpy < 2, "
                    "which has no wheel for 3.13 (the job says so: 'no local runtime for ...')")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SMDIST_LOCAL_RUNTIME", "image")
        return _spark_jobs(tmp_path_factory)


def _spark_jobs(tmp_path_factory):
    pytest.importorskip("pyspark")
    tmp = tmp_path_factory.mktemp("spark")
    backend = LocalBackend(tmp / "jobs")
    (tmp / "app.py").write_text(SPARK_APP)
    (tmp / "fail.py").write_text(FAILING_APP)
    (tmp / "java_fail.py").write_text(JAVA_FAILING_APP)
    (tmp / "smdist_helper.py").write_text("VALUE = 'from --py-files'\n")
    (tmp / "lookup.txt").write_text("from --files\n")
    with zipfile.ZipFile(tmp / "smdist-udfs.jar", "w") as z:
        z.writestr("smdist/hello.txt", "hello")
    data = tmp / "data"
    (data / "raw").mkdir(parents=True)
    (data / "shards").mkdir()
    for i in range(4):
        (data / "raw" / f"part-{i}.csv").write_text("key,value\n" + "".join(f"k{j % 3},{i * 100 + j}\n"
                                                                           for j in range(50)))
        (data / "shards" / f"s{i}.txt").write_text(str(i))
    store = f"file://{tmp}/store"
    ok_name, fail_name, java_name = unique("spark-ok"), unique("spark-fail"), unique("spark-java")
    ok = build_pyspark_processing(
        job_name=ok_name, role=ROLE, submit_app=str(tmp / "app.py"), framework_version="3.5", instance_count=2,
        submit_py_files=[str(tmp / "smdist_helper.py")], submit_files=[str(tmp / "lookup.txt")],
        submit_jars=[str(tmp / "smdist-udfs.jar")], code_location=store,
        inputs={"raw": {"source": f"file://{data}/raw", "destination": "/opt/ml/processing/input/raw"},
                "shards": {"source": f"file://{data}/shards/", "destination": "/opt/ml/processing/shards",
                           "distribution": "ShardedByS3Key"}},
        outputs={"facts": f"{store}/out/{ok_name}/facts", "agg": f"{store}/out/{ok_name}/agg"},
        arguments=["--input", "/opt/ml/processing/input/raw", "--shards", "/opt/ml/processing/shards",
                   "--output", "/opt/ml/processing/output/facts", "--agg", "/opt/ml/processing/output/agg"],
        configuration=[
            {"Classification": "spark-defaults", "Properties": {"spark.sql.shuffle.partitions": 3,
                                                                "spark.master": "yarn"}},
            {"Classification": "spark-env", "Properties": {}, "Configurations": [
                {"Classification": "export", "Properties": {"SMDIST_FROM_SPARK_ENV": "exported"}}]},
            {"Classification": "core-site", "Properties": {"smdist.test.key": "from-core-site"}},
            {"Classification": "spark-log4j", "Properties": {"rootLogger.level": "warn"}},
            {"Classification": "yarn-site", "Properties": {"yarn.nodemanager.vmem-check-enabled": "false"}},
        ],
        spark_event_logs_s3_uri=f"{store}/events/{ok_name}", env={"STAGE": "contract"})
    fail = build_pyspark_processing(
        job_name=fail_name, role=ROLE, submit_app=str(tmp / "fail.py"), framework_version="3.5", code_location=store,
        inputs={"raw": f"file://{data}/raw"}, outputs={"partial": f"{store}/out/{fail_name}/partial"},
        arguments=["--input", "/opt/ml/processing/input/raw", "--output", "/opt/ml/processing/output/partial"])
    java_fail = build_pyspark_processing(job_name=java_name, role=ROLE, submit_app=str(tmp / "java_fail.py"),
                                         framework_version="3.5", code_location=store)
    # the same framework_version on the worker's own pyspark (SMDIST_LOCAL_RUNTIME=worker), which may be another
    (tmp / "version.py").write_text("import pyspark\nprint('running pyspark', pyspark.__version__, flush=True)\n")
    version_name = unique("spark-version")
    version = build_pyspark_processing(job_name=version_name, role=ROLE, submit_app=str(tmp / "version.py"),
                                       framework_version="3.5", code_location=store)
    for plan in (ok, fail, version, java_fail):
        upload_plan(plan)
        with pytest.MonkeyPatch.context() as mp:
            if plan is version:
                mp.setenv("SMDIST_LOCAL_RUNTIME", "worker")
                mp.delenv("SPARK_HOME", raising=False)
            backend.submit("processing", plan.request)
    started = time.time()
    described = {n: wait(backend, "processing", n) for n in (ok_name, fail_name, version_name, java_name)}
    return SimpleNamespace(backend=backend, ok=ok, fail=fail, ok_name=ok_name, fail_name=fail_name, store=store,
                           java_name=java_name,
                           version_name=version_name, described=described, seconds=time.time() - started, data=data)


@pytest.fixture(scope="module")
def spark_ok(spark_jobs):
    d = spark_jobs.described[spark_jobs.ok_name]
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    facts = json.loads(files_under(f"{spark_jobs.store}/out/{spark_jobs.ok_name}/facts")["facts.json"])
    return d, facts


@pytest.mark.slow
def test_spark_app_runs_on_a_local_spark_honouring_the_instance_count(spark_jobs, spark_ok):
    d, facts = spark_ok
    slots = 2 * max(1, (os.cpu_count() or 1) // 2)  # 2 hosts x their share of the cores
    assert facts["master"] == f"local[{slots}]" and facts["default_parallelism"] == slots
    assert facts["executor_tasks"] == sum(range(100)) * 2
    assert facts["rows"] == 200 and facts["row_sum"] == sum(i * 100 + j for i in range(4) for j in range(50))
    # framework_version 3.5: the image's pyspark, in the job's runtime on the driver and the executors alike
    assert facts["pyspark"].startswith("3.5."), facts["pyspark"]
    assert facts["driver_python"] == facts["executor_python"] and "/runtimes/" in facts["driver_python"]
    state = json.loads((spark_jobs.backend.job_dir("processing", spark_jobs.ok_name) / "state.json").read_text())
    assert list(state["host_pids"]) == ["algo-1"]  # only the primary runs spark-submit, as smspark-submit does
    assert state["spark"]["primary"] == "algo-1"
    worker = host_log(spark_jobs.backend, spark_jobs.ok_name, "algo-2")
    assert any("worker host" in line for line in worker)
    assert "facts written" in host_log(spark_jobs.backend, spark_jobs.ok_name, "algo-1")  # app stdout streamed


@pytest.mark.slow
def test_spark_configuration_and_dependencies_are_applied(spark_jobs, spark_ok):
    _d, facts = spark_ok
    assert facts["shuffle_partitions"] == "3"  # spark-defaults
    assert facts["spark_env"] == "exported"  # spark-env export
    assert facts["core_site"] == "from-core-site"  # core-site.xml in SPARK_CONF_DIR
    assert facts["helper"] == "from --py-files" and facts["lookup"] == "from --files"
    assert "smdist-udfs.jar" in facts["jars"]
    assert facts["argv"][:2] == ["--input", facts["argv"][1]] and facts["argv"][1].endswith("/processing/input/raw")
    assert facts["request_env"] == "contract"
    log = host_log(spark_jobs.backend, spark_jobs.ok_name, "algo-1")
    # spark-log4j rootLogger.level=warn: Spark's own INFO lines are gone from the stream
    assert not [line for line in log if " INFO " in line and line[:2].isdigit()]
    platform = host_log(spark_jobs.backend, spark_jobs.ok_name, "platform")
    assert any("spark.master is ignored" in line for line in platform)
    assert any("yarn-site: no effect on the local backend" in line for line in platform)


@pytest.mark.slow
def test_processing_contract_files_and_sharding_inside_the_spark_job(spark_jobs, spark_ok):
    d, facts = spark_ok
    rc, jc = facts["resourceconfig"], facts["jobconfig"]
    assert rc["current_host"] == rc["hosts"][0] and len(rc["hosts"]) == 2
    expected = ["algo-1", "algo-2"] if launcher.namespace_prefix() is not None else rc["hosts"]
    assert rc["hosts"] == expected and all(h.startswith(("algo-", "127.")) for h in rc["hosts"])
    assert rc["current_instance_type"] == "ml.m5.xlarge"
    assert jc["ProcessingJobName"] == spark_jobs.ok_name and jc["ProcessingJobArn"] == d["ProcessingJobArn"]
    assert jc["ProcessingInputs"] == spark_jobs.ok.request["ProcessingInputs"]
    assert jc["AppSpecification"]["ContainerEntrypoint"][0] == "smspark-submit"
    if launcher.namespace_prefix() is not None:
        assert facts["opt_ml"]  # the host directory is bound on /opt/ml
    # ShardedByS3Key: the primary (rank 0) holds keys 0 and 2 of the 4; the other host the rest
    assert facts["sharded"] == ["s0.txt", "s2.txt"]
    other = spark_jobs.backend.job_dir("processing", spark_jobs.ok_name) / "hosts" / "algo-2" / "processing" / "shards"
    assert sorted(os.listdir(other)) == ["s1.txt", "s3.txt"]


@pytest.mark.slow
def test_spark_outputs_event_log_and_exit_message(spark_jobs, spark_ok):
    d, _facts = spark_ok
    describe_members_are_the_apis(d)
    assert d["ExitMessage"] == "rows=200"
    agg = files_under(f"{spark_jobs.store}/out/{spark_jobs.ok_name}/agg")
    part = next(v for k, v in agg.items() if k.startswith("part-") and k.endswith(".csv"))
    assert sorted(part.strip().splitlines()[1:]) == ["k0,68", "k1,68", "k2,64"]
    events = files_under(f"{spark_jobs.store}/events/{spark_jobs.ok_name}")
    assert len(events) == 1 and not next(iter(events)).endswith(".inprogress")
    lines = [json.loads(x) for x in next(iter(events.values())).splitlines()]
    assert any(e["Event"] == "SparkListenerApplicationStart" and e["App Name"] == "smdist-contract" for e in lines)
    assert any(e["Event"] == "SparkListenerApplicationEnd" for e in lines)
    platform = host_log(spark_jobs.backend, spark_jobs.ok_name, "platform")
    assert any(f"Spark event log: {spark_jobs.store}/events/{spark_jobs.ok_name}" in m for m in platform)
    assert d["ProcessingStartTime"] <= d["ProcessingEndTime"]


@pytest.mark.slow
def test_a_spark_other_than_the_images_is_named_in_a_warning(spark_jobs, spark_ok):
    """framework_version 3.5 on the worker's pyspark (SMDIST_LOCAL_RUNTIME=worker): the job runs, and its log warns
    with both versions; the job on its image's runtime (pyspark 3.5.x) has no such warning."""
    import pyspark

    if pyspark.__version__.startswith("3.5."):
        pytest.skip("the worker's pyspark is the image's version")
    d = spark_jobs.described[spark_jobs.version_name]
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    assert f"running pyspark {pyspark.__version__}" in host_log(spark_jobs.backend, spark_jobs.version_name, "algo-1")
    platform = host_log(spark_jobs.backend, spark_jobs.version_name, "platform")
    warnings = [m for m in platform if m.startswith("warning: the image runs Spark")]
    assert warnings == [
        f"warning: the image runs Spark 3.5 (framework_version 3.5) but this job runs on Spark {pyspark.__version__}, "
        "from the worker's pyspark (the Airflow worker's interpreter (SMDIST_LOCAL_RUNTIME=worker)): APIs and "
        "defaults may differ; SMDIST_LOCAL_RUNTIME=image (the default) runs it on pyspark 3.5"], platform
    ok_platform = host_log(spark_jobs.backend, spark_jobs.ok_name, "platform")
    assert not [m for m in ok_platform if "runs on Spark" in m], ok_platform


@pytest.mark.slow
def test_failing_spark_app_fails_with_its_exit_code_and_error_and_uploads_nothing(spark_jobs):
    d = spark_jobs.described[spark_jobs.fail_name]
    assert d["ProcessingJobStatus"] == "Failed"
    reason = d["FailureReason"]
    assert reason.startswith("AlgorithmError: spark-submit failed with exit code 1 on host algo-1")
    assert "ValueError: no rows survived the filter (kept 0)" in reason
    assert " INFO " not in reason  # Spark's own log lines are left out; the traceback is what shows
    assert len(reason) <= 1024
    assert d["ExitMessage"] == "no rows survived the filter"
    assert not os.path.exists(f"{spark_jobs.store[len('file://'):]}/out/{spark_jobs.fail_name}")  # EndOfJob: none
    describe_members_are_the_apis(d)


@pytest.mark.slow
def test_a_java_exception_in_a_spark_app_is_named_in_the_failure_reason(spark_jobs):
    """Py4JJavaError's first line says only which call failed; the Java exception is on the next line, then the
    JVM's stack frames. The reason carries the Java exception, not the frames."""
    d = spark_jobs.described[spark_jobs.java_name]
    assert d["ProcessingJobStatus"] == "Failed"
    reason = d["FailureReason"]
    assert "py4j.protocol.Py4JJavaError: An error occurred while calling None.java.io.FileInputStream." in reason, \
        reason
    assert "java.io.FileNotFoundException: /opt/ml/processing/input/no-such-file.csv (No such file or directory)" \
        in reason, reason
    assert "\tat " not in reason and "java.base/" not in reason, reason  # the JVM's frames are left out
    assert len(reason) <= 1024


# ---- plain script jobs (cheap: no Spark) ------------------------------------------------------------------------
CONTRACT_SCRIPT = textwrap.dedent('''
    import json, os, sys
    base = os.environ["SAGEMAKER_BASE_DIR"]
    rc = json.load(open(os.path.join(base, "config", "resourceconfig.json")))
    jc = json.load(open(os.path.join(base, "config", "processingjobconfig.json")))
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    def listing(d):
        return sorted(os.path.relpath(os.path.join(p, f), d) for p, _, fs in os.walk(d) for f in fs)
    rank = rc["hosts"].index(rc["current_host"])
    facts = {"argv": sys.argv[1:], "executable": sys.executable, "cwd": os.getcwd(), "rc": rc, "jc": jc,
             "rank": rank, "shards": listing(args["--shards"]), "lookup": listing(args["--lookup"]),
             "out_exists": os.path.isdir(args["--out"]), "stage": os.environ.get("STAGE"),
             "opt_ml": os.path.realpath(base) == os.path.realpath("/opt/ml")}
    with open(os.path.join(args["--out"], f"host-{rank}.json"), "w") as f:
        json.dump(facts, f)
    with open(os.path.join(base, "output", "message"), "w") as f:
        f.write(f"[{rank}]")
    print(f"host {rank} done", flush=True)
''')


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(tmp_path / "jobs")


@pytest.fixture
def script_data(tmp_path):
    d = tmp_path / "data"
    (d / "shards" / "nested").mkdir(parents=True)
    for i in range(6):
        (d / "shards" / f"p{i}.csv").write_text(f"{i}\n")
    (d / "shards" / "nested" / "p6.csv").write_text("6\n")
    (d / "lookup").mkdir()
    (d / "lookup" / "table.txt").write_text("t\n")
    return d


def script_job(backend, tmp_path, script_text, *, name, instance_count=1, inputs=None, outputs=None,
               arguments=None, **kw):
    script = tmp_path / f"{name}.py"
    script.write_text(script_text)
    plan = build_processing(job_name=name, role=ROLE, image_uri=IMAGE, code=str(script),
                            code_location=f"file://{tmp_path}/code", instance_count=instance_count,
                            inputs=inputs, outputs=outputs, arguments=arguments, **kw)
    upload_plan(plan)
    backend.submit("processing", plan.request)
    return plan


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["namespace", "none"])
def test_script_job_contract_sharding_and_outputs_of_every_host(backend, tmp_path, script_data, monkeypatch, isolation):
    if isolation == "namespace" and launcher.namespace_prefix() is None:
        pytest.skip("this OS allows no private mount namespace here")
    if isolation == "none":
        monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", "none")
    name = unique("script")
    out_uri = f"file://{tmp_path}/out/{name}"
    plan = script_job(backend, tmp_path, CONTRACT_SCRIPT, name=name, instance_count=3, env={"STAGE": "contract"},
                      inputs={"shards": {"source": f"file://{script_data}/shards", "distribution": "ShardedByS3Key",
                                         "destination": "/opt/ml/processing/input/shards"},
                              "lookup": {"source": f"file://{script_data}/lookup/",
                                         "destination": "/opt/ml/processing/lookup"}},
                      outputs={"facts": out_uri},
                      arguments=["--shards", "/opt/ml/processing/input/shards", "--lookup", "/opt/ml/processing/lookup",
                                 "--out", "/opt/ml/processing/output/facts"])
    d = wait(backend, "processing", name, timeout=120)
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    describe_members_are_the_apis(d)
    uploaded = files_under(out_uri)
    assert sorted(uploaded) == ["host-0.json", "host-1.json", "host-2.json"]  # every host's output, one prefix
    hosts = [json.loads(uploaded[f"host-{r}.json"]) for r in range(3)]
    job_dir = backend.job_dir("processing", name)
    addresses = hosts[0]["rc"]["hosts"]
    if isolation == "namespace":
        assert addresses == ["algo-1", "algo-2", "algo-3"]
    else:
        assert len(set(addresses)) == 3 and all(a.startswith("127.") for a in addresses)
    for rank, h in enumerate(hosts):
        assert h["rc"]["current_host"] == addresses[rank] and h["rc"]["hosts"] == addresses
        assert h["jc"]["ProcessingJobName"] == name and h["jc"]["ProcessingInputs"] == plan.request["ProcessingInputs"]
        assert (h["jc"]["AppSpecification"]["ContainerEntrypoint"]
                == plan.request["AppSpecification"]["ContainerEntrypoint"])
        assert h["executable"] == sys.executable  # python3 is this interpreter
        assert h["out_exists"] and h["stage"] == "contract" and h["lookup"] == ["table.txt"]
        if isolation == "none":  # container paths relocated into the host's directory
            assert h["argv"][1] == str(job_dir / "hosts" / f"algo-{rank + 1}" / "processing" / "input" / "shards")
        else:
            assert h["argv"][1] == "/opt/ml/processing/input/shards" and h["opt_ml"]
    # ShardedByS3Key: disjoint shares of whole objects, key paths kept, together all 7 (key i -> host i % 3)
    shards = [set(h["shards"]) for h in hosts]
    assert shards[0] | shards[1] | shards[2] == {f"p{i}.csv" for i in range(6)} | {"nested/p6.csv"}
    assert sum(len(s) for s in shards) == 7 and sorted(len(s) for s in shards) == [2, 2, 3]
    assert d["ExitMessage"] == "[0][1][2]"
    if isolation == "none":
        assert any("hosts run without namespaces" in m and "share /tmp" in m
                   for m in host_log(backend, name, "platform"))
    assert "host 0 done" in host_log(backend, name, "algo-1")


@pytest.mark.slow
def test_failing_script_uploads_no_end_of_job_output_but_its_continuous_one(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_CHECKPOINT_SYNC", "0.3")
    name = unique("sfail")
    script = textwrap.dedent('''
        import os, sys, time
        open(os.path.join(sys.argv[2], "result.csv"), "w").write("1\\n")
        open(os.path.join(sys.argv[4], "progress.txt"), "w").write("50%")
        time.sleep(3)
        print("Traceback (most recent call last):", file=sys.stderr)
        print("RuntimeError: the input had no header row", file=sys.stderr, flush=True)
        sys.exit(3)
    ''')
    result_uri, progress_uri = f"file://{tmp_path}/out/result", f"file://{tmp_path}/out/progress"
    script_job(backend, tmp_path, script, name=name,
               outputs={"result": result_uri,
                        "progress": {"destination": progress_uri, "s3_upload_mode": "Continuous"}},
               arguments=["--result", "/opt/ml/processing/output/result", "--progress",
                          "/opt/ml/processing/output/progress"])
    deadline, seen_while_running = time.time() + 30, False
    while time.time() < deadline:
        status = backend.describe("processing", name)["ProcessingJobStatus"]
        if os.path.exists(f"{tmp_path}/out/progress/progress.txt") and status == "InProgress":
            seen_while_running = True
            break
        time.sleep(0.1)
    assert seen_while_running, "a Continuous output is uploaded while the job runs"
    d = wait(backend, "processing", name, timeout=60)
    assert d["ProcessingJobStatus"] == "Failed"
    assert d["FailureReason"].startswith(
        "AlgorithmError: the processing command failed with exit code 3 on host algo-1")
    assert "RuntimeError: the input had no header row" in d["FailureReason"]
    assert not os.path.exists(f"{tmp_path}/out/result")  # EndOfJob output of a failed job: nothing


@pytest.mark.slow
def test_stop_ends_every_host_and_uploads_nothing(backend, tmp_path):
    name = unique("sstop")
    script = ("import os, sys, time\nopen(os.path.join(sys.argv[1], 'x'), 'w').write('x')\n"
              "print('sleeping', flush=True)\ntime.sleep(300)\n")
    script_job(backend, tmp_path, script, name=name, instance_count=2, outputs={"o": f"file://{tmp_path}/out/o"},
               arguments=["/opt/ml/processing/output/o"])
    deadline = time.time() + 60
    while time.time() < deadline and not all("sleeping" in host_log(backend, name, h) for h in ("algo-1", "algo-2")):
        time.sleep(0.2)
    backend.stop("processing", name)
    assert backend.describe("processing", name)["ProcessingJobStatus"] in ("Stopping", "Stopped")
    d = wait(backend, "processing", name, timeout=60)
    assert d["ProcessingJobStatus"] == "Stopped" and "FailureReason" not in d
    state = json.loads((backend.job_dir("processing", name) / "state.json").read_text())
    assert len(state["host_pids"]) == 2
    for pid in state["host_pids"].values():
        assert launcher.tree(pid) == []
    assert not os.path.exists(f"{tmp_path}/out/o")
    backend.stop("processing", name)  # stopping a stopped job is a no-op


@pytest.mark.slow
def test_max_runtime_stops_the_job(backend, tmp_path):
    name = unique("stime")
    script_job(backend, tmp_path, "import time\ntime.sleep(120)\n", name=name, max_runtime_in_seconds=2)
    started = time.time()
    d = wait(backend, "processing", name, timeout=60)
    assert d["ProcessingJobStatus"] == "Stopped" and time.time() - started < 40
    assert any("MaxRuntimeInSeconds=2" in m for m in host_log(backend, name, "platform"))


@pytest.mark.slow
def test_missing_input_fails_with_a_client_error(backend, tmp_path):
    name = unique("snoin")
    script_job(backend, tmp_path, "print(1)\n", name=name, inputs={"raw": f"file://{tmp_path}/nothing-here/"})
    d = wait(backend, "processing", name, timeout=60)
    assert d["ProcessingJobStatus"] == "Failed"
    assert d["FailureReason"].startswith("ClientError: No S3 objects found") and "nothing-here" in d["FailureReason"]


@pytest.mark.slow
def test_duplicate_name_and_missing_job(backend, tmp_path):
    name = unique("sdup")
    plan = script_job(backend, tmp_path, "print(1)\n", name=name)
    with pytest.raises(BackendError) as info:
        backend.submit("processing", plan.request)
    assert info.value.code == "ValidationException" and "already exists" in str(info.value)
    assert wait(backend, "processing", name, timeout=60)["ProcessingJobStatus"] == "Completed"
    with pytest.raises(JobNotFound):
        backend.describe("processing", "no-such-job")
    assert [j["ProcessingJobName"] for j in backend.list_jobs("processing", name_contains=name)] == [name]


@pytest.mark.parametrize("change, field, words", [
    (lambda r: r["AppSpecification"].pop("ContainerEntrypoint"), "AppSpecification.ContainerEntrypoint",
     "built-in command"),
    (lambda r: r["AppSpecification"].update(ContainerEntrypoint=["Rscript-not-here", "x.R"]),
     "AppSpecification.ContainerEntrypoint[0]", "not on this machine"),
    (lambda r: r["ProcessingInputs"][0]["S3Input"].update(S3InputMode="Pipe"), "S3InputMode", "Pipe"),
    (lambda r: r["ProcessingInputs"][0]["S3Input"].update(LocalPath="/data"), "LocalPath", "/opt/ml/processing/"),
    (lambda r: r["ProcessingInputs"].append({"InputName": "athena", "DatasetDefinition": {
        "AthenaDatasetDefinition": {"Catalog": "c", "Database": "d", "QueryString": "select 1",
                                    "OutputS3Uri": "s3://b/q", "OutputFormat": "PARQUET"},
        "LocalPath": "/opt/ml/processing/athena"}}), "DatasetDefinition", "Athena"),
    (lambda r: r["AppSpecification"].update(ContainerEntrypoint=["smspark-submit", "--conf", "a=b", "app.py"]),
     "AppSpecification.ContainerEntrypoint", "no such option: --conf"),
])
def test_unrunnable_requests_are_refused_before_anything_is_written(backend, change, field, words):
    plan = build_processing(job_name=unique("refuse"), role=ROLE, image_uri=IMAGE, code="s3://b/prep.py",
                            inputs={"raw": "s3://b/raw"})
    change(plan.request)
    with pytest.raises(SpecError) as info:
        backend.submit("processing", plan.request)
    assert field in info.value.field and words in str(info.value)
    assert not backend.store.root.exists() or not list(backend.store.root.rglob("request.json"))


# ---- the operators under Airflow --------------------------------------------------------------------------------
def context(run_id: str, task_id: str):
    ti = SimpleNamespace(dag_id="dag", task_id=task_id, map_index=-1, try_number=1)
    return {"ti": ti, "run_id": run_id}


@pytest.mark.slow
def test_script_operator_uploads_runs_and_returns_the_outputs(tmp_path, script_data, monkeypatch):
    from airflow_smdist._compat import AirflowException
    from airflow_smdist.operators.processing import SmdistProcessingOperator

    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    script = tmp_path / "count.py"
    script.write_text("import json, os, sys\n"
                      "rc = json.load(open(os.path.join(os.environ['SAGEMAKER_BASE_DIR'], 'config', "
                      "'resourceconfig.json')))\n"
                      "n = sum(len(files) for _, _, files in os.walk(sys.argv[1]))\n"
                      "rank = rc['hosts'].index(rc['current_host'])\n"
                      "open(os.path.join(sys.argv[2], f'count-{rank}.txt'), 'w').write(str(n))\nprint('counted', n)\n")
    op = SmdistProcessingOperator(task_id="count", image_uri=IMAGE, code=str(script), instance_count=2,
                                  poll_interval=0.3,  # no code_location: the local job root's code/
                                  inputs={"shards": {"source": f"file://{script_data}/shards/",
                                                     "distribution": "ShardedByS3Key"}},
                                  outputs={"counts": f"file://{tmp_path}/counts"},
                                  arguments=["/opt/ml/processing/input/shards", "/opt/ml/processing/output/counts"])
    result = op.execute(context(f"run-{uuid.uuid4().hex}", "count"))
    json.dumps(result)  # XCom-safe
    assert result["status"] == "Completed" and result["backend"] == "local" and result["instance_count"] == 2
    assert result["outputs"] == {"counts": f"file://{tmp_path}/counts"}
    assert result["inputs"]["code"] == (f"file://{(tmp_path / 'jobs').resolve()}/code/{result['job_name']}"
                                        "/input/code/count.py")
    counts = files_under(result["outputs"]["counts"])
    assert sorted(counts) == ["count-0.txt", "count-1.txt"]
    assert sorted(int(v) for v in counts.values()) == [3, 4]  # 7 objects sharded over 2 hosts
    failing = SmdistProcessingOperator(task_id="boom", image_uri=IMAGE,
                                       entrypoint=["python3", "-c", "raise SystemExit(4)"], poll_interval=0.3)
    with pytest.raises(AirflowException, match="exit code 4"):
        failing.execute(context(f"run-{uuid.uuid4().hex}", "boom"))


@pytest.mark.slow
def test_deferred_operator_waits_through_the_trigger(tmp_path, monkeypatch):
    import asyncio

    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS
    from airflow_smdist.operators.processing import SmdistProcessingOperator

    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.exceptions import TaskDeferred
    else:
        from airflow.exceptions import TaskDeferred
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    op = SmdistProcessingOperator(task_id="defer", image_uri=IMAGE, deferrable=True, poll_interval=0.3,
                                  entrypoint=["python3", "-c", "import time; time.sleep(1); print('deferred ok')"])
    ctx = context(f"run-{uuid.uuid4().hex}", "defer")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    path, kwargs = deferred.value.trigger.serialize()
    assert kwargs["kind"] == "processing"
    trigger = type(deferred.value.trigger)(**kwargs)  # the triggerer rebuilds it from its serialised form

    async def first_event():
        async for event in trigger.run():
            return event

    event = asyncio.run(asyncio.wait_for(first_event(), 60))
    assert event.payload["job_status"] == "Completed"
    result = op.execute_complete(ctx, event.payload)
    assert result["status"] == "Completed" and result["job_name"] == event.payload["job_name"]


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["namespace"])
def test_framework_processor_source_dir_runs_through_runproc(tmp_path, monkeypatch, isolation):
    """source_dir + code (SDK 2's FrameworkProcessor): the bundle and runproc.sh are uploaded, and the local
    job runs runproc.sh itself: it unpacks the bundle in the code input, the script imports its neighbour
    module from the bundle and gets the job's arguments. (runproc.sh names container paths, so this needs
    a host in its own mount namespace.)"""
    if launcher.namespace_prefix() is None:
        pytest.skip("this OS allows no private mount namespace here")
    from airflow_smdist.operators.processing import SmdistProcessingOperator

    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "helpers.py").write_text("GREETING = 'from the bundle'\n")
    (src / "process.py").write_text(
        "import os, sys\nimport helpers\n"
        "open(os.path.join('/opt/ml/processing/output/result', 'out.txt'), 'w').write(\n"
        "    f'{helpers.GREETING} {os.getcwd()} {sys.argv[1:]}')\n")
    op = SmdistProcessingOperator(task_id="fw", image_uri=IMAGE, source_dir=str(src), code="process.py",
                                  poll_interval=0.3, arguments=["--rows", 3],
                                  outputs={"result": f"file://{tmp_path}/result"})
    result = op.execute(context(f"run-{uuid.uuid4().hex}", "fw"))
    assert result["status"] == "Completed", result
    code_uri = result["inputs"]["code"]
    assert code_uri.endswith(f"/{result['job_name']}/source/sourcedir.tar.gz")
    assert result["inputs"]["entrypoint"] == code_uri.replace("sourcedir.tar.gz", "runproc.sh")
    assert files_under(result["outputs"]["result"]) == {
        "out.txt": "from the bundle /opt/ml/processing/input/code ['--rows', '3']"}


@pytest.mark.slow
def test_a_job_whose_hosts_cannot_be_made_fails_with_the_reason(backend, tmp_path, monkeypatch):
    """The job's network cannot be made (SMDIST_LOCAL_SUBNET smaller than a /24): the job fails naming why, not
    with the supervisor's own error about a cluster it never had."""
    if launcher.namespace_prefix() is None:
        pytest.skip("this OS allows no private mount namespace here")
    monkeypatch.setenv("SMDIST_LOCAL_SUBNET", "10.201.7.0/25")
    name = unique("nonet")
    script_job(backend, tmp_path, "print('never runs')\n", name=name)
    d = wait(backend, "processing", name, timeout=120)
    assert d["ProcessingJobStatus"] == "Failed"
    assert "SMDIST_LOCAL_SUBNET=10.201.7.0/25" in d["FailureReason"], d["FailureReason"]
    assert "never runs" not in host_log(backend, name, "algo-1")
