"""Provider registration, cheap imports, DAG parsing and one DAG end to end: run on every Airflow line."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time
from importlib.metadata import entry_points

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(REPO, "dags")
HEAVY = ("torch", "pyspark", "optuna", "sagemaker", "moto", "sklearn", "matplotlib")


def test_provider_is_registered_and_every_listed_module_imports():
    eps = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_smdist")]
    assert len(eps) == 1, "airflow-smdist must be installed (pip install -e .)"
    info = eps[0].load()()
    assert info["package-name"] == "airflow-smdist"
    assert [(c["connection-type"], c["hook-class-name"]) for c in info["connection-types"]] == [
        ("smdist", "airflow_smdist.hooks.smdist.SmdistHook")]
    schema_file = os.path.join(os.path.dirname(importlib.import_module("airflow").__file__),
                               "provider.yaml.schema.json")
    if os.path.exists(schema_file):  # Airflow >= 3.2 documents conn-fields and ui-field-behaviour there
        import jsonschema

        with open(schema_file) as f:
            item = json.load(f)["properties"]["connection-types"]["items"]
        if "conn-fields" in item["properties"]:
            for conn in info["connection-types"]:
                jsonschema.validate(conn, item)
    for section in ("operators", "sensors", "hooks"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for dotted in [c["hook-class-name"] for c in info["connection-types"]] + info["extra-links"]:
        module, _, name = dotted.rpartition(".")
        assert getattr(importlib.import_module(module), name)


def test_the_job_page_plugin_loads_on_this_line_and_serves_only_on_airflow_3():
    """Airflow's own plugin loading (entry point ``airflow.plugins``, where the installed distribution declares
    it): on Airflow 3 the plugin brings the job page's app; on Airflow 2 it loads and registers nothing."""
    from airflow import plugins_manager

    from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS
    from airflow_smdist.plugins.console import SmdistConsolePlugin

    plugin = SmdistConsolePlugin()
    declared = [ep for ep in entry_points(group="airflow.plugins") if ep.value.startswith("airflow_smdist")]
    if declared:  # an install made from this checkout (an older editable install's metadata lacks it)
        assert declared[0].load() is SmdistConsolePlugin
        # what `airflow plugins` lists: the plugins manager loaded it from the entry point
        loaded = {info["name"]: info for info in plugins_manager.get_plugin_info()}
        assert SmdistConsolePlugin.name in loaded, sorted(loaded)
    if AIRFLOW_V_3_0_PLUS:
        assert [a["url_prefix"] for a in plugin.fastapi_apps] == ["/smdist"] and plugin.external_views
    else:
        assert plugin.fastapi_apps == [] and plugin.external_views == []



