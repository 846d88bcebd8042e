"""The local backend runs training requests for real: contract, sharding, DDP, failure, stop, traversal."""

from __future__ import annotations

import json
import os
import tarfile
import time
import uuid

import pytest

from airflow_smdist.backends.base import BackendError, JobNotFound
from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.training import build_training
from jobs import wait

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(tmp_path / "jobs")


@pytest.fixture
def data(tmp_path):
    """Six CSV objects under a file:// prefix."""
    d = tmp_path / "data" / "train"
    d.mkdir(parents=True)
    for i in range(6):
        (d / f"part-{i}.csv").write_text("".join(f"{i},{j},{2 * i + j}\n" for j in range(20)))
    (tmp_path / "data" / "meta").mkdir()
    (tmp_path / "data" / "meta" / "labels.txt").write_text("a\nb\n")
    return tmp_path / "data"


def submit(backend, tmp_path, *, name, source, entry, instance_count=2, hps=None, distribution=None,
           inputs=None, **kw):
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point=entry,
                          source_dir=source, image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1",
                          instance_type="ml.m5.xlarge", instance_count=instance_count, hyperparameters=hps or {},
                          distribution=distribution, inputs=inputs, **kw)
    upload_source(plan.source_dir, entry, plan.source_uri)
    backend.submit("training", plan.request)
    return plan




