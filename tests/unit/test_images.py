"""The image lookup answers from the image tables packaged in airflow_smdist/specs/image_tables/, without the
SageMaker SDK: its answer must be ``image_uris.retrieve``'s, for every framework, version and Python version
the builders accept, on every instance family their operations accept (and the same error where retrieve
refuses); the packaged tables must be the installed SDK's (a stale refresh fails here); and the builders must
work where the SDK cannot be imported at all (it does not install beside Airflow 3 on Python 3.12+).

The tests that compare with the SDK skip where it is absent; the others run everywhere."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from functools import lru_cache, partial

import pytest

from airflow_smdist.specs import images
from airflow_smdist.specs.builtin_algorithms import ALGORITHMS, algorithm_image_uri
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.specs.images import framework_image_uri, smp_container_version
from airflow_smdist.specs.processing import SCRIPT_FRAMEWORKS, script_image_uri, spark_image_uri
from airflow_smdist.specs.transform import INFERENCE_FRAMEWORKS, inference_image_uri
from airflow_smdist.specs.validate import enum_values

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGIONS = ("us-east-1", "eu-west-1", "cn-north-1", "il-central-1", "us-gov-west-1", "xx-nowhere-1")
_FAMILY = re.compile(r"^ml[\._]([a-z\d\-]+)\.?\w*$")
SMP = {"torch_distributed": {"enabled": True}, "smdistributed": {"modelparallel": {"enabled": True}}}


def one_type_per_family(operation: str, member: str) -> list[str]:
    """An instance type of every family the operation accepts: retrieve's answer depends on the family only."""
    seen: dict[str, str] = {}
    for t in sorted(enum_values(operation, member)):
        seen.setdefault(_FAMILY.match(t)[1], t)
    return sorted(seen.values())


TRAINING_TYPES = one_type_per_family("CreateTrainingJob", "ResourceConfig.InstanceType")
PROCESSING_TYPES = one_type_per_family("CreateProcessingJob", "ProcessingResources.ClusterConfig.InstanceType")
TRANSFORM_TYPES = one_type_per_family("CreateTransformJob", "TransformResources.InstanceType")


def load_refresh_script():
    spec = importlib.util.spec_from_file_location("refresh_image_tables",
                                                  os.path.join(REPO, "scripts", "refresh_image_tables.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the oracle ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sdk():
    """``sagemaker.core.image_uris`` with its JSON file and botocore endpoint reads memoized (it re-reads them
    on every call, which would make this module take minutes); retrieve never mutates what they return."""
    image_uris = pytest.importorskip("sagemaker.core.image_uris")
    from sagemaker.core import common_utils

    patch = pytest.MonkeyPatch()
    patch.setattr(image_uris, "config_for_framework", lru_cache(maxsize=None)(image_uris.config_for_framework))
    patch.setattr(common_utils, "_botocore_resolver", lru_cache(maxsize=None)(common_utils._botocore_resolver))
    yield image_uris
    patch.undo()


def outcome(fn, *args, **kwargs):
    try:
        return ("uri", fn(*args, **kwargs))
    except (ValueError, KeyError) as exc:
        return ("error", type(exc).__name__, str(exc))


@pytest.fixture(scope="module")
def both(sdk):
    """``lookup_image_uri`` and ``retrieve`` on the same arguments: the same URI, or the same error."""
    def check(framework, region, **kwargs):
        ours = outcome(images.lookup_image_uri, framework, region, **kwargs)
        theirs = outcome(sdk.retrieve, framework, region, **kwargs)
        assert ours == theirs, (framework, region, kwargs)
        return ours[0]
    return check


@pytest.fixture(scope="module")
def agree(sdk):
    """A builder's answer against ``retrieve``'s: its URI, or a SpecError carrying retrieve's message."""
    def check(build, framework, region, **kwargs):
        try:
            ours = ("uri", build())
        except SpecError as exc:
            ours = ("error", str(exc))
        try:
            theirs = ("uri", sdk.retrieve(framework, region, **kwargs))
        except (ValueError, KeyError) as exc:
            theirs = ("error", str(exc).strip())
        assert ours[0] == theirs[0], (ours, theirs, framework, region, kwargs)
        assert ours[0] == "error" and theirs[1] in ours[1] or ours == theirs, (ours, theirs, framework, kwargs)
        return ours[0]
    return check


def scope_versions(framework, scope):
    config = images._config(framework)
    config = config if "versions" in config else config[scope]
    return config, list(config["versions"]) + list(config.get("version_aliases", {}))


def version_config(config, version):
    return config["versions"][config.get("version_aliases", {}).get(version, version)]


def py_versions(vc):
    return vc.get("py_versions") or [k for k in vc if k.startswith("py")] or [None]


# -- every answer the builders give is retrieve's --------------------------------------------------------------
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "sklearn", "xgboost"])
def test_training_images_equal_retrieve(agree, framework):
    config, versions = scope_versions(framework, "training")
    seen = set()
    for version in versions:
        for py in py_versions(version_config(config, version)) + [None, "py2"]:
            for instance in TRAINING_TYPES:
                seen.add(agree(partial(framework_image_uri, framework, version, py, instance, "us-east-1"),
                               framework, "us-east-1", version=version, py_version=py, instance_type=instance,
                               image_scope="training"))
    agree(partial(framework_image_uri, framework, "0.0.1", "py3", "ml.m5.xlarge", "us-east-1"),
          framework, "us-east-1", version="0.0.1", py_version="py3", instance_type="ml.m5.xlarge",
          image_scope="training")
    assert seen == {"uri", "error"}