@pytest.mark.parametrize("dag_file", sorted(f for f in os.listdir(DAGS) if f.endswith(".py")))
def test_provider_and_dag_imports_stay_cheap(dag_file):
    """No torch, pyspark, optuna, sagemaker SDK, scikit-learn, matplotlib (or moto) at DAG-parse time."""
    code = ("import runpy, sys, time, json; t = time.perf_counter(); "
            f"runpy.run_path({os.path.join(DAGS, dag_file)!r}); "
            f"print(json.dumps({{'heavy': [m for m in {HEAVY!r} if m in sys.modules], 's': time.perf_counter() - t}}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [], f"DAG parse imported {result['heavy']}"
    print(f"{dag_file}: parse (with provider import) took {result['s']:.2f}s")


#: What a DAG file may import of the provider: the operator and decorator modules, and the plain data they
#: are declared with. Builders (specs), the job lifecycle, backends, hooks, storage and triggers are imported
#: when a task runs, not at every parse.
PARSE_TIME_MODULES = {
    "airflow_smdist", "airflow_smdist._compat", "airflow_smdist.kinds", "airflow_smdist.params",
    "airflow_smdist.operators", "airflow_smdist.operators._arguments", "airflow_smdist.operators.base",
    "airflow_smdist.operators.links", "airflow_smdist.operators.training", "airflow_smdist.operators.processing",
    "airflow_smdist.operators.transform", "airflow_smdist.operators.tuning", "airflow_smdist.operators.workflows",
    "airflow_smdist.operators.scaling", "airflow_smdist.decorators", "airflow_smdist.decorators.base",
    "airflow_smdist.decorators.payload", "airflow_smdist.decorators.smdist", "airflow_smdist.decorators.processing",
    "airflow_smdist.runtime", "airflow_smdist.runtime.function", "airflow_smdist.specs",
    "airflow_smdist.specs.arguments", "airflow_smdist.specs.errors",
}
#: Modules a trivial TaskFlow DAG file does not import, that an example DAG file must not import either.
NOT_AT_PARSE = ("botocore", "boto3", "aiobotocore", "airflow.providers.amazon", "difflib", "tarfile", "symtable",
                "jsonschema")


@pytest.mark.parametrize("dag_file", sorted(f for f in os.listdir(DAGS) if f.endswith(".py")))
def test_dag_file_imports_only_what_parsing_needs(dag_file):
    """In a fresh interpreter that has what a trivial TaskFlow DAG file needs (Airflow's DAG, Param, @task),
    loading an example DAG file (as the DagBag does) adds only the provider's operator modules: no botocore,
    no Amazon provider modules, no request builders (their dataclasses cost milliseconds to import)."""
    code = f"""
import importlib.util, json, sys
try:
    from airflow.sdk import DAG, Param, task
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.decorators import task
    from airflow.models.param import Param
    from airflow.providers_manager import ProvidersManager

    # Airflow 2 resolves any provider's @task.<name> (@task.docker as much as @task.smdist) by loading every
    # provider's info and validating it with jsonschema: Airflow's own cost, not this provider's
    ProvidersManager().initialize_providers_taskflow_decorator()
task.python  # the TaskFlow decorator's own modules, as a trivial TaskFlow DAG file loads them
before = set(sys.modules)
spec = importlib.util.spec_from_file_location("dagfile", {os.path.join(DAGS, dag_file)!r})
spec.loader.exec_module(importlib.util.module_from_spec(spec))
print(json.dumps(sorted(set(sys.modules) - before)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr
    new = json.loads(out.stdout.strip().splitlines()[-1])
    provider = {m for m in new if m.split(".")[0] == "airflow_smdist"}
    assert provider <= PARSE_TIME_MODULES, f"{dag_file} imports {sorted(provider - PARSE_TIME_MODULES)} at parse"
    unwanted = [m for m in new if any(m == n or m.startswith(n + ".") for n in NOT_AT_PARSE)]
    assert unwanted == [], f"{dag_file} imports {unwanted} at parse"


def test_example_dags_parse_without_errors():
    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow >= 3.1
    except ImportError:
        from airflow.models.dagbag import DagBag
    started = time.perf_counter()
    import inspect

    extra = {"include_examples": False} if "include_examples" in inspect.signature(DagBag).parameters else {}
    bag = DagBag(dag_folder=DAGS, **extra)
    elapsed = time.perf_counter() - started
    assert bag.import_errors == {}
    assert "smdist_torch_distributed" in bag.dag_ids
    for dag_id in bag.dag_ids:
        dag = bag.dags[dag_id]  # (get_dag reads the metadata DB on Airflow 2)
        assert dag.params, f"{dag_id} is triggerable with Params"
    print(f"DagBag parse of {len(bag.dag_ids)} DAG(s): {elapsed:.2f}s")


def _cpu_torch_here() -> bool:
    """Whether a PyTorch image's local runtime gets a CPU torch cheaply on this Python (the CPU wheel on this
    machine's disk is built for 3.11; elsewhere PyPI serves a multi-GB CUDA build)."""
    from airflow_smdist.backends.local.job.runtimes import local_torch_version

    return local_torch_version() is not None


def _airflow_3_0_missing_connection_line(line: str) -> bool:
    """Task SDK 1.0.x (Airflow 3.0) logs every lookup of an undefined connection at error level from its API
    client ("Connection not found ... status_code=404"), although the lookup's caller is told "not defined" and
    goes on; later lines log nothing. The provider looks up smdist_default and, without it, uses its defaults.
    README ("Airflow versions") says so, and that defining the connection (as the MWAA steps do) removes the
    line (an AIRFLOW_CONN_ variable set for everyone would shadow a connection made in the UI)."""
    import airflow

    return (airflow.__version__.startswith("3.0.") and "Connection not found" in line
            and "[airflow.sdk.api.client]" in line and "conn_id=smdist_default" in line)


def _dags_test(tmp_path, dag_id: str) -> str:
    """`airflow dags test dag_id` on the local backend in a fresh AIRFLOW_HOME; returns its log after checking
    that the run succeeded and logged no error-level line."""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "SMDIST_LOCAL_ROOT": str(tmp_path / "jobs"),
           "PYTHONPATH": REPO,
           # the job in its image's runtime, as users run it (the row's venv holds no torch; tests/conftest.py
           # runs the rest of the suite's jobs in the worker's interpreter). Not on 3.13: a runtime is built on
           # the worker's Python, and the images' pinned numpy 1.x, scipy, pandas publish no 3.13 wheels (the job
           # says "no local runtime for ..."; MWAA runs no 3.13), so there the job runs in the worker's interpreter
           "SMDIST_LOCAL_RUNTIME": "image" if sys.version_info < (3, 13) else "worker"}
    env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
    os.makedirs(env["AIRFLOW_HOME"])
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    migrate = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    run = subprocess.run([airflow, "dags", "test", dag_id], env=env, capture_output=True, text=True, timeout=600)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-6000:]
    assert "DagRun Finished" in log and "state=success" in log, log[-3000:]
    # no error-level line in a successful run (the same check as tests/integration/test_example_dags.py's
    # error_lines, inlined: these tests run without tests/integration importable): Airflow 3's "[error    ]",
    # Airflow 2's " ERROR - ", critical ones too; a job's own [algo-N] / [platform] output is not a log level
    pattern = re.compile(r"\[(error|critical)\s*\]|\s(ERROR|CRITICAL) - ")
    errors = [line for line in log.splitlines() if pattern.search(line.split(" [algo-")[0].split(" [platform]")[0])
              and not _airflow_3_0_missing_connection_line(line)]
    assert not errors, "a successful run logged errors:\n" + "\n".join(errors[:20])
    return log


