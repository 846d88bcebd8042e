"""inference.safe_extract: the one extractor of the archives a job receives (sourcedir.tar.gz in training,
model.tar.gz and sourcedir.tar.gz in transform and the batch runner). Nothing lands outside its destination,
with tarfile's ``data`` filter (Python 3.11.4+) and without it (3.11.0-3.11.3, which pyproject allows)."""

from __future__ import annotations

import io
import os
import re
import stat
import tarfile
from pathlib import Path

import pytest

from airflow_smdist.runtime import batch_runner as inference
from airflow_smdist.runtime.batch_runner import extract_model, safe_extract

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["filter", "no-filter"])
def tar_filters(request, monkeypatch):
    """Both ways: this Python's tarfile as it is, and one whose extractall has no ``filter=`` (a TypeError, as
    Python < 3.11.4 raises) and extracts whatever it is given, as the old tarfile did."""
    if request.param == "no-filter":
        real = tarfile.TarFile.extractall

        def old_extractall(self, path=".", members=None, *, numeric_owner=False, **kwargs):
            if "filter" in kwargs:
                raise TypeError("extractall() got an unexpected keyword argument 'filter'")
            return real(self, path, members, numeric_owner=numeric_owner, filter="fully_trusted")

        monkeypatch.setattr(tarfile.TarFile, "extractall", old_extractall)
    return request.param


def make_tar(path: Path, members: list[tuple[str, str, object]]) -> Path:
    """``(name, kind, payload)``: kind "file" (payload: bytes), "dir", "sym" / "hard" (payload: link name),
    "fifo"; a file's payload may be ``(bytes, mode)``."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            data = None
            if kind == "file":
                data, mode = payload if isinstance(payload, tuple) else (payload, 0o644)
                info.size, info.mode = len(data), mode
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind in ("sym", "hard"):
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = payload
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


HOSTILE = {
    "dot-dot": [("ok.py", "file", b"x"), ("../escaped.txt", "file", b"pwned")],
    "symlink out": [("evil", "sym", "../outside")],
    "absolute symlink": [("evil", "sym", "/etc/passwd")],
    "write through a symlink": [("evil", "sym", ".."), ("evil/escaped.txt", "file", b"pwned")],
    "hard link out": [("evil", "hard", "../outside/secret")],
    "fifo": [("pipe", "fifo", None)],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_safe_extract_refuses_a_hostile_archive_with_and_without_tar_filters(tmp_path, tar_filters, case):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret")
    archive = make_tar(tmp_path / "hostile.tar.gz", HOSTILE[case])
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises((ValueError, tarfile.TarError)):
        safe_extract(archive, dest)
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert not (tmp_path / "escaped.txt").exists()
    assert not any(p.is_symlink() and not p.resolve().is_relative_to(dest.resolve()) for p in dest.rglob("*"))


def test_safe_extract_strips_or_refuses_absolute_members(tmp_path, tar_filters):
    """An absolute member never lands at its absolute path: refused without filters, re-rooted in ``dest`` by the
    ``data`` filter."""
    target = tmp_path / "abs-target.txt"
    archive = make_tar(tmp_path / "abs.tar.gz", [(str(target), "file", b"pwned")])
    dest = tmp_path / "dest"
    dest.mkdir()
    try:
        safe_extract(archive, dest)
    except ValueError as exc:
        assert tar_filters == "no-filter" and "would land outside" in str(exc)
    assert not target.exists()


def test_safe_extract_keeps_what_a_sourcedir_or_model_holds(tmp_path, tar_filters):
    """A benign archive extracts whole either way: nested files, an executable script (its mode), a link
    inside, a directory; no set-id bit survives."""
    archive = make_tar(tmp_path / "ok.tar.gz", [
        ("code", "dir", None), ("code/inference.py", "file", b"print(1)\n"),
        ("run.sh", "file", (b"#!/bin/sh\n", 0o4755)), ("model.pt", "file", b"weights"),
        ("latest", "sym", "model.pt"), ("code/again.py", "hard", "code/inference.py")])
    dest = tmp_path / "dest"
    dest.mkdir()
    safe_extract(archive, dest)
    assert (dest / "code" / "inference.py").read_bytes() == b"print(1)\n"
    assert (dest / "code" / "again.py").read_bytes() == b"print(1)\n"
    assert os.readlink(dest / "latest") == "model.pt" and (dest / "latest").read_bytes() == b"weights"
    mode = stat.S_IMODE((dest / "run.sh").stat().st_mode)
    assert mode & 0o100 and not mode & (stat.S_ISUID | stat.S_ISGID)
    assert (dest / "run.sh").stat().st_uid == os.geteuid()


def test_extract_model_without_tar_filters_refuses_a_model_that_escapes(tmp_path, tar_filters):
    """Where a transform job meets it: model.tar.gz into the model directory."""
    archive = make_tar(tmp_path / "model.tar.gz", [("model.pt", "file", b"w"), ("../../escaped.txt", "file", b"x")])
    with pytest.raises((ValueError, tarfile.TarError)):
        extract_model(str(archive), str(tmp_path / "a" / "model"))
    assert not (tmp_path / "escaped.txt").exists()


def test_every_archive_a_job_receives_goes_through_safe_extract():
    """One extractor, no copies: ``extractall`` appears in the package only inside safe_extract."""
    pkg = REPO / "airflow_smdist"
    calls = {str(p.relative_to(REPO)): len(re.findall(r"\.extractall\(", p.read_text())) for p in pkg.rglob("*.py")}
    assert {k: v for k, v in calls.items() if v} == {"airflow_smdist/runtime/batch_runner.py": 2}
    source = (REPO / "airflow_smdist/runtime/batch_runner.py").read_text()
    body = source[source.index("def safe_extract("):source.index("def _checked_members(")]
    assert body.count(".extractall(") == 2
    training = (REPO / "airflow_smdist/backends/local/job/training.py").read_text()
    assert "safe_extract(source," in training
    assert inference.extract_model.__code__.co_names.count("safe_extract") == 1
