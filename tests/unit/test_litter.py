"""litter: the uploads journal and the reclaim of what a killed supervisor left (issue 34, hole 7)."""

from __future__ import annotations

import os
import subprocess
import sys

from airflow_smdist.backends.local.job import litter
from airflow_smdist.storage import Storage, UploadJournal


def job(root, name, pid_line):
    d = root / "training" / name
    (d / litter.PACK_TMP).mkdir(parents=True)
    (d / litter.PACK_TMP / "model.tar.gz").write_bytes(b"half")
    (d / "supervisor.pid").write_text(pid_line)
    return d


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_journal_entries_end_and_done(tmp_path):
    j = UploadJournal(tmp_path / "uploads.jsonl")
    assert j.finished() and j.open_entries() == []
    a, b = j.begin("file:///x/a"), j.begin("file:///x/b")
    j.note(a, partial="/x/a.1-ff.smdist-partial")
    j.end(b)
    assert [(e["uri"], e.get("partial")) for e in j.open_entries()] == [("file:///x/a", "/x/a.1-ff.smdist-partial")]
    assert not j.finished()
    j.mark_done()
    assert j.finished() and j.open_entries() == []


def test_reclaim_removes_a_dead_supervisors_litter_and_keeps_a_live_ones(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    partial = out / "model.tar.gz.123-abcd.smdist-partial"
    partial.write_bytes(b"half")
    dead = job(tmp_path / "root", "dead", f"{dead_pid()} 1.00")
    UploadJournal(dead / litter.JOURNAL).note(UploadJournal(dead / litter.JOURNAL).begin(f"file://{out}/model.tar.gz"),
                                              partial=str(partial))
    import psutil

    me = psutil.Process()
    alive = job(tmp_path / "root", "alive", f"{me.pid} {me.create_time():.2f}")
    said = litter.reclaim(tmp_path / "root")
    assert not (dead / litter.PACK_TMP).exists() and not partial.exists()
    assert UploadJournal(dead / litter.JOURNAL).finished()
    assert (alive / litter.PACK_TMP / "model.tar.gz").exists()
    assert len(said) == 2
    assert litter.reclaim(tmp_path / "root") == []


def test_a_journaled_file_upload_leaves_no_partial_and_settles(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3000))
    j = UploadJournal(tmp_path / "uploads.jsonl")
    Storage(journal=j).upload(src, f"file://{tmp_path}/dest/obj.bin")
    assert (tmp_path / "dest" / "obj.bin").read_bytes() == src.read_bytes()
    assert not list((tmp_path / "dest").glob("*.smdist-partial"))
    assert j.open_entries() == [] and not j.finished()
    litter.settle(tmp_path)
    assert j.finished()