def test_huggingface_training_images_equal_retrieve(agree):
    config, versions = scope_versions("huggingface", "training")
    uris = 0
    for version in versions:
        vc = version_config(config, version)
        bases = [k for k in vc if k != "version_aliases"] + list(vc.get("version_aliases", {})) + ["pytorch0.1"]
        for base in bases:
            full = vc.get(vc.get("version_aliases", {}).get(base, base)) or {}
            for py in py_versions(full) + [None]:
                for instance in TRAINING_TYPES:
                    uris += agree(partial(framework_image_uri, "huggingface", version, py, instance, "us-east-1",
                                          base_framework_version=base),
                                  "huggingface", "us-east-1", version=version, base_framework_version=base,
                                  py_version=py, instance_type=instance, image_scope="training") == "uri"
    assert uris > len(versions)


def test_smp_images_equal_retrieve(agree):
    """SMP v2 (framework ``pytorch-smp``), with the CUDA container version the builder picks."""
    _config, versions = scope_versions("pytorch-smp", "training")
    uris = 0
    for version in versions + ["9.9"]:
        for py in ("py310", "py311", "py312", None):
            for instance in TRAINING_TYPES:
                cv = smp_container_version(version, instance)
                uris += agree(partial(framework_image_uri, "pytorch", version, py, instance, "us-east-1",
                                      distribution=SMP),
                              "pytorch-smp", "us-east-1", version=version, py_version=py, instance_type=instance,
                              image_scope="training", container_version=cv, distribution=SMP) == "uri"
    assert uris


@pytest.mark.parametrize("framework", sorted(SCRIPT_FRAMEWORKS))
def test_processing_script_images_equal_retrieve(agree, framework):
    config, versions = scope_versions(framework, "training")
    for version in versions:
        for py in py_versions(version_config(config, version)) + [None]:
            for instance in PROCESSING_TYPES:
                agree(partial(script_image_uri, framework, version, "eu-west-1", instance, py), framework, "eu-west-1",
                      version=version, py_version=py or SCRIPT_FRAMEWORKS[framework], instance_type=instance,
                      image_scope="training")


def test_spark_processing_images_equal_retrieve(agree):
    _config, versions = scope_versions("spark", "processing")
    for version in versions + ["9.9"]:
        for py, cv in [(None, None), ("py39", "1"), ("py312", "1.2"), ("py27", "1")]:
            for instance in PROCESSING_TYPES:
                agree(partial(spark_image_uri, version, "us-west-2", instance, py, cv), "spark", "us-west-2",
                      version=version, py_version=py, container_version=cv and f"v{cv}", instance_type=instance)
    for region in REGIONS:
        agree(partial(spark_image_uri, "3.5", region, "ml.m5.xlarge"), "spark", region, version="3.5",
              instance_type="ml.m5.xlarge")


