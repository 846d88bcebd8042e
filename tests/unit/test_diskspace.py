"""The local backend's disk helpers (backends/local/diskspace.py): the reserve file, which disk a path is on,
its biggest entries and the message of a full one."""

from __future__ import annotations

import errno
import os

from airflow_smdist.backends.local import diskspace


def test_reserve_is_allocated_and_released(tmp_path):
    path = diskspace.make_reserve(tmp_path)
    assert path == tmp_path / diskspace.RESERVE_NAME
    st = path.stat()
    assert st.st_size == diskspace.RESERVE_BYTES
    assert st.st_blocks * 512 >= diskspace.RESERVE_BYTES  # written, not sparse: deleting it frees space
    assert st.st_mode & 0o777 == 0o600
    assert diskspace.release_reserve(tmp_path) is True
    assert not path.exists()
    assert diskspace.release_reserve(tmp_path) is False


def test_is_disk_full():
    assert diskspace.is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert diskspace.is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not diskspace.is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not diskspace.is_disk_full(ValueError("x"))
    assert not diskspace.is_disk_full(None)


def test_says_disk_full():
    assert diskspace.says_disk_full("error: failed to write to file `/c/x`: No space left on device (os error 28)")
    assert diskspace.says_disk_full("OSError: [Errno 28] No space left on device")
    assert not diskspace.says_disk_full("No solution found when resolving dependencies")


def test_biggest_entries_are_files_biggest_first_without_following_links(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "big.bin").write_bytes(os.urandom(300_000))
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "a" / "b" / "mid.bin").write_bytes(os.urandom(100_000))
    (tmp_path / "small.txt").write_bytes(b"x" * 5000)
    (tmp_path / "tiny.txt").write_bytes(b"x")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "huge.bin").write_bytes(os.urandom(1_000_000))
    (tmp_path / "link").symlink_to(outside)
    (tmp_path / "filelink").symlink_to(outside / "huge.bin")
    diskspace.make_reserve(tmp_path / "a" / "b", 400_000)  # a job's reserve is not what filled the disk
    got = diskspace.biggest_entries(tmp_path)
    assert [os.path.basename(p) for p, _ in got] == ["big.bin", "mid.bin", "small.txt"]
    assert got[0][1] >= 300_000
    assert diskspace.biggest_entries(tmp_path / "missing") == []


def test_biggest_entries_is_bounded(tmp_path):
    for i in range(50):
        (tmp_path / f"f{i}").write_bytes(b"x" * (i + 1) * 4096)
    assert len(diskspace.biggest_entries(tmp_path, max_entries=10)) == 3
    assert diskspace.biggest_entries(tmp_path, max_seconds=0) == []


def test_file_system_finds_the_mount():
    assert diskspace.file_system("/proc/self") == ("/proc", "proc")
    mount, kind = diskspace.file_system("/")
    assert mount == "/" and kind != "?"


def test_human():
    assert diskspace.human(812) == "812 B"
    assert diskspace.human(300 * 1024) == "300 KiB"
    assert diskspace.human(int(7.5 * 1024 * 1024)) == "7.5 MiB"
    assert diskspace.human(3 * 1024 ** 3) == "3.0 GiB"


def test_full_message_names_the_disk_its_biggest_entries_and_the_fix(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "filler.bin").write_bytes(os.urandom(200_000))
    message = diskspace.full_message(tmp_path)
    free, total = diskspace.usage(tmp_path)
    _mount, kind = diskspace.file_system(tmp_path)
    assert message.startswith(f"No space left on device: the job root {tmp_path} ({kind}, "
                              f"{free // diskspace.MIB} MiB free of {total // diskspace.MIB} MiB) is full; "
                              f"the biggest entries: {tmp_path / 'job' / 'filler.bin'} (")
    assert message.endswith(f"Fix: free space or set the job root elsewhere ({diskspace.JOB_ROOT_SETTING}).")
    cache = diskspace.full_message(tmp_path, "the runtime cache", "SMDIST_RUNTIME_CACHE")
    assert "the runtime cache" in cache and cache.endswith("(SMDIST_RUNTIME_CACHE).")


def test_looks_full(tmp_path):
    assert not diskspace.looks_full(tmp_path)  # this machine's test disk has room
    assert not diskspace.looks_full(tmp_path / "missing")  # unknown: not full
