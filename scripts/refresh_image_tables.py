"""Copy the SageMaker SDK's image URI tables into the package: ``airflow_smdist/specs/image_tables/``.

What it copies: the JSON files the SageMaker Python SDK resolves image URIs from,
``sagemaker/core/image_uri_config/<framework>.json`` of the ``sagemaker-core`` distribution (which the SDK 3.x
meta-package ``sagemaker`` installs; SDK 2.x kept them in ``sagemaker/image_uri_config/``), one file per
framework that the provider's builders look up, content unchanged and written as compact JSON (key order
kept: ``image_uris.retrieve`` depends on it, e.g. for the latest version and in its error messages). It also
writes ``SOURCE.json``: the distribution and version copied from, the folder, the frameworks and each
original file's SHA-256.

Why: ``airflow_smdist.specs.images`` resolves every image URI from these copies, so the provider installs
without the SDK (``sagemaker-core`` needs ``importlib-metadata<7``, which Airflow 3 on Python 3.12+ cannot have;
issue 30) and a task never pays the SDK's import.

Which frameworks (:func:`frameworks`): those ``retrieve_image_uri`` / ``framework_image_uri`` are called
with across ``airflow_smdist/specs``: the training frameworks (``images.FRAMEWORKS``) and SMP v2
(``pytorch-smp``), the processing script frameworks (``processing.SCRIPT_FRAMEWORKS``) and Spark, the
serving frameworks of transform (``transform.INFERENCE_FRAMEWORKS``), the built-in algorithms with an SDK
image (``builtin_algorithms.ALGORITHMS``), and the ``<framework>-neuron`` tables that ``retrieve`` switches to
for PyTorch and Hugging Face on Trainium/Inferentia instance types. ``instance_gpu_info.json`` is not copied:
``specs/instances.py`` keeps its own GPU table (tests/unit/test_instances.py compares it with the SDK's).

Run it with a Python that has the SDK (``pip install 'airflow-smdist[sdk]'``), from the repository root::

    python scripts/refresh_image_tables.py            # rewrite the tables
    python scripts/refresh_image_tables.py --check    # exit 1 if the packaged tables differ from the SDK's

tests/unit/test_images.py fails when the packaged tables and the installed SDK's differ (a stale refresh).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLES = os.path.join(REPO, "airflow_smdist", "specs", "image_tables")
SOURCE = "SOURCE.json"
#: The SDK's source folder, as cited in SOURCE.json and the docs.
SDK_FOLDER = "sagemaker/core/image_uri_config"
DISTRIBUTION = "sagemaker-core"


def frameworks() -> list[str]:
    """The frameworks the provider's builders hand to ``image_uris.retrieve`` (see the module docstring)."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from airflow_smdist.specs import images, processing, transform
    from airflow_smdist.specs.builtin_algorithms import ALGORITHMS

    names = set(images.FRAMEWORKS) | set(processing.SCRIPT_FRAMEWORKS) | set(transform.INFERENCE_FRAMEWORKS)
    names |= {"spark", "pytorch-smp"}
    names |= {a.image_framework for a in ALGORITHMS.values() if a.image_framework}
    # retrieve reads <framework>-neuron for huggingface and pytorch on inf*/trn* instance types
    names |= {f"{fw}-neuron" for fw in list(names) if fw in images.NEURON_FRAMEWORKS}
    return sorted(names)


def sdk_folder() -> str:
    """The installed SDK's ``image_uri_config`` folder (imports the SDK: this script's only user of it)."""
    from sagemaker.core import image_uris

    return os.path.join(os.path.dirname(os.path.abspath(image_uris.__file__)), "image_uri_config")


def compact(data: object) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False) + "\n"


def build() -> dict[str, str]:
    """File name -> text of every file this script writes into the tables folder."""
    from importlib.metadata import version

    folder = sdk_folder()
    files: dict[str, str] = {}
    hashes: dict[str, str] = {}
    for name in frameworks():
        path = os.path.join(folder, f"{name}.json")
        if not os.path.exists(path):  # e.g. a <framework>-neuron table the SDK does not have
            continue
        with open(path, "rb") as f:
            raw = f.read()
        hashes[name] = hashlib.sha256(raw).hexdigest()
        files[f"{name}.json"] = compact(json.loads(raw))
    source = {"distribution": DISTRIBUTION, "version": version(DISTRIBUTION), "folder": SDK_FOLDER,
              "sdk": {"sagemaker": _version_or_none("sagemaker")}, "frameworks": sorted(hashes),
              "sha256": hashes}
    files[SOURCE] = json.dumps(source, indent=1) + "\n"
    return files


def _version_or_none(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when a table differs")
    args = parser.parse_args(argv)
    files = build()
    existing = {n for n in os.listdir(TABLES) if n.endswith(".json")} if os.path.isdir(TABLES) else set()
    stale = sorted(existing - set(files))
    changed = sorted(n for n, text in files.items() if not _same(os.path.join(TABLES, n), text))
    if args.check:
        for name in changed + stale:
            print(f"differs from the SDK: {name}")
        return 1 if changed or stale else 0
    os.makedirs(TABLES, exist_ok=True)
    for name in stale:
        os.remove(os.path.join(TABLES, name))
    for name, text in files.items():
        with open(os.path.join(TABLES, name), "w", encoding="utf-8") as f:
            f.write(text)
    size = sum(os.path.getsize(os.path.join(TABLES, n)) for n in files)
    print(f"wrote {len(files)} files ({size} bytes) to {os.path.relpath(TABLES, REPO)}; "
          f"changed: {', '.join(changed) or 'none'}; removed: {', '.join(stale) or 'none'}")
    return 0


def _same(path: str, text: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read() == text
    except FileNotFoundError:
        return False


if __name__ == "__main__":
    sys.exit(main())