@pytest.mark.parametrize("framework", sorted(INFERENCE_FRAMEWORKS))
def test_transform_serving_images_equal_retrieve(agree, framework):
    """Serving images, on every family CreateTransformJob accepts (inf2 and trn1 take the Neuron tables)."""
    config, versions = scope_versions(framework, "inference")
    uris = 0
    for version in versions:
        for py in py_versions(version_config(config, version)) + [None]:
            for instance in TRANSFORM_TYPES:
                uris += agree(partial(inference_image_uri, framework, version, instance, "us-east-1", py), framework,
                              "us-east-1", version=version, py_version=py or INFERENCE_FRAMEWORKS[framework],
                              instance_type=instance, image_scope="inference") == "uri"
    assert uris or framework == "huggingface"  # huggingface serving images need a base framework


def test_builtin_algorithm_images_equal_retrieve(agree):
    checked = 0
    for algo in ALGORITHMS.values():
        if algo.image_framework is None:
            continue
        _, versions = scope_versions(algo.image_framework, "training")
        for version in versions + ["0.0-0", None]:
            for region in ("us-east-1", "ap-southeast-4", "cn-northwest-1", "xx-nowhere-1"):
                agree(partial(algorithm_image_uri, algo.name, region, version), algo.image_framework, region,
                      version=version or algo.default_version, image_scope="training")
                checked += 1
    assert checked > 50


@pytest.mark.parametrize("framework", sorted(set(images.FRAMEWORKS) | {"pytorch-smp", "spark", "kmeans"}))
def test_every_region_of_the_tables_equals_retrieve(both, framework):
    config = images._config(framework)
    scope = "processing" if framework == "spark" else "training"
    config, versions = scope_versions(framework, scope)
    vc = version_config(config, versions[-1])
    base = None
    if framework == "huggingface":
        base = next(k for k in vc if k != "version_aliases")
        vc = vc[base]
    py = py_versions(vc)[0]
    vc = vc.get(py) or vc
    instance = "ml.m5.xlarge" if "cpu" in (config.get("processors") or vc.get("processors") or []) else "ml.p5.48xlarge"
    kwargs = {"container_version": smp_container_version(versions[-1], instance)} if framework == "pytorch-smp" else {}
    for region in sorted(vc["registries"]) + ["xx-nowhere-1"]:
        assert both(framework, region, version=versions[-1], py_version=py, instance_type=instance,
                    image_scope=scope, base_framework_version=base, **kwargs) == \
            ("error" if region == "xx-nowhere-1" else "uri"), region


def test_branches_beyond_the_builders_equal_retrieve(both):
    """What lookup_image_uri answers that the builders never ask: Graviton families, local-mode types, a
    missing version or scope, p4d / smdistributed container versions, a container_version the tag lacks."""
    for instance in ("ml.c6g.xlarge", "ml.r6gd.2xlarge", "ml.m5.xlarge", "local", "local_gpu", "ml.p4d.24xlarge",
                     "neuron", "ml.trn1.2xlarge", "ml.inf2.xlarge", "nonsense", None):
        for framework, version, py in (("pytorch", "1.13.1", "py39"), ("tensorflow", "2.11.0", "py39"),
                                       ("xgboost", "1.5-1", None), ("xgboost", "1.7-1", None),
                                       ("sklearn", "1.0-1", "py3"), ("tensorflow", "2.3", "py37"),
                                       ("pytorch", "1.6", "py3"), ("pytorch", None, "py3")):
            for scope in ("training", "inference", None):
                both(framework, "us-east-1", version=version, py_version=py, instance_type=instance,
                     image_scope=scope)
                both(framework, "us-east-1", version=version, py_version=py, instance_type=instance,
                     image_scope=scope, distribution={"smdistributed": {"dataparallel": {"enabled": True}}})
    for framework in ("pytorch", "xgboost", "spark"):
        both(framework, "us-east-1", version=None, instance_type="ml.m5.xlarge", image_scope="training")
    both("pytorch", "us-east-1", version="2.5.1", py_version="py311", instance_type="ml.m5.xlarge",
         image_scope="training", container_version="1.1")
    both("sklearn", "us-east-1", version="1.2-1", py_version="py3", instance_type="ml.m5.xlarge")


