"""The image lookup reads the SDK's JSON tables as data: its answer must be ``image_uris.retrieve``'s, for every
framework, version and Python version the builders accept (and the same error where retrieve refuses)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_smdist.specs import images
from airflow_smdist.specs.builtin_algorithms import ALGORITHMS
from airflow_smdist.specs.processing import SCRIPT_FRAMEWORKS

sdk = pytest.importorskip("sagemaker.core.image_uris")
sdk_retrieve = sdk.retrieve

INSTANCES = ("ml.m5.xlarge", "ml.g5.2xlarge", "ml.c5.xlarge")


@pytest.fixture(autouse=True, scope="module")
def sdk_without_rereading_files():
    """The oracle unchanged, but its JSON file and botocore endpoint reads memoized (it re-reads them on
    every call, which would make this module take minutes). retrieve never mutates what they return."""
    from functools import lru_cache

    from sagemaker.core import common_utils

    patch = pytest.MonkeyPatch()
    patch.setattr(sdk, "config_for_framework", lru_cache(maxsize=None)(sdk.config_for_framework))
    patch.setattr(common_utils, "_botocore_resolver", lru_cache(maxsize=None)(common_utils._botocore_resolver))
    yield
    patch.undo()
REGIONS = ("us-east-1", "eu-west-1", "cn-north-1", "il-central-1", "us-gov-west-1", "xx-nowhere-1")


def outcome(fn, *args, **kwargs):
    try:
        return ("uri", fn(*args, **kwargs))
    except ValueError as exc:
        return ("error", str(exc))


def both(framework, region, **kwargs):
    ours = outcome(images.lookup_image_uri, framework, region, **kwargs)
    theirs = outcome(sdk_retrieve, framework, region, **kwargs)
    assert ours == theirs, (framework, region, kwargs)
    return ours


def scope_versions(framework, scope):
    config = images._config(framework)
    config = config if "versions" in config else config[scope]
    return config, list(config["versions"]) + list(config.get("version_aliases", {}))


def py_versions(version_config):
    return version_config.get("py_versions") or [k for k in version_config if k.startswith("py")] or [None]


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_framework_training_images_equal_retrieve(framework):
    config, versions = scope_versions(framework, "training")
    seen = set()
    for version in versions:
        vc = config["versions"][config.get("version_aliases", {}).get(version, version)]
        for py in py_versions(vc) + ["py2"]:
            for instance in INSTANCES:
                seen.add(both(framework, "us-east-1", version=version, py_version=py, instance_type=instance,
                              image_scope="training")[0])
    for region in REGIONS:
        both(framework, region, version=versions[-1], py_version=py_versions(config["versions"][
            config.get("version_aliases", {}).get(versions[-1], versions[-1])])[0], instance_type="ml.g5.xlarge",
            image_scope="training")
    both(framework, "us-east-1", version="0.0.1", py_version="py3", instance_type="ml.m5.xlarge", image_scope="training")
    assert seen == {"uri", "error"}


def test_huggingface_training_images_equal_retrieve():
    config, versions = scope_versions("huggingface", "training")
    uris = 0
    for version in versions:
        vc = config["versions"][config["version_aliases"].get(version, version)]
        bases = [k for k in vc if k != "version_aliases"] + list(vc.get("version_aliases", {})) + ["pytorch0.1"]
        for base in bases:
            for py in py_versions(vc.get(vc.get("version_aliases", {}).get(base, base)) or {}):
                for instance in ("ml.g5.2xlarge", "ml.m5.xlarge"):
                    uris += both("huggingface", "us-east-1", version=version, base_framework_version=base,
                                 py_version=py, instance_type=instance, image_scope="training")[0] == "uri"
    assert uris > len(versions)


def test_spark_processing_images_equal_retrieve():
    _config, versions = scope_versions("spark", "processing")
    for version in versions + ["9.9"]:
        for py, cv in [(None, None), ("py39", "v1"), ("py312", "v1.2"), ("py27", "v1")]:
            for instance in ("ml.m5.xlarge", "ml.g5.xlarge"):
                both("spark", "us-west-2", version=version, py_version=py, container_version=cv,
                     instance_type=instance)
    for region in REGIONS:
        both("spark", region, version="3.5", instance_type="ml.m5.xlarge")


@pytest.mark.parametrize("framework", sorted(SCRIPT_FRAMEWORKS))
def test_processing_script_images_equal_retrieve(framework):
    _config, versions = scope_versions(framework, "training")
    for version in versions:
        for py in ("py3", None):
            for instance in ("ml.m5.xlarge", "ml.g5.xlarge"):
                both(framework, "us-east-1", version=version, py_version=py, instance_type=instance,
                     image_scope="training")


def test_builtin_algorithm_images_equal_retrieve():
    checked = 0
    for algo in ALGORITHMS.values():
        if algo.image_framework is None:
            continue
        _, versions = scope_versions(algo.image_framework, "training")
        for version in versions + ["0.0-0"]:
            for region in ("us-east-1", "ap-southeast-4", "cn-northwest-1", "xx-nowhere-1"):
                both(algo.image_framework, region, version=version, image_scope="training")
                checked += 1
    assert checked > 50


def test_rare_branches_are_the_sdks_answer():
    """Neuron, Graviton and p2 families go through the SDK itself: same answer, same errors."""
    for instance in ("ml.trn1.2xlarge", "ml.inf2.xlarge", "ml.c6g.xlarge", "ml.p2.xlarge", "ml.p4d.24xlarge"):
        for framework, version, py in (("pytorch", "1.13.1", "py39"), ("tensorflow", "2.11.0", "py39"),
                                       ("xgboost", "1.5-1", None)):
            both(framework, "us-east-1", version=version, py_version=py, instance_type=instance,
                 image_scope="training")


def test_builders_look_images_up_without_importing_the_sdk(tmp_path):
    """What a task pays: the framework image of a training request, in a fresh interpreter, without
    ``sagemaker.core.image_uris`` (seconds to import) ever loaded."""
    code = (
        "import sys\n"
        "from airflow_smdist.specs.images import framework_image_uri\n"
        "from airflow_smdist.specs.processing import spark_image_uri\n"
        "print(framework_image_uri('pytorch', '2.5.1', 'py311', 'ml.g5.xlarge', 'us-east-1'))\n"
        "print(spark_image_uri('3.5', 'eu-west-1', 'ml.m5.xlarge'))\n"
        "print(sorted(m for m in sys.modules if m.startswith('sagemaker')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == sdk_retrieve("pytorch", "us-east-1", version="2.5.1", py_version="py311",
                                  instance_type="ml.g5.xlarge", image_scope="training")
    assert out[1] == sdk_retrieve("spark", "eu-west-1", version="3.5", instance_type="ml.m5.xlarge")
    assert out[2] == "[]"


def test_unknown_version_is_a_spec_error_naming_the_field():
    from airflow_smdist.specs.errors import SpecError

    with pytest.raises(SpecError) as info:
        images.framework_image_uri("pytorch", "9.9", "py311", "ml.g5.xlarge", "us-east-1")
    assert info.value.field == "framework_version"
    assert "Supported pytorch version(s):" in str(info.value)