@pytest.mark.slow
@pytest.mark.skipif(not _cpu_torch_here(), reason="no CPU torch for this Python on this machine (the main DAG's "
                    "PyTorch runtime would download a multi-GB CUDA build): the built-in algorithm DAG runs instead")
def test_main_example_dag_runs_end_to_end_on_the_local_backend(tmp_path):
    log = _dags_test(tmp_path, "smdist_torch_distributed")
    # both simulated hosts trained, the model artifact landed, metrics reached XCom
    assert "[algo-1] rank 0/2" in log and "[algo-2] rank 1/2" in log
    assert "[algo-1] rank 0: all-reduce check passed (sum 3 over world size 2)" in log
    assert "[algo-2] rank 1: all-reduce check passed (sum 3 over world size 2)" in log
    artifacts = list((tmp_path / "airflow" / "smdist-data" / "output").glob("smdist-train-*/output/model.tar.gz"))
    assert len(artifacts) == 1
    assert "train:loss" in log
    assert "'train:loss':" in log  # the report task printed final_metrics from the training task's XCom


@pytest.mark.slow
@pytest.mark.skipif(_cpu_torch_here(), reason="the main DAG runs end to end on this Python")
def test_a_multi_host_example_dag_runs_end_to_end_on_the_local_backend_without_torch(tmp_path):
    """Where no CPU torch installs cheaply (Python 3.12 and 3.13 here): the built-in XGBoost algorithm on two
    hosts, each on its ShardedByS3Key share, in the image runtime built for this Python."""
    log = _dags_test(tmp_path, "smdist_builtin_algorithm")
    assert "[algo-1]" in log and "[algo-2]" in log
    artifacts = list((tmp_path / "airflow" / "smdist-data" / "builtin-xgboost-output").glob("*/output/model.tar.gz"))
    assert len(artifacts) == 1, artifacts
    assert "validation RMSE of xgboost-model" in log  # the report task loaded the model and measured it