# -- the packaged tables are the SDK's -------------------------------------------------------------------------
def test_packaged_tables_equal_the_sdks_files(sdk):
    """Content and key order (retrieve depends on both) of every packaged table; run
    scripts/refresh_image_tables.py when this fails after an SDK upgrade."""
    folder = os.path.join(os.path.dirname(sdk.__file__), "image_uri_config")
    for framework in images.packaged_frameworks():
        with open(os.path.join(folder, f"{framework}.json")) as f:
            theirs = json.load(f)
        ours = images._config.__wrapped__(framework)
        assert json.dumps(ours) == json.dumps(theirs), f"{framework}: run scripts/refresh_image_tables.py"
    refresh = load_refresh_script()
    assert images.packaged_frameworks() == [fw for fw in refresh.frameworks()
                                            if os.path.exists(os.path.join(folder, f"{fw}.json"))]


def test_the_package_carries_the_table_of_every_framework_the_builders_look_up():
    """No SDK needed: SOURCE.json, the files on disk and the builders' frameworks agree."""
    source = images.table_source()
    assert source["distribution"] == "sagemaker-core" and source["folder"] == "sagemaker/core/image_uri_config"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", source["version"])
    on_disk = sorted(n[:-5] for n in os.listdir(images.config_dir()) if n.endswith(".json") and n != "SOURCE.json")
    assert on_disk == images.packaged_frameworks() == sorted(source["sha256"])
    assert images.packaged_frameworks() == load_refresh_script().frameworks()
    for framework in on_disk:
        with open(os.path.join(images.config_dir(), f"{framework}.json")) as f:
            assert f.read().count("\n") == 1  # compact: one line


# -- no SDK ------------------------------------------------------------------------------------------------------
BLOCK_SDK = """
import sys
class NoSageMaker:
    def find_spec(self, name, path=None, target=None):
        if name == "sagemaker" or name.startswith(("sagemaker.", "sagemaker_core")):
            raise ImportError(f"{name} is blocked in this test")
        return None
sys.meta_path.insert(0, NoSageMaker())
"""

BUILDERS = """
import json
from airflow_smdist.specs.builtin_algorithms import algorithm_image_uri
from airflow_smdist.specs.images import framework_image_uri
from airflow_smdist.specs.processing import script_image_uri, spark_image_uri, build_pyspark_processing
from airflow_smdist.specs.training import training_request
from airflow_smdist.specs.transform import inference_image_uri
SMP = {"torch_distributed": {"enabled": True}, "smdistributed": {"modelparallel": {"enabled": True}}}
uris = [
    framework_image_uri("pytorch", "2.5.1", "py311", "ml.g5.xlarge", "us-east-1"),
    framework_image_uri("tensorflow", "2.16", "py310", "ml.c5.xlarge", "eu-west-1"),
    framework_image_uri("huggingface", "4.49.0", "py311", "ml.g5.xlarge", "us-east-1",
                        base_framework_version="pytorch2.5.1"),
    framework_image_uri("sklearn", "1.2-1", "py3", "ml.m5.xlarge", "us-east-1"),
    framework_image_uri("xgboost", "1.7-1", None, "ml.m5.xlarge", "us-east-1"),
    framework_image_uri("pytorch", "2.3.1", "py311", "ml.p4d.24xlarge", "us-east-1", distribution=SMP),
    framework_image_uri("pytorch", "2.5.1", "py38", "ml.trn1.2xlarge", "us-east-1"),
    algorithm_image_uri("xgboost", "us-east-1"),
    algorithm_image_uri("kmeans", "eu-west-1"),
    spark_image_uri("3.5", "eu-west-1", "ml.m5.xlarge"),
    spark_image_uri("3.5", "us-east-1", "ml.m5.xlarge", "py312", "1.0"),
    script_image_uri("sklearn", "1.2-1", "eu-west-1", "ml.m5.xlarge"),
    inference_image_uri("pytorch", "2.5.1", "ml.g5.xlarge", "us-east-1", "py311"),
    inference_image_uri("xgboost", "1.7-1", "ml.inf2.xlarge", "us-east-1"),
    training_request(job_name="j", role="arn:aws:iam::123456789012:role/R", framework="pytorch",
                     framework_version="2.5.1", py_version="py311", entry_point="train.py",
                     source_dir="s3://b/src/sourcedir.tar.gz", output_path="s3://b/out",
                     instance_type="ml.g5.xlarge", region="us-east-1")["AlgorithmSpecification"]["TrainingImage"],
    build_pyspark_processing(job_name="s", role="arn:aws:iam::123456789012:role/R", framework_version="3.5",
                             submit_app="s3://b/app.py", region="us-east-1").request["AppSpecification"]["ImageUri"],
]
try:
    framework_image_uri("pytorch", "9.9", "py311", "ml.g5.xlarge", "us-east-1")
except ValueError as exc:
    uris.append(f"{type(exc).__name__}: {exc.field}")
print(json.dumps({"uris": uris, "sdk": sorted(m for m in sys.modules if m.startswith("sagemaker"))}))
"""


