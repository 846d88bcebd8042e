"""Pack a script-mode source directory as ``sourcedir.tar.gz`` and upload it, as the SageMaker SDK does."""

from __future__ import annotations

import os
import tarfile
import tempfile
from pathlib import Path

from airflow_smdist.specs.errors import SpecError
from airflow_smdist.storage import Storage

EXCLUDED = {"__pycache__", ".git", ".ipynb_checkpoints"}


def pack_source_dir(source: str, dest_tar: str | os.PathLike) -> list[str]:
    """Tar ``source`` (a directory, or one file) into ``dest_tar``; returns the archive's member names."""
    src = Path(source)
    if not src.exists():
        raise SpecError("source_dir", f"{source!r} does not exist.", "give the directory holding the entry point.")
    names: list[str] = []
    with tarfile.open(dest_tar, "w:gz") as tar:
        if src.is_file():
            tar.add(src, arcname=src.name)
            return [src.name]
        for dirpath, dirs, files in os.walk(src):
            dirs[:] = sorted(d for d in dirs if d not in EXCLUDED)
            for f in sorted(files):
                if f.endswith(".pyc"):
                    continue
                full = Path(dirpath) / f
                arc = full.relative_to(src).as_posix()
                tar.add(full, arcname=arc)
                names.append(arc)
    return names


def upload_source(source: str, entry_point: str | None, uri: str, storage: Storage | None = None) -> str:
    """Pack and upload ``source`` to ``uri`` (``.../source/sourcedir.tar.gz``). Checks the entry point is in it."""
    with tempfile.TemporaryDirectory(prefix="smdist-src-") as tmp:
        tar_path = os.path.join(tmp, "sourcedir.tar.gz")
        names = pack_source_dir(source, tar_path)
        if entry_point and Path(source).is_dir() and entry_point not in names:
            raise SpecError("entry_point", f"{entry_point!r} is not in source_dir {source!r}.",
                            f"use one of {sorted(n for n in names if n.endswith(('.py', '.sh')))[:10]}.")
        (storage or Storage()).upload(tar_path, uri)
    return uri
