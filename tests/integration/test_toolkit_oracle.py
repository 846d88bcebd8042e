"""AWS's own container toolkits are the oracle of the local backend's container contract.

A local training job records, on every host, the environment and command line its entry point got. AWS's
``sagemaker-training`` toolkit (5.1.x, in a test-only venv built once and cached) then reads the very same
``/opt/ml`` files of that host (``SAGEMAKER_BASE_DIR``) and says what it would give the entry point
(``Environment().to_env_vars()``) and which command its runner builds. The two are compared key by key.
The inference codecs are compared with ``sagemaker-inference``'s the same way.

Every difference allowed is in :data:`DELIBERATE`, the one list of them, each with its reason: anything else
fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job.runtimes import file_lock, uv_binary, uv_index_env, uv_source_args
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.training import build_training

REPO = Path(__file__).resolve().parents[2]
ORACLE = REPO / "tests" / "fixtures" / "oracle"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-cpu-py311"
TOOLKITS = ("sagemaker-training>=5.1,<5.2", "sagemaker-inference>=1.10,<2")
#: what the PyTorch training image's Dockerfile sets (ENV), which the toolkit reads
IMAGE_ENV = {"SAGEMAKER_TRAINING_MODULE": "sagemaker_pytorch_container.training:main"}
HYPERPARAMETERS = {"epochs": 3, "learning-rate": 0.1, "batch.size": 32, "flag": True, "name": "adam",
                   "nested": {"b": 2, "a": 1}, "x": "1"}

#: differences on purpose: key (SM_TRAINING_ENV.<field> for a field of SM_TRAINING_ENV) -> why
DELIBERATE = {
    "SM_NUM_CPUS": "a simulated host gets its share of this machine's cores (at least 1); the container has "
                   "the instance's",
    "SM_TRAINING_ENV.num_cpus": "as SM_NUM_CPUS",
    "command.python": "the job's runtime interpreter stands for the image's python",
    "command.master_port": "7777 unless another job holds it on this machine (then a free port, logged)",
}


@pytest.fixture(scope="session")
def toolkit_python() -> str:
    """A venv with AWS's toolkits, built once per machine with uv (cached; ~25 s the first time)."""
    root = Path(os.environ.get("SMDIST_ORACLE_VENV") or Path.home() / ".cache" / "airflow-smdist" / "oracle-venv")
    python = root / "bin" / "python"
    marker = root / ".toolkits"
    with file_lock(root.parent / f".{root.name}.lock"):
        if not (marker.exists() and marker.read_text() == "\n".join(TOOLKITS)):
            uv = uv_binary()
            subprocess.run([uv, "venv", "--quiet", "--clear", "--python", sys.executable, str(root)], check=True)
            subprocess.run([uv, "pip", "install", "--quiet", "--python", str(python), *uv_source_args(), *TOOLKITS],
                           check=True, env={**os.environ, **uv_index_env()})
            marker.write_text("\n".join(TOOLKITS))
    return str(python)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """Two 2-host jobs (the plain process runner and torch_distributed) on the worker's runtime."""
    tmp = tmp_path_factory.mktemp("oracle")
    backend = LocalBackend(tmp / "jobs")
    data = tmp / "data"
    for ch in ("train", "validation"):
        (data / ch).mkdir(parents=True)
        for i in range(2):
            (data / ch / f"part-{i}.csv").write_text(f"{i},1\n")
    names = {}
    for kind, distribution in (("process", None), ("torch_distributed", {"torch_distributed": {"enabled": True}})):
        name = f"oracle-{kind.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
        plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp}/out", entry_point="dump_host.py",
                              source_dir=str(ORACLE), image_uri=IMAGE, instance_type="ml.m5.xlarge",
                              instance_count=2, hyperparameters=HYPERPARAMETERS, distribution=distribution,
                              inputs={"train": f"file://{data}/train", "validation": f"file://{data}/validation"},
                              environment={"MY_SETTING": "on"})
        upload_source(plan.source_dir, "dump_host.py", plan.source_uri)
        backend.submit("training", plan.request)
        names[kind] = name
    import time

    deadline = time.time() + 300
    for name in names.values():
        while backend.describe("training", name)["TrainingJobStatus"] == "InProgress" and time.time() < deadline:
            time.sleep(0.3)
        d = backend.describe("training", name)
        assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    return backend, names, tmp


def host_records(backend, name, tmp) -> dict[str, dict]:
    d = backend.describe("training", name)
    path = d["ModelArtifacts"]["S3ModelArtifacts"][len("file://"):]
    with tarfile.open(path) as tar:
        return {m.name[len("host-"):-len(".json")]: json.load(tar.extractfile(m)) for m in tar.getmembers()}