_ECR = "763104351884.dkr.ecr.us-east-1.amazonaws.com"
NO_SDK_URIS = [
    f"{_ECR}/pytorch-training:2.5.1-gpu-py311",
    "763104351884.dkr.ecr.eu-west-1.amazonaws.com/tensorflow-training:2.16-cpu-py310",
    f"{_ECR}/huggingface-pytorch-training:2.5.1-transformers4.49.0-gpu-py311-cu124-ubuntu22.04",
    "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3",
    "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
    "658645717510.dkr.ecr.us-east-1.amazonaws.com/smdistributed-modelparallel:2.3.1-gpu-py311-cu121",
    f"{_ECR}/pytorch-training-neuron:1.11.0-neuron-py38-sdk2.4.0-ubuntu20.04",
    "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
    "438346466558.dkr.ecr.eu-west-1.amazonaws.com/kmeans:1",
    "571004829621.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-spark-processing:3.5-cpu",
    "173754725891.dkr.ecr.us-east-1.amazonaws.com/sagemaker-spark-processing:3.5-cpu-py312-v1.0",
    "141502667606.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3",
    f"{_ECR}/pytorch-inference:2.5.1-gpu-py311",
    "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
    f"{_ECR}/pytorch-training:2.5.1-gpu-py311",
    "173754725891.dkr.ecr.us-east-1.amazonaws.com/sagemaker-spark-processing:3.5-cpu",
    "SpecError: framework_version",
]


