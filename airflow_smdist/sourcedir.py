"""Pack a script-mode source directory as ``sourcedir.tar.gz`` and upload it, as the SageMaker SDK does."""

from __future__ import annotations

from collections.abc import Iterator

import hashlib
import os
import tarfile
import tempfile
from pathlib import Path

from airflow_smdist.specs.errors import SpecError
from airflow_smdist.storage import Storage

EXCLUDED = {"__pycache__", ".git", ".ipynb_checkpoints"}


#: What ``include_runtime`` adds: ``import airflow_smdist.runtime`` then works inside any container
#: (both files import only the standard library), without installing the provider (and Airflow) there.
RUNTIME_FILES = ("airflow_smdist/__init__.py", "airflow_smdist/runtime/__init__.py")


def pack_source_dir(source: str, dest_tar: str | os.PathLike[str], include_runtime: bool = False) -> list[str]:
    """Tar ``source`` (a directory, or one file) into ``dest_tar``; returns the archive's member names.

    Symbolic links are stored as the files (and directories) they point to, as the SDK's ``create_tar_file``
    (``dereference=True``) does: the archive must work where the links' targets do not exist."""
    src = _existing(source)
    names: list[str] = []
    with tarfile.open(dest_tar, "w:gz", dereference=True) as tar:
        if include_runtime:
            package_root = Path(__file__).resolve().parent.parent
            for rel in RUNTIME_FILES:
                tar.add(package_root / rel, arcname=rel)
                names.append(rel)
        for full, arc in _members(src):
            tar.add(full, arcname=arc)
            names.append(arc)
    return names


def _existing(source: str) -> Path:
    src = Path(source)
    if not src.exists():
        raise SpecError("source_dir", f"{source!r} does not exist.", "give the directory holding the entry point.")
    return src


def _members(src: Path) -> Iterator[tuple[Path, str]]:
    """(path, name in the archive) of each file of ``src`` (a directory, or one file), in archive order."""
    if src.is_file():
        yield src, src.name
        return
    for dirpath, dirs, files in os.walk(src, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in EXCLUDED)
        for f in sorted(files):
            if f.endswith(".pyc"):
                continue
            full = Path(dirpath) / f
            arc = full.relative_to(src).as_posix()
            if not full.exists():
                raise SpecError("source_dir", f"{arc!r} is a symbolic link to {os.readlink(full)!r}, which does "
                                "not exist.", "remove the link or make its target exist.")
            yield full, arc


def source_digest(source: str) -> str:
    """A hash of what :func:`pack_source_dir` packs from ``source``: the names and contents of its files
    (not their times), so the same code gives the same digest wherever and whenever it is packed."""
    src = _existing(source)
    h = hashlib.sha256()
    for full, arc in _members(src):
        h.update(arc.encode() + b"\0" + hashlib.sha256(full.read_bytes()).digest())
    return h.hexdigest()[:16]


def upload_source(source: str, entry_point: str | None, uri: str, storage: Storage | None = None,
                  include_runtime: bool = False) -> str:
    """Pack and upload ``source`` to ``uri`` (``.../source/sourcedir.tar.gz``). Checks the entry point is in it."""
    with tempfile.TemporaryDirectory(prefix="smdist-src-") as tmp:
        tar_path = os.path.join(tmp, "sourcedir.tar.gz")
        names = pack_source_dir(source, tar_path, include_runtime=include_runtime)
        if entry_point and Path(source).is_dir() and entry_point not in names:
            raise SpecError("entry_point", f"{entry_point!r} is not in source_dir {source!r}.",
                            f"use one of {sorted(n for n in names if n.endswith(('.py', '.sh')))[:10]}.")
        (storage or Storage()).upload(tar_path, uri)
    return uri