def test_example_dags_keep_their_data_apart():
    """Prefixes are S3 string prefixes: one DAG's default data or output URI must not be a prefix of
    another's, or a job's channel would read the other DAG's objects."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:
        from airflow.models.dagbag import DagBag
    bag = DagBag(dag_folder=DAGS, include_examples=False) if "include_examples" in __import__("inspect").signature(
        DagBag).parameters else DagBag(dag_folder=DAGS)
    uris = []
    for dag_id, dag in bag.dags.items():
        for key in ("data_uri", "output_uri"):
            if key in dag.params:
                value = dag.params[key] if not hasattr(dag.params, "get_param") else dag.params.get_param(key).value
                uris.append((f"{dag_id}.{key}", str(value).rstrip("/") + "/"))
    assert len(uris) >= 10
    for name_a, a in uris:
        for name_b, b in uris:
            if name_a != name_b:
                assert not b.startswith(a), f"{name_b} ({b}) lies under {name_a} ({a})"


def test_connection_form_shows_the_smdist_fields_on_this_airflow_line():
    """What the connection form is built from, through Airflow's own ProvidersManager: from the provider
    info on Airflow >= 3.2, from the hook's form methods on Airflow 2.x (the browser check renders it)."""
    from airflow.providers_manager import ProvidersManager

    from airflow_smdist import CONNECTION_FIELDS

    schema = os.path.join(os.path.dirname(importlib.import_module("airflow").__file__), "provider.yaml.schema.json")
    from pathlib import Path

    if not (os.path.exists(schema) and "conn-fields" in Path(schema).read_text()):  # before 3.2: the hook's widgets
        pytest.importorskip("wtforms", reason="Airflow 3.0/3.1 without the FAB provider has no wtforms form")
    pm = ProvidersManager()
    widgets = pm.connection_form_widgets
    for name in CONNECTION_FIELDS:
        assert f"extra__smdist__{name}" in widgets, f"{name} missing from the smdist connection form"
    behaviour = pm.field_behaviours["smdist"]
    assert set(behaviour["hidden_fields"]) == {"host", "schema", "login", "password", "port"}


def test_hook_reads_fields_stored_under_their_form_names(monkeypatch):
    """Whichever key a form stored a field under, the hook sees it; empty fields fall back."""
    from airflow_smdist.hooks.smdist import SmdistHook

    monkeypatch.setenv("AIRFLOW_CONN_SMDIST_FORM", json.dumps({"conn_type": "smdist", "extra": {
        "extra__smdist__backend": "sagemaker", "region_name": "eu-west-1", "aws_conn_id": "", "local_root": None}}))
    hook = SmdistHook("smdist_form")
    assert hook.backend_name() == "sagemaker"
    assert hook.region_name == "eu-west-1"
    assert hook.aws_conn_id == "aws_default"


@pytest.mark.slow
def test_one_dag_runs_end_to_end_on_the_sagemaker_backend_against_moto(tmp_path):
    """scripts/e2e/dags/e2e_sagemaker_on_moto.py under `airflow dags test`, its job submitted to a moto server."""
    sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
    from moto_server import MotoServer

    server = MotoServer()
    url = server.start()
    try:
        env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
               "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(REPO, "scripts", "e2e", "dags"),
               "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONPATH": REPO,
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AIRFLOW_CONN_AWS_MOTO": json.dumps({"conn_type": "aws", "extra": {"endpoint_url": url,
                                                                                 "region_name": "us-east-1"}}),
               "AIRFLOW_CONN_SMDIST_MOTO": json.dumps({"conn_type": "smdist", "extra": {
                   "backend": "sagemaker", "aws_conn_id": "aws_moto", "region_name": "us-east-1"}})}
        env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
        os.makedirs(env["AIRFLOW_HOME"])
        airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
        migrate = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300,
                                 check=False)
        assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
        import boto3

        sm = boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
        # moto's state is the process's: another test's moto server in this pytest process left its jobs there
        earlier = {j["TrainingJobName"] for j in sm.list_training_jobs(MaxResults=100)["TrainingJobSummaries"]}
        run = subprocess.run([airflow, "dags", "test", "e2e_sagemaker_on_moto"], env=env, capture_output=True,
                             text=True, timeout=600, check=False)
        log = run.stdout + run.stderr
        assert run.returncode == 0 and "state=success" in log, log[-6000:]
        jobs = [j for j in sm.list_training_jobs(MaxResults=100)["TrainingJobSummaries"]
                if j["TrainingJobName"] not in earlier]
        assert len(jobs) == 1 and jobs[0]["TrainingJobName"].startswith("smdist-train-")
        described = sm.describe_training_job(TrainingJobName=jobs[0]["TrainingJobName"])
        assert described["ResourceConfig"]["InstanceCount"] == 2
    finally:
        server.stop()