def toolkit_view(toolkit_python, host_dir: Path, local_env: dict, kind: str) -> dict:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(host_dir), "SAGEMAKER_BASE_DIR": str(host_dir),
           "TRAINING_JOB_NAME": local_env["TRAINING_JOB_NAME"], **IMAGE_ENV, "MY_SETTING": "on"}
    out = subprocess.run([toolkit_python, str(ORACLE / "toolkit_view.py"), kind], env=env, capture_output=True,
                         text=True, check=False, cwd=str(host_dir / "code"))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _decoded(value: str):
    try:
        return json.loads(value)
    except ValueError:
        return value


def compare(local: dict[str, str], theirs: dict[str, str]) -> dict[str, str]:
    """key -> how it differs, over the toolkit's keys and every SM_* key the local host got."""
    keys = set(theirs) | {k for k in local if k.startswith("SM_")}
    found = {}
    for key in sorted(keys):
        if key not in local:
            found[key] = f"missing locally (toolkit: {theirs[key]!r})"
        elif key not in theirs:
            found[key] = f"not set by the toolkit (local: {local[key]!r})"
        elif key == "SM_TRAINING_ENV":
            mine, its = json.loads(local[key]), json.loads(theirs[key])
            for field in sorted(set(mine) | set(its)):
                if mine.get(field, "<absent>") != its.get(field, "<absent>"):
                    found[f"SM_TRAINING_ENV.{field}"] = f"local {mine.get(field, '<absent>')!r} != toolkit " \
                                                        f"{its.get(field, '<absent>')!r}"
        elif _decoded(local[key]) != _decoded(theirs[key]):
            found[key] = f"local {local[key]!r} != toolkit {theirs[key]!r}"
    return found


def _normalized(view: dict, host_dir: Path, base: str) -> dict[str, str]:
    """The toolkit's values with its base directory (the host's tree) written as the local one."""
    return {k: v.replace(str(host_dir), base) if isinstance(v, str) else v for k, v in view["env"].items()}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["process", "torch_distributed"])
@pytest.mark.torch  # both kinds: the jobs fixture also runs the torchrun job
def test_host_environment_matches_the_training_toolkit_key_by_key(jobs, toolkit_python, kind):
    backend, names, tmp = jobs
    records = host_records(backend, names[kind], tmp)
    assert len(records) == 2
    unexpected = {}
    for host, rec in records.items():
        host_dir = _host_dir(backend, names[kind], host)
        local = rec["env"]
        view = toolkit_view(toolkit_python, host_dir, local, kind)
        theirs = _normalized(view, host_dir, local["SAGEMAKER_BASE_DIR"])
        diffs = compare(local, theirs)
        unexpected.update({f"{host} {k}": v for k, v in diffs.items() if k not in DELIBERATE})
        assert local["MY_SETTING"] == "on"  # the request's Environment reaches the entry point
    assert not unexpected, json.dumps(unexpected, indent=1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["process", "torch_distributed"])
@pytest.mark.torch
def test_entry_point_command_matches_the_toolkits_runner(jobs, toolkit_python, kind):
    backend, names, tmp = jobs
    for host, rec in host_records(backend, names[kind], tmp).items():
        host_dir = _host_dir(backend, names[kind], host)
        view = toolkit_view(toolkit_python, host_dir, rec["env"], kind)
        theirs = [a.replace(str(host_dir), rec["env"]["SAGEMAKER_BASE_DIR"]) for a in view["cmd"]]
        if kind == "process":
            # toolkit: [python, "--", entry, *args]; the python stands for the image's (command.python)
            assert os.path.basename(theirs[0]).startswith("python") and rec["cmd"][0] == rec["executable"]
            assert rec["cmd"][1:] == theirs[1:], (rec["cmd"], theirs)
        else:
            mine = rec["parent"]
            assert mine[1:3] == ["-m", "torch.distributed.run"], mine  # the module torchrun runs
            mine = ["torchrun", *mine[3:]]
            port = theirs.index("--master_port") + 1
            assert theirs[port] == "7777"
            theirs[port] = mine[port]  # command.master_port: deliberate (7777 unless taken)
            assert mine == theirs, (mine, theirs)
        assert rec["cwd"] == rec["env"]["SAGEMAKER_BASE_DIR"] + "/code" == \
            view["code_dir"].replace(str(host_dir), rec["env"]["SAGEMAKER_BASE_DIR"])


def _host_dir(backend, name: str, address: str) -> Path:
    state = json.loads((backend.job_dir("training", name) / "state.json").read_text())
    # SM_CURRENT_HOST: algo-N, or an address in fallback mode
    label = next(h["label"] for h in state["hosts"] if address in (h["address"], h["label"]))
    return backend.job_dir("training", name) / "hosts" / label


def test_inference_codecs_match_the_inference_toolkit(toolkit_python):
    engine = REPO / "airflow_smdist" / "runtime" / "batch_runner.py"
    out = subprocess.run([toolkit_python, str(ORACLE / "codecs_view.py"), str(engine)], capture_output=True,
                         text=True, check=False, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert len(result["encode"]) == 14 and len(result["decode"]) == 12
    for case, (theirs, mine) in result["encode"].items():
        assert mine == theirs, case
    for case, (theirs, mine) in result["decode"].items():
        assert mine == theirs, case
