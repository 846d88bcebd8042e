"""hostfs: the supervisor reads and writes a host's directory without following links out of it (issue 34)."""

from __future__ import annotations

import os

import pytest

from airflow_smdist.backends.local.job import hostfs


@pytest.fixture(params=["openat2", "walk"])
def mode(request, monkeypatch):
    monkeypatch.setattr(hostfs, "_openat2_missing", request.param == "walk")
    return request.param


@pytest.fixture
def host(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("SECRET")
    h = tmp_path / "host"
    (h / "model" / "sub").mkdir(parents=True)
    (h / "model" / "a.txt").write_text("a")
    (h / "model" / "sub" / "b.txt").write_text("b")
    os.symlink("a.txt", h / "model" / "inside-link")
    os.symlink("../model/sub", h / "model" / "subdir-link")
    os.symlink("/proc/self/environ", h / "model" / "environ")
    os.symlink(str(outside / "secret"), h / "model" / "abs-secret")
    os.symlink("../../outside/secret", h / "model" / "rel-secret")
    os.symlink(str(outside), h / "model" / "outdir")
    os.symlink("/proc/self/root/etc/passwd", h / "model" / "magic")
    os.symlink(str(outside), h / "checkpoints")
    return h, outside


def test_walk_yields_files_inside_and_skips_links_out(host, mode):
    h, _ = host
    said: list[str] = []
    got = {rel: f.read() for rel, f, _st in hostfs.walk(h, "model", say=said.append)}
    assert got == {"a.txt": b"a", "inside-link": b"a", "sub/b.txt": b"b", "subdir-link/b.txt": b"b"}
    assert {s.split(":")[0] for s in said} >= {"skipped model/environ", "skipped model/abs-secret",
                                                "skipped model/rel-secret", "skipped model/outdir",
                                                "skipped model/magic"}
    assert list(hostfs.walk(h, "checkpoints", say=said.append)) == []
    assert said[-1] == "skipped checkpoints: a link out of the host"


def test_read_and_write_never_leave(host, mode, tmp_path):
    h, outside = host
    assert hostfs.read_text(h, "model/a.txt") == "a"
    assert hostfs.read_text(h, "model/environ") is None
    assert hostfs.read_text(h, "model/abs-secret") is None
    assert hostfs.read_text(h, "model/rel-secret") is None
    os.symlink(str(tmp_path / "created-outside"), h / "model" / "dangling")
    with pytest.raises(OSError):
        hostfs.write_text(h, "model/dangling", "x")
    with pytest.raises(OSError):
        hostfs.write_text(h, "checkpoints/new", "x")
    with pytest.raises(OSError):
        hostfs.write_text(h, "model/abs-secret", "x")
    assert not (tmp_path / "created-outside").exists()
    assert not (outside / "new").exists()
    assert (outside / "secret").read_text() == "SECRET"
    hostfs.write_text(h, "output/deep/failure", "why")
    assert (h / "output" / "deep" / "failure").read_text() == "why"
