"""The platform's part of a local PySpark processing job (staging, event logs, the Spark it runs), checked with a
stand-in Spark distribution: a ``SPARK_HOME`` whose ``bin/spark-submit`` is a small shell script that does what
the test needs of Spark (writes an event log, reads its input) in milliseconds, so these run without a JVM.
The real Spark runs in test_local_processing.py."""

from __future__ import annotations

import os
import stat
import textwrap
import threading
import time
import uuid

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.specs.processing import build_pyspark_processing, upload_plan
from jobs import wait

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"

#: spark-submit of the stand-in: finds spark.eventLog.dir among its --conf, writes one event log (in progress,
#: then final, as Spark renames it at the end), lists what its input holds, and stays up a while
SPARK_SUBMIT = textwrap.dedent('''\
    #!/bin/sh
    events=""
    for a in "$@"; do
      case "$a" in spark.eventLog.dir=file://*) events="${a#spark.eventLog.dir=file://}";; esac
    done
    echo "stand-in spark-submit $*"
    ls /opt/ml/processing/input/raw 2>/dev/null || ls "$SAGEMAKER_BASE_DIR/processing/input/raw"
    if [ -n "$events" ]; then
      printf '{"Event":"SparkListenerApplicationStart","App Name":"stand-in"}\\n' > "$events/local-1.inprogress"
      printf '{"Event":"SparkListenerApplicationEnd"}\\n' >> "$events/local-1.inprogress"
      mv "$events/local-1.inprogress" "$events/local-1"
    fi
    sleep "${STAND_IN_SECONDS:-0}"
    echo "stand-in done"
''')


def executable(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def stand_in_spark(tmp_path, monkeypatch):
    """A Spark 3.5.1 distribution under /tmp (where a downloaded one is often unpacked), and a java for the
    request check (the stand-in needs none)."""
    home = tmp_path / "spark-3.5.1-bin-hadoop3"
    executable(home / "bin" / "spark-submit", SPARK_SUBMIT)
    (home / "RELEASE").write_text("Spark 3.5.1 built for Hadoop 3.3.4\n")
    executable(tmp_path / "jdk" / "bin" / "java", "#!/bin/sh\necho 'openjdk version \"17\"'\n")
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "worker")
    return home


def spark_job(tmp_path, *, hosts: int = 2, event_logs: bool = False,
              seconds: float = 0) -> tuple[LocalBackend, str, str]:
    """A PySparkProcessor request over 3 input objects on ``hosts`` hosts, submitted; (backend, name, store)."""
    (tmp_path / "app.py").write_text("print('never run by the stand-in')\n")
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(3):
        (raw / f"part-{i}.csv").write_text("key,value\n" + "".join(f"k{j},{j}\n" for j in range(100)))
    name, store = f"spark-{uuid.uuid4().hex[:8]}", f"file://{tmp_path}/store"
    plan = build_pyspark_processing(
        job_name=name, role=ROLE, submit_app=str(tmp_path / "app.py"), framework_version="3.5",
        instance_count=hosts, code_location=store,
        inputs={"raw": {"source": f"file://{raw}/", "destination": "/opt/ml/processing/input/raw"}},
        spark_event_logs_s3_uri=f"{store}/events" if event_logs else None, env={"STAND_IN_SECONDS": str(seconds)})
    upload_plan(plan)
    backend = LocalBackend(tmp_path / "jobs")
    backend.submit("processing", plan.request)
    return backend, name, store


def host_log(backend, name, host) -> list[str]:
    events, _ = backend.log_events("processing", name)
    return [e.message for e in events if e.host == host]


@pytest.mark.slow
def test_a_spark_home_under_tmp_runs_on_namespaced_hosts(stand_in_spark, tmp_path):
    """SPARK_HOME=/tmp/spark-3.5.1-bin-hadoop3: the host (which has its own /tmp) still sees the distribution."""
    backend, name, _store = spark_job(tmp_path)
    d = wait(backend, "processing", name, timeout=120)
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    log = host_log(backend, name, "algo-1")
    assert "stand-in done" in log and "part-0.csv" in log, log


@pytest.mark.slow
def test_the_idle_hosts_of_a_spark_job_share_the_primarys_input_copy(stand_in_spark, tmp_path):
    """Only the primary runs spark-submit (its Spark's executors read the primary's /opt/ml); a FullyReplicated
    input is downloaded once, and the other hosts' copies are links to it: same files, no second download."""
    backend, name, _store = spark_job(tmp_path, hosts=3)
    d = wait(backend, "processing", name, timeout=120)
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    hosts = backend.job_dir("processing", name) / "hosts"
    for f in ("part-0.csv", "part-1.csv", "part-2.csv"):
        copies = [hosts / h / "processing" / "input" / "raw" / f for h in ("algo-1", "algo-2", "algo-3")]
        assert len({p.read_text() for p in copies}) == 1
        assert len({os.stat(p).st_ino for p in copies}) == 1, f"{f} was downloaded once per host"
    platform = host_log(backend, name, "platform")
    assert any(m.startswith("algo-3 ") and "linked to algo-1's copy" in m for m in platform), platform


@pytest.mark.slow
def test_a_finished_event_log_is_copied_and_uploaded_once(stand_in_spark, tmp_path, monkeypatch):
    """The event log (Continuous output) is copied into --local-spark-event-logs-dir and uploaded when it
    changes; a finished log that no longer changes is not copied and uploaded again every sync."""
    monkeypatch.setenv("SMDIST_LOCAL_CHECKPOINT_SYNC", "0.2")
    backend, name, store = spark_job(tmp_path, event_logs=True, seconds=2.5)
    uploaded = os.path.join(store[len("file://"):], "events", "local-1")
    versions: set[tuple[int, int]] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                st = os.stat(uploaded)
                versions.add((st.st_ino, st.st_mtime_ns))
            except FileNotFoundError:
                pass
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        d = wait(backend, "processing", name, timeout=120)
    finally:
        done.set()
        watcher.join()
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    with open(uploaded) as f:
        assert '"SparkListenerApplicationEnd"' in f.read()
    assert len(versions) == 1, f"the unchanged event log was uploaded {len(versions)} times"