def model_files(uri: str, tmp_path) -> dict[str, bytes]:
    path = uri[len("file://"):]
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def contract_job(backend, tmp_path, data, **kw):
    name = unique("contract")
    submit(backend, tmp_path, name=name, source=os.path.join(FIXTURES, "contract"), entry="dump_env.py",
           hps={"epochs": 3, "lr": 0.1, "optimizer": "adam", "x": True, "nested": {"b": 2, "a": 1}},
           inputs={"train": {"s3_uri": f"file://{data}/train", "distribution": "ShardedByS3Key"},
                   "meta": f"file://{data}/meta"},
           metric_definitions=[{"Name": "accuracy", "Regex": r"accuracy: ([0-9.]+)"},
                               {"Name": "loss", "Regex": r"loss=([0-9.]+)"}],
           environment={"SMDIST_REPO": REPO, "MY_SETTING": "on"}, **kw)
    d = wait(backend, "training", name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    files = model_files(d["ModelArtifacts"]["S3ModelArtifacts"], tmp_path)
    return name, d, [json.loads(files[f"contract-{r}.json"]) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["namespace", "none"])
def test_contract_every_variable_and_config_file(backend, tmp_path, data, monkeypatch, isolation):
    if isolation == "namespace" and launcher.namespace_prefix() is None:
        pytest.skip(f"hosts cannot be namespaced here: {launcher.namespaces_available()}")
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", isolation)
    # what the worker has and a job must not get (SageMaker gives a container none of it)
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "worker-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "worker-secret")
    monkeypatch.setenv("PYTHONPATH", REPO)
    name, d, hosts = contract_job(backend, tmp_path, data)
    assert d["ModelArtifacts"]["S3ModelArtifacts"] == f"file://{tmp_path}/out/{name}/output/model.tar.gz"
    addresses = [h["env"]["SM_CURRENT_HOST"] for h in hosts]
    if isolation == "namespace":  # SageMaker's names, each the host's own name, resolvable in every host
        assert addresses == ["algo-1", "algo-2"] and [h["hostname"] for h in hosts] == addresses
        assert all(set(h["resolved"]) == {"algo-1", "algo-2"} for h in hosts)
        assert hosts[0]["resolved"] == hosts[1]["resolved"] and hosts[0]["resolved"]["algo-1"] != "127.0.0.1"
    else:
        assert len(set(addresses)) == 2 and all(a.startswith("127.") for a in addresses)
    assert all(h["worker_env"] == [] for h in hosts), [h["worker_env"] for h in hosts]
    for h in hosts:  # only the v2 toolkit's names
        assert not {"SM_MASTER_ADDR", "SM_HOST_COUNT", "SM_CURRENT_HOST_RANK", "SM_INPUT_DATA_DIR",
                    "SM_OUTPUT_FAILURE"} & set(h["env"])
        assert h["env"]["SM_IS_HETERO"] == "false"
    for rank, h in enumerate(hosts):
        env, cfg = h["env"], h["config"]
        assert json.loads(env["SM_HOSTS"]) == sorted(addresses)
        assert env["SM_CURRENT_HOST"] == sorted(addresses)[rank]
        assert env["TRAINING_JOB_NAME"] == name and name in env["TRAINING_JOB_ARN"]
        assert env["SM_NUM_GPUS"] == "0" and int(env["SM_NUM_CPUS"]) >= 1
        assert json.loads(env["SM_CHANNELS"]) == ["meta", "train"]
        base = env["SAGEMAKER_BASE_DIR"]
        assert env["SM_CHANNEL_TRAIN"] == f"{base}/input/data/train"
        assert env["SM_CHANNEL_META"] == f"{base}/input/data/meta"
        assert env["SM_MODEL_DIR"] == f"{base}/model"
        assert env["SM_OUTPUT_DATA_DIR"] == f"{base}/output/data"
        assert env["SM_OUTPUT_DIR"] == f"{base}/output"
        assert env["SM_INPUT_CONFIG_DIR"] == f"{base}/input/config"
        assert json.loads(env["SM_HPS"]) == {"epochs": 3, "lr": 0.1, "optimizer": "adam", "x": True,
                                             "nested": {"a": 1, "b": 2}}
        assert env["SM_HP_EPOCHS"] == "3" and env["SM_HP_OPTIMIZER"] == "adam" and env["SM_HP_X"] == "true"
        assert env["SM_USER_ENTRY_POINT"] == "dump_env.py" and env["SM_MODULE_NAME"] == "dump_env"
        assert env["SM_MODULE_DIR"].endswith(f"/{name}/source/sourcedir.tar.gz")
        assert env["MASTER_ADDR"] == sorted(addresses)[0]
        assert env["SM_CURRENT_INSTANCE_TYPE"] == "ml.m5.xlarge"
        training_env = json.loads(env["SM_TRAINING_ENV"])
        assert training_env["job_name"] == name and training_env["current_host"] == addresses[rank]
        assert training_env["hosts"] == sorted(addresses) and training_env["is_master"] == (rank == 0)
        assert training_env["channel_input_dirs"]["train"] == env["SM_CHANNEL_TRAIN"]
        assert "sagemaker_program" not in training_env["hyperparameters"]
        # hyperparameters as TTK passes them: sorted, str() of the decoded value, dicts as k=v lists
        assert h["argv"] == ["--epochs", "3", "--lr", "0.1", "--nested", "a=1,b=2", "--optimizer", "adam", "-x", "True"]
        assert json.loads(env["SM_USER_ARGS"]) == h["argv"]
        assert h["cwd"] == f"{base}/code"
        # config files
        assert cfg["hyperparameters.json"]["epochs"] == "3" and cfg["hyperparameters.json"]["optimizer"] == '"adam"'
        assert cfg["hyperparameters.json"]["sagemaker_program"] == '"dump_env.py"'
        assert cfg["inputdataconfig.json"] == {
            "meta": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
            "train": {"TrainingInputMode": "File", "S3DistributionType": "ShardedByS3Key", "RecordWrapperType": "None"}}
        rc = cfg["resourceconfig.json"]
        assert rc["current_host"] == addresses[rank] and rc["hosts"] == sorted(addresses)
        assert rc["current_group_name"] == rc["current_instance_group"] == "homogeneousCluster"
        assert rc["current_instance_type"] == "ml.m5.xlarge" and rc["network_interface_name"]
        assert rc["instance_groups"][0]["hosts"] == [a for a in addresses]
        assert env["MY_SETTING"] == "on"  # the request's Environment reaches the script
        # airflow_smdist.runtime reads the same cluster from inside the job
        assert h["runtime"] == {"hosts": sorted(addresses), "current_host": addresses[rank],
                                "master_addr": sorted(addresses)[0], "host_rank": rank, "rank": rank, "world_size": 2}
    # ShardedByS3Key: each host a disjoint share, together all objects; FullyReplicated: all on each host
    shards = [set(h["channels"]["train"]) for h in hosts]
    assert shards[0].isdisjoint(shards[1]) and shards[0] | shards[1] == {f"part-{i}.csv" for i in range(6)}
    assert all(len(s) == 3 for s in shards)
    assert all(h["channels"]["meta"] == ["labels.txt"] for h in hosts)
    # metrics: the last value reported (host algo-2 printed after algo-1 or the other way: both are real)
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert metrics["accuracy"] in (0.5, 0.6) and metrics["loss"] in (1.0, 0.9)
    assert [t["Status"] for t in d["SecondaryStatusTransitions"]] == [
        "Starting", "Downloading", "Training", "Uploading", "Completed"]


@pytest.mark.slow
def test_namespace_binds_opt_ml_when_the_os_allows(backend, tmp_path, data):
    if launcher.namespace_prefix() is None:
        pytest.skip("this OS allows no private mount namespace here")
    _name, _d, hosts = contract_job(backend, tmp_path, data)
    for h in hosts:
        assert h["env"]["SAGEMAKER_BASE_DIR"] == "/opt/ml" and h["opt_ml_visible"]
        assert h["env"]["SM_MODEL_DIR"] == "/opt/ml/model"


@pytest.mark.slow
def test_relocated_paths_without_namespace(backend, tmp_path, data, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_ISOLATION", "none")
    name, _d, hosts = contract_job(backend, tmp_path, data)
    for rank, h in enumerate(hosts):
        base = h["env"]["SAGEMAKER_BASE_DIR"]
        assert base == str(backend.job_dir("training", name) / "hosts" / f"algo-{rank + 1}")
        assert h["env"]["SM_MODEL_DIR"] == f"{base}/model"
    lines = [e.message for e in backend.log_events("training", name)[0] if "without namespaces" in e.message]
    assert len(lines) == 1, lines  # one platform line gives the reason once and names each difference
    assert lines[0].startswith("hosts run without namespaces (SMDIST_LOCAL_ISOLATION=none), unlike instances: ")
    assert all(difference in lines[0] for difference in launcher.FALLBACK_DIFFERENCES)


@pytest.mark.slow
def test_sm_num_cpus_is_the_share_of_the_cores_or_the_requests_own(backend, tmp_path, data):
    """SM_NUM_CPUS is this machine's share of the cores unless the request's Environment sets it; then that value is
    the job's everywhere a script reads it. The job's log says which it is and why."""
    seen = {}
    for override in (None, "8"):
        name = unique("cpus")
        environment = {"SMDIST_REPO": REPO, **({"SM_NUM_CPUS": override} if override else {})}
        submit(backend, tmp_path, name=name, source=os.path.join(FIXTURES, "contract"), entry="dump_env.py",
               inputs={"train": f"file://{data}/train"}, instance_count=2, environment=environment)
        d = wait(backend, "training", name)
        assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
        files = model_files(d["ModelArtifacts"]["S3ModelArtifacts"], tmp_path)
        seen[override] = ([json.loads(files[f"contract-{r}.json"])["env"] for r in range(2)],
                          [e.message for e in backend.log_events("training", name)[0]])
    share = max(1, (os.cpu_count() or 1) // 2)
    for expected, (envs, _log) in ((str(share), seen[None]), ("8", seen["8"])):
        for env in envs:
            assert env["SM_NUM_CPUS"] == expected and env["OMP_NUM_THREADS"] == expected
            assert json.loads(env["SM_TRAINING_ENV"])["num_cpus"] == int(expected)
    log = seen[None][1]
    assert f"SM_NUM_CPUS={share}: this machine's {os.cpu_count()} core(s) shared by 2 host(s), not the vCPUs of " \
           "ml.m5.xlarge; set environment={'SM_NUM_CPUS': ...} to give scripts another value" in log, log
    log = seen["8"][1]
    assert [m for m in log if m.startswith("SM_NUM_CPUS=")] == [
        "SM_NUM_CPUS=8: from the request's Environment (environment={'SM_NUM_CPUS': ...}), also SM_TRAINING_ENV's "
        "num_cpus and OMP_NUM_THREADS unless the Environment sets that"], log
    for bad in ("eight", "0"):  # refused before anything is written, naming the field
        with pytest.raises(SpecError, match=r"Environment\.SM_NUM_CPUS: .* Fix: set it to a string such as '8'"):
            submit(backend, tmp_path, name=unique("cpus"), source=os.path.join(FIXTURES, "contract"),
                   entry="dump_env.py", inputs={"train": f"file://{data}/train"}, environment={"SM_NUM_CPUS": bad})


@pytest.mark.slow
@pytest.mark.torch
def test_ddp_two_hosts_join_one_process_group(backend, tmp_path, data):
    pytest.importorskip("torch")
    name = unique("ddp")
    submit(backend, tmp_path, name=name, source=os.path.join(FIXTURES, "ddp"), entry="train.py",
           hps={"epochs": 2}, distribution={"torch_distributed": {"enabled": True}},
           inputs={"train": {"s3_uri": f"file://{data}/train", "distribution": "ShardedByS3Key"}},
           metric_definitions=[{"Name": "train:loss", "Regex": r"train_loss=([0-9.]+)"}],
           checkpoint_s3_uri=f"file://{tmp_path}/ckpt")
    d = wait(backend, "training", name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    events, _ = backend.log_events("training", name)
    lines = [e for e in events if "allreduce_sum" in e.message]
    assert {e.host for e in lines} == {"algo-1", "algo-2"}
    assert all("allreduce_sum=3.0 world_size=2" in e.message for e in lines)  # 1 + 2 from both ranks
    meta = json.loads(model_files(d["ModelArtifacts"]["S3ModelArtifacts"], tmp_path)["meta.json"])
    assert meta == {"world_size": 2, "allreduce_sum": 3.0}
    assert d["FinalMetricDataList"][0]["MetricName"] == "train:loss"


@pytest.mark.slow
def test_failing_host_fails_the_job_and_ends_the_others(backend, tmp_path, data):
    name = unique("fail")
    submit(backend, tmp_path, name=name, source=os.path.join(FIXTURES, "contract"), entry="dump_env.py",
           hps={"fail-host-rank": 1, "sleep": 120}, inputs={"train": f"file://{data}/train"},
           environment={"SMDIST_REPO": REPO})
    started = time.time()
    d = wait(backend, "training", name, timeout=60)
    assert d["TrainingJobStatus"] == "Failed" and time.time() - started < 45
    reason = d["FailureReason"]
    assert reason.startswith("AlgorithmError:") and "algo-2" in reason and "ExitCode 3" in reason
    assert "simulated crash" in reason
    state = json.loads((backend.job_dir("training", name) / "state.json").read_text())
    for pid in state["host_pids"].values():
        assert launcher.tree(pid) == [], "a process of the failed job is still running"
    assert "ModelArtifacts" not in d


@pytest.mark.slow
def test_stop_ends_every_process(backend, tmp_path, data):
    name = unique("stop")
    submit(backend, tmp_path, name=name, source=os.path.join(FIXTURES, "contract"), entry="dump_env.py",
           hps={"sleep": 300}, inputs={"train": f"file://{data}/train"}, environment={"SMDIST_REPO": REPO})
    deadline = time.time() + 60
    while "Training" != backend.describe("training", name)["SecondaryStatus"] and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)
    backend.stop("training", name)
    assert backend.describe("training", name)["TrainingJobStatus"] in ("Stopping", "Stopped")
    d = wait(backend, "training", name, timeout=60)
    assert d["TrainingJobStatus"] == "Stopped" and d["SecondaryStatus"] == "Stopped"
    state = json.loads((backend.job_dir("training", name) / "state.json").read_text())
    for pid in state["host_pids"].values():
        assert launcher.tree(pid) == []
    backend.stop("training", name)  # stopping a stopped job is a no-op


@pytest.mark.slow
def test_duplicate_name_and_missing_job(backend, tmp_path, data):
    name = unique("dup")
    submit(backend, tmp_path, name=name, source=os.path.join(FIXTURES, "contract"), entry="dump_env.py",
           inputs={"train": f"file://{data}/train"}, instance_count=1, environment={"SMDIST_REPO": REPO})
    with pytest.raises(BackendError) as info:
        submit(backend, tmp_path, name=name, source=os.path.join(FIXTURES, "contract"), entry="dump_env.py",
               inputs={"train": f"file://{data}/train"}, instance_count=1)
    assert info.value.code == "ValidationException" and "already exists" in str(info.value)
    wait(backend, "training", name)
    with pytest.raises(JobNotFound):
        backend.describe("training", "no-such-job")


def test_unrunnable_requests_are_refused_before_anything_is_written(backend, tmp_path):
    plan = build_training(job_name=unique("pipe"), role=ROLE, output_path=f"file://{tmp_path}/out",
                          image_uri="1.dkr.ecr.us-east-1.amazonaws.com/x:1", entry_point="t.py",
                          inputs={"train": f"file://{tmp_path}"}, input_mode="Pipe")
    with pytest.raises(SpecError, match="Pipe mode"):
        backend.submit("training", plan.request)
    assert not backend.store.root.exists() or not list(backend.store.root.rglob("request.json"))


@pytest.mark.slow
def test_source_archive_with_traversal_is_rejected(backend, tmp_path, data):
    """A sourcedir.tar.gz member '../evil.py' must not be written outside the host's code directory."""
    import io

    name = unique("tar")
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point="dump_env.py",
                          source_dir=os.path.join(FIXTURES, "contract"),
                          image_uri="1.dkr.ecr.us-east-1.amazonaws.com/x:1",
                          inputs={"train": f"file://{data}/train"})
    tar_path = plan.source_uri[len("file://"):]
    os.makedirs(os.path.dirname(tar_path))
    with tarfile.open(tar_path, "w:gz") as tar:
        body = b"print('pwned')\n"
        info = tarfile.TarInfo("../evil.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    backend.submit("training", plan.request)
    d = wait(backend, "training", name)
    assert d["TrainingJobStatus"] == "Failed"
    assert "outside the destination" in d["FailureReason"] or "evil.py" in d["FailureReason"]
    assert not list(backend.job_dir("training", name).rglob("evil.py"))


@pytest.mark.slow
@pytest.mark.torch
def test_example_ddp_script_retried_after_its_last_checkpoint_still_saves_its_model(backend, tmp_path, data):
    """A retry of a growing-batch stage restores the checkpoint its failed try wrote at the stage's last epoch
    (SageMaker copies checkpoint_s3_uri back at start): the example script has no epoch left to train and
    must still save the model, as on SageMaker, not fail the retry on an unset loss."""
    pytest.importorskip("torch")
    common = dict(source=os.path.join(REPO, "dags", "scripts", "torch_ddp"), entry="train.py",
                  hps={"epochs": 1, "batch_size": 8}, distribution={"torch_distributed": {"enabled": True}},
                  inputs={"train": {"s3_uri": f"file://{data}/train", "distribution": "ShardedByS3Key"}},
                  checkpoint_s3_uri=f"file://{tmp_path}/ckpt")
    losses = []
    for attempt in ("first", "retry"):
        name = unique(attempt)
        submit(backend, tmp_path, name=name, **common)
        d = wait(backend, "training", name)
        assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
        files = model_files(d["ModelArtifacts"]["S3ModelArtifacts"], tmp_path)
        assert "model.pt" in files
        losses.append(json.loads(files["training.json"])["final_train_loss"])
    events, _ = backend.log_events("training", name)
    assert any("resumed from checkpoint at epoch 1" in e.message for e in events)
    assert losses[1] == losses[0]  # the retry reports the loss its checkpoint recorded


@pytest.mark.slow
def test_a_blocking_wait_wakes_at_each_change_of_the_job_not_at_its_next_look(backend, tmp_path, monkeypatch):
    """The operators' blocking wait on a local job: with its own look at the state file every 60 s, it still
    sees every change of a real job at once (inotify on the job's directory), so the job's end ends the wait."""
    import airflow_smdist.backends.local as local

    monkeypatch.setattr(local, "STATE_POLL_SECONDS", 60.0)
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hello')\n")
    name = unique("wake")
    submit(backend, tmp_path, name=name, source=str(src), entry="train.py", instance_count=1)
    started, seen = time.monotonic(), []
    while (d := backend.describe("training", name))["TrainingJobStatus"] == "InProgress":
        seen.append(d["SecondaryStatus"])
        backend.wait_for_change("training", name, 120)
        assert time.monotonic() - started < 40, f"a change was not seen until the 60 s look: {seen}"
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")


@pytest.mark.slow
def test_a_change_between_describe_and_the_wait_ends_the_wait(backend, tmp_path):
    """A job that changed after the operator described it, but before it began to wait, is not waited on for
    the next change (there may be none: here the job has ended and its supervisor exited)."""
    from airflow_smdist.backends.local.store import read_json, write_json_atomic

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hello')\n")
    name = unique("race")
    submit(backend, tmp_path, name=name, source=str(src), entry="train.py", instance_count=1)
    wait(backend, "training", name)
    job_dir = backend.job_dir("training", name)
    deadline = time.monotonic() + 30
    while backend._supervisor_pid(job_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    backend.describe("training", name)
    state = read_json(job_dir / "state.json")
    write_json_atomic(job_dir / "state.json", {**state, "note": "changed after the describe"})
    t = time.monotonic()
    backend.wait_for_change("training", name, 30)
    assert time.monotonic() - t < 10, "the wait missed the change made before it began"
