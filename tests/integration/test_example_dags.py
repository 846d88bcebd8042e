"""Every example DAG runs end to end on the local backend under `airflow dags test`."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

#: scikit-learn 1.2 (the sagemaker-scikit-learn:1.2-1 image's) publishes no wheel for Python >= 3.12, and a local
#: runtime is built on the worker's Python: there it falls back to 1.3 and says so in the job's log
SKLEARN_1_2 = pytest.mark.skipif(sys.version_info >= (3, 12), reason="no scikit-learn 1.2 wheel for this Python: the "
                                 "runtime falls back to 1.3 (the image's own version is what these tests check)")


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(REPO, "dags")
MAIN = "smdist_torch_distributed"  # run by tests/compat on every Airflow line


def dag_ids() -> list[str]:
    ids = []
    for path in sorted(glob.glob(os.path.join(DAGS, "*.py"))):
        with open(path) as f:
            ids += re.findall(r'dag_id="([^"]+)"', f.read())
    return [i for i in ids if i != MAIN]


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow")
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "SMDIST_LOCAL_ROOT": str(home / "jobs"), "PYTHONPATH": REPO}
    env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    out = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return airflow, env


#: runs with other Params: the tuning DAG with the strategies whose DAG path differs from its default (Bayesian):
#: Hyperband (its resource Params) and Grid (the DAG plans categorical ranges); Random takes Bayesian's path, and
#: every strategy's search is tested against the local backend in test_local_tuning.py
VARIANTS = [pytest.param("smdist_tuning", {"strategy": s}, id=f"smdist_tuning-{s}") for s in ("Hyperband", "Grid")]
#: the example DAG run in its images' runtimes (SMDIST_LOCAL_RUNTIME=image, the default outside tests) instead
#: of the worker's (the others, for speed): its one image, scikit-learn 1.2-1, is a runtime test_local_runtimes.py
#: builds too, so the session's runtime cache builds it once, and on a warm cache the DAG runs no slower than in
#: the worker's runtime (measured here: 60 s vs 85 s and 103 s vs 119 s, on a loaded machine)
IMAGE_RUNTIME_DAG = "smdist_sharded_batch_inference"


def scaling_study_shows_its_plots(home: str, log: str) -> None:
    """The study's table in the report task's log, its scaling.png and every job's insight.png under the
    output URI (the DAG's default: $AIRFLOW_HOME/smdist-data/scaling-output)."""
    out = os.path.join(home, "smdist-data", "scaling-output")
    assert "Scaling study:" in log and "speed-up" in log and "efficiency" in log, log[-3000:]
    assert all(f"ml_m5_xlarge_x{n} " in log for n in (1, 2, 4)), log[-3000:]  # a row per configuration
    assert "the shards are uneven" not in log  # 12 equal objects over 1, 2 and 4 hosts (and no outputs among them)
    assert_pngs(glob.glob(os.path.join(out, "study", "*", "scaling.png")), 1)
    assert_pngs(glob.glob(os.path.join(out, "*", "output", "insight.png")), 3)


def assert_pngs(paths: list[str], count: int) -> None:
    assert len(paths) == count, paths
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", path


def pyspark_pipeline_preprocessed_and_trained(home: str, log: str) -> None:
    """The Spark job split the generated rows (the DAG's default, 200,000) into train and validation CSVs, the
    training job read them (its row count in its log) and wrote a model, and Spark's event logs were kept.
    Spark logs at WARN in the example (its spark_log_level Param): the whole run's output is the jobs' own
    lines and the platform's, not Spark's every stage and query plan (1,016 lines at INFO)."""
    assert len(log.splitlines()) < 300, "\n".join(log.splitlines()[:80])
    spark_info = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ")  # log4j's "yy/MM/dd HH:mm:ss INFO"
    assert not [line for line in log.splitlines() if spark_info.search(line)]
    data = os.path.join(home, "smdist-data", "pyspark")
    rows = {s: sum(len(open(p).read().splitlines())
                   for p in glob.glob(os.path.join(data, "processed", "*", s, "part-*.csv")))
            for s in ("train", "validation")}
    total = 200_000
    assert rows["train"] + rows["validation"] == total and 0.15 < rows["validation"] / total < 0.25, rows
    assert '[algo-1] summary {"raw_rows": %d' % total in log, log[-3000:]
    assert f"train: {rows['train']} rows" in log, log[-3000:]  # the training job read the processing job's outputs
    assert "validation:accuracy" in log
    assert glob.glob(os.path.join(data, "models", "smdist-train-*", "output", "model.tar.gz"))
    assert os.listdir(os.path.join(data, "spark-events"))


def spot_rehearsal_resumed(home: str, log: str) -> None:
    """The spot job was interrupted twice (the DAG's default Param) and completed; its report says so."""
    assert "2 interruption(s)" in log, log[-3000:]
    assert log.count("Interrupted: Spot instances were interrupted") >= 2, log[-3000:]


#: what an example DAG must leave behind besides success, by dag_id: check(AIRFLOW_HOME, the run's output)
CHECKS = {"smdist_scaling_study": scaling_study_shows_its_plots,
          "smdist_pyspark_pipeline": pyspark_pipeline_preprocessed_and_trained,
          "smdist_spot_rehearsal": spot_rehearsal_resumed}


#: the example DAGs whose jobs need torch: torch_distributed (torchrun) and the torch_ddp script
TORCH_DAGS = {"smdist_many_jobs", "smdist_scaling_study", "smdist_spot_rehearsal"}


@pytest.mark.slow
@pytest.mark.parametrize("dag_id, conf", [pytest.param(d, None, marks=[pytest.mark.torch] if d in TORCH_DAGS else [])
                                          for d in dag_ids() if d != IMAGE_RUNTIME_DAG] + VARIANTS)
def test_example_dag_runs_on_the_local_backend(airflow_env, dag_id, conf):
    airflow, env = airflow_env
    log = run_dag(airflow, env, dag_id, conf)
    if dag_id in CHECKS and conf is None:
        CHECKS[dag_id](env["AIRFLOW_HOME"], log)


@SKLEARN_1_2
@pytest.mark.slow
def test_example_dag_runs_in_its_images_runtimes(airflow_env):
    airflow, env = airflow_env
    log = run_dag(airflow, {**env, "SMDIST_LOCAL_RUNTIME": "image"}, IMAGE_RUNTIME_DAG, None)
    assert "runtime: sagemaker-scikit-learn:1.2-1-cpu-py3 [" in log and "scikit-learn 1.2." in log
    assert "SMDIST_LOCAL_RUNTIME=worker" not in log


def run_dag(airflow: str, env: dict, dag_id: str, conf: dict | None) -> str:
    """``airflow dags test`` of one DAG: it succeeds and logs no error; returns its output."""
    import json

    cmd = [airflow, "dags", "test", dag_id] + (["--conf", json.dumps(conf)] if conf else [])
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    log = run.stdout + run.stderr
    problems = [line for line in log.splitlines()
                if any(w in line for w in ("ended Failed", "ended Stopped", "Traceback", "Error:", "AirflowException"))]
    assert run.returncode == 0 and "state=success" in log, "\n".join(problems[:60]) + "\n...\n" + log[-3000:]
    assert "state=failed" not in log.split("DagRun Finished")[-1][:400]
    assert not error_lines(log), "a successful run logged errors:\n" + "\n".join(error_lines(log)[:20])
    assert not [line for line in log.splitlines() if re.search(r"\[platform\] (error|ERROR)", line)], log[-3000:]
    repeated = repeated_platform_lines(env["SMDIST_LOCAL_ROOT"])
    assert not repeated, f"a job's platform said a line more than once: {repeated[:5]}"
    return log


def repeated_platform_lines(root: str) -> list[tuple[str, str]]:
    """(job, message) of every platform line a job said more than once (each fact once per job)."""
    import collections
    import json

    out = []
    for path in glob.glob(os.path.join(root, "*", "*", "logs", "platform.jsonl")):
        with open(path) as f:
            counts = collections.Counter(json.loads(line)["m"] for line in f if line.strip())
        out += [(path.split(os.sep)[-3], m) for m, n in counts.items() if n > 1]
    return out


def error_lines(log: str) -> list[str]:
    """Error-level lines of Airflow's own logging in `airflow dags test` output: "[error    ]" (Airflow 3's
    structlog console) or " ERROR - " (Airflow 2's format), critical ones too. A job's own output (its
    [algo-N] lines) is not Airflow's log level and is not counted."""
    pattern = re.compile(r"\[(error|critical)\s*\]|\s(ERROR|CRITICAL) - ")
    return [line for line in log.splitlines() if pattern.search(line.split(" [algo-")[0].split(" [platform]")[0])]


@pytest.mark.slow
def test_a_refused_task_says_why_and_logs_no_error_about_xcoms_it_never_wrote(airflow_env):
    """Issue 42: a task refused before any job (a TensorFlow parameter_server job, which the local backend does
    not run) fails with the refusal and the launchers of its framework, and its log holds no "XCom not found"
    (Airflow 3 reads each extra link's XCom when a task ends)."""
    airflow, env = airflow_env
    root = os.path.join(env["AIRFLOW_HOME"], "refused-jobs")  # (the module's other DAGs run their jobs beside)
    env = {**env, "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(REPO, "tests", "fixtures", "refused_dag"),
           "SMDIST_LOCAL_ROOT": root}
    run = subprocess.run([airflow, "dags", "test", "smdist_refused"], env=env, capture_output=True, text=True,
                         timeout=300)
    log = run.stdout + run.stderr
    assert "the parameter_server launcher is not run by the local backend" in log, log[-4000:]
    assert "multi_worker_mirrored_strategy (TensorFlow) or mpi (TensorFlow, MXNet)" in log
    assert "XCom not found" not in log, [line for line in log.splitlines() if "XCom" in line]
    assert not glob.glob(os.path.join(root, "training", "*"))  # refused before any job