def test_builders_look_images_up_without_the_sdk():
    """In a fresh interpreter where ``import sagemaker`` raises ImportError, every builder that looks an image
    up still answers, with the URIs retrieve gives (test_the_no_sdk_answers_are_the_sdks), and no ``sagemaker``
    module is loaded."""
    out = subprocess.run([sys.executable, "-c", BLOCK_SDK + BUILDERS], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": REPO}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    blocked = json.loads(out.stdout.strip().splitlines()[-1])
    assert blocked["sdk"] == []
    assert blocked["uris"] == NO_SDK_URIS


def test_the_no_sdk_answers_are_the_sdks(sdk):
    """The literal URIs above are retrieve's (the builders' arguments, as the tests above hand them to it)."""
    r = sdk.retrieve
    smp = smp_container_version("2.3.1", "ml.p4d.24xlarge")
    assert NO_SDK_URIS[:-1] == [
        r("pytorch", "us-east-1", version="2.5.1", py_version="py311", instance_type="ml.g5.xlarge",
          image_scope="training"),
        r("tensorflow", "eu-west-1", version="2.16", py_version="py310", instance_type="ml.c5.xlarge",
          image_scope="training"),
        r("huggingface", "us-east-1", version="4.49.0", py_version="py311", instance_type="ml.g5.xlarge",
          image_scope="training", base_framework_version="pytorch2.5.1"),
        r("sklearn", "us-east-1", version="1.2-1", py_version="py3", instance_type="ml.m5.xlarge",
          image_scope="training"),
        r("xgboost", "us-east-1", version="1.7-1", instance_type="ml.m5.xlarge", image_scope="training"),
        r("pytorch-smp", "us-east-1", version="2.3.1", py_version="py311", instance_type="ml.p4d.24xlarge",
          image_scope="training", container_version=smp, distribution=SMP),
        r("pytorch", "us-east-1", version="2.5.1", py_version="py38", instance_type="ml.trn1.2xlarge",
          image_scope="training"),
        r("xgboost", "us-east-1", version="1.7-1", image_scope="training"),
        r("kmeans", "eu-west-1", image_scope="training"),
        r("spark", "eu-west-1", version="3.5", instance_type="ml.m5.xlarge"),
        r("spark", "us-east-1", version="3.5", instance_type="ml.m5.xlarge", py_version="py312",
          container_version="v1.0"),
        r("sklearn", "eu-west-1", version="1.2-1", py_version="py3", instance_type="ml.m5.xlarge",
          image_scope="training"),
        r("pytorch", "us-east-1", version="2.5.1", py_version="py311", instance_type="ml.g5.xlarge",
          image_scope="inference"),
        r("xgboost", "us-east-1", version="1.7-1", instance_type="ml.inf2.xlarge", image_scope="inference"),
        r("pytorch", "us-east-1", version="2.5.1", py_version="py311", instance_type="ml.g5.xlarge",
          image_scope="training"),
        r("spark", "us-east-1", version="3.5", instance_type="ml.m5.xlarge"),
    ]


# -- errors ------------------------------------------------------------------------------------------------------
def test_unknown_version_is_a_spec_error_naming_the_field():
    with pytest.raises(SpecError) as info:
        images.framework_image_uri("pytorch", "9.9", "py311", "ml.g5.xlarge", "us-east-1")
    assert info.value.field == "framework_version"
    assert "Supported pytorch version(s):" in str(info.value)
    assert "pass image_uri explicitly" in info.value.fix and images.table_source()["version"] in info.value.fix


@pytest.mark.parametrize("kwargs, field", [
    ({"model_id": "huggingface-llm-falcon-7b-bf16"}, "model_id"),
    ({"accelerator_type": "ml.eia2.medium"}, "accelerator_type"),
    ({"training_compiler_config": object()}, "training_compiler_config"),
    ({"sdk_version": "sdk2.4.0"}, "sdk_version"),
])
def test_what_the_tables_cannot_answer_asks_for_image_uri(kwargs, field):
    with pytest.raises(SpecError) as info:
        images.retrieve_image_uri("pytorch", "us-east-1", version="2.5.1", py_version="py311",
                                  instance_type="ml.g5.xlarge", image_scope="training", **kwargs)
    assert info.value.field == field and "pass image_uri explicitly" in info.value.fix
    # defaults of retrieve's other arguments are no request for them
    assert images.lookup_image_uri("pytorch", "us-east-1", version="2.5.1", py_version="py311",
                                   instance_type="ml.g5.xlarge", image_scope="training", model_id=None,
                                   tolerate_vulnerable_model=False).endswith(":2.5.1-gpu-py311")


def test_a_framework_without_a_packaged_table_asks_for_image_uri():
    with pytest.raises(SpecError) as info:
        images.retrieve_image_uri("sagemaker-tritonserver", "us-east-1", version="24.09")
    assert info.value.field == "image_uri" and "pass image_uri explicitly" in info.value.fix
    assert "pytorch" in info.value.problem  # it lists what is packaged
    with pytest.raises(SpecError):
        images.lookup_image_uri("../../etc/passwd", "us-east-1")


@pytest.mark.parametrize("call, field, fragment", [
    (lambda: framework_image_uri("tensorflow", "2.16", "py310", "ml.trn1.2xlarge", "us-east-1"), "instance_type",
     "Supported framework(s) for Trainium instances: pytorch."),
    (lambda: framework_image_uri("pytorch", "2.0.1", "py310", "ml.p2.xlarge", "us-east-1"), "instance_type",
     "P2 instances have been deprecated"),
    (lambda: framework_image_uri("huggingface", "4.49.0", "py311", "ml.g5.xlarge", "us-east-1",
                                 base_framework_version="pytorch0.1"), "base_framework_version",
     "Unsupported base framework: pytorch0.1"),
])
def test_retrieve_refusals_name_the_field(call, field, fragment):
    with pytest.raises(SpecError) as info:
        call()
    assert info.value.field == field and fragment in info.value.problem
