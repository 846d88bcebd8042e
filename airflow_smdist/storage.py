"""Object storage behind job requests: ``s3://`` through boto3 (any endpoint) and ``file://`` locally.

Used by the operators (uploading sourcedir.tar.gz) and by the local backend (staging channels, writing
model artifacts). boto3 is imported lazily. The S3 endpoint comes from ``endpoint_url`` or boto3's own
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` variables, so moto's server works in tests.

No key may escape its destination: :func:`safe_join` rejects ``..`` components and absolute keys.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO
from typing import TYPE_CHECKING
from typing import Any
from typing import Callable
from urllib.parse import unquote

from airflow_smdist.specs.errors import SpecError

if TYPE_CHECKING:
    import builtins

    from airflow_smdist.backends.base import Backend


@dataclass(frozen=True)
class StoredObject:
    uri: str
    key: str  # bucket key (s3) or absolute path (file)
    size: int
    #: what changes when the object does: its ETag (s3), or its size and mtime in nanoseconds (file)
    version: str = ""
    #: when it was last written, in seconds since the epoch (S3's LastModified, or the file's mtime); 0 unknown
    modified: float = 0.0


def _file_object(path: str) -> StoredObject:
    st = os.stat(path)
    return StoredObject("file://" + path, path, st.st_size, f"{st.st_size}:{st.st_mtime_ns}", st.st_mtime)


def parse_uri(uri: str, field: str = "uri") -> tuple[str, str, str]:
    """``s3://bucket/key`` -> ("s3", bucket, key); ``file:///abs/path`` -> ("file", "", "/abs/path")."""
    if not isinstance(uri, str) or "://" not in uri:
        raise SpecError(field, f"{uri!r} is not a URI.",
                        "use s3://bucket/prefix (or file:///abs/path on the local backend).")
    scheme, rest = uri.split("://", 1)
    if scheme == "s3":
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise SpecError(field, f"{uri!r} names no bucket.", "use s3://bucket/prefix.")
        return "s3", bucket, key
    if scheme == "file":
        path = unquote(rest)
        if not path.startswith("/"):
            raise SpecError(field, f"{uri!r} is not an absolute file:// URI.", "use file:///absolute/path.")
        return "file", "", path
    raise SpecError(field, f"scheme {scheme!r} of {uri!r} is not supported.",
                    "use s3:// (or file:// on the local backend).")


def join_uri(base: str, *parts: str) -> str:
    out = base.rstrip("/")
    for p in parts:
        out += "/" + p.strip("/")
    return out


def safe_join(root: str | os.PathLike[str], relative: str) -> Path:
    """``root/relative``, refusing keys that would land outside ``root`` (``..``, absolute keys)."""
    rel = PurePosixPath(relative)
    if rel.is_absolute() or relative.startswith("/"):
        raise SpecError("key", f"{relative!r} is an absolute key.", "object keys must be relative to their prefix.")
    if any(part == ".." for part in rel.parts):
        raise SpecError("key", f"{relative!r} contains '..'.",
                        "rename the object: keys with '..' could write outside the destination.")
    root_path = Path(root).resolve()
    target = (root_path / Path(*rel.parts)) if rel.parts else root_path
    if root_path != target.resolve() and root_path not in target.resolve().parents:
        raise SpecError("key", f"{relative!r} resolves outside {root_path}.",
                        "remove symbolic links from the destination.")
    return target


class Storage:
    """s3:// and file:// behind one small interface."""

    def __init__(self, endpoint_url: str | None = None, region_name: str | None = None, *, client: Any = None,
                 journal: UploadJournal | None = None) -> None:
        self.endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        self.region_name = region_name or os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")
        self._s3 = client  # an S3 client to use (e.g. from an Airflow aws connection), else made lazily
        #: where a job supervisor records each upload before it starts (what a kill -9 would leave behind)
        self.journal = journal

    @classmethod
    def for_backend(cls, backend: Backend) -> Storage:
        """Storage that reaches a backend's objects: the Airflow ``aws`` connection's S3 client (through the
        Amazon provider's S3Hook) for the sagemaker backend; the local backend's endpoint otherwise."""
        return backend.storage()

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            import boto3
            from botocore.config import Config

            self._s3 = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region_name or "us-east-1",
                config=Config(retries={"mode": "adaptive", "max_attempts": 10}),
            )
        return self._s3

    # -- listing ---------------------------------------------------------------------------------
    def list(self, prefix_uri: str) -> list[StoredObject]:
        """Every object whose key starts with the prefix (S3 semantics: a string prefix), sorted by key."""
        scheme, bucket, key = parse_uri(prefix_uri)
        if scheme == "s3":
            out = []
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
                for obj in page.get("Contents", []):
                    if obj["Key"].endswith("/") and obj["Size"] == 0:
                        continue  # "folder" placeholder objects
                    modified = obj.get("LastModified")
                    out.append(StoredObject(f"s3://{bucket}/{obj['Key']}", obj["Key"], obj["Size"],
                                            str(obj.get("ETag", "")).strip('"'),
                                            modified.timestamp() if modified else 0.0))
            return sorted(out, key=lambda o: o.key)
        # file:// follows S3's string-prefix semantics too, so a DAG sees the same objects on both
        # backends (file:///data/train also matches /data/train2/...); only matching entries are walked
        if key.endswith("/"):
            base, starts = Path(key), ""
        else:
            base, starts = Path(key).parent, Path(key).name
        if not base.is_dir():
            return []
        # symbolic links are not objects (an S3 sync of the directory would upload none; following them would
        # read outside the prefix), nor are the temporary files of writes in progress
        out = []
        for entry in sorted(os.listdir(base)):
            top = os.path.join(base, entry)
            if not entry.startswith(starts) or os.path.islink(top):
                continue
            if os.path.isfile(top):
                if not entry.endswith(PARTIAL):
                    out.append(_file_object(top))
                continue
            for dirpath, _dirs, files in os.walk(top):  # (does not descend into linked directories)
                for f in files:
                    full = os.path.join(dirpath, f)
                    if not os.path.islink(full) and not f.endswith(PARTIAL):
                        out.append(_file_object(full))
        return sorted(out, key=lambda o: o.key)

    def version(self, uri: str) -> str | None:
        """The object's version (see :class:`StoredObject`), or None when it cannot be read."""
        scheme, bucket, key = parse_uri(uri)
        try:
            if scheme == "file":
                return _file_object(key).version
            return str(self.s3.head_object(Bucket=bucket, Key=key).get("ETag", "")).strip('"') or None
        except Exception:  # noqa: BLE001 - a version is a hint; without one, nothing is compared
            return None

    def exists(self, uri: str) -> bool:
        scheme, bucket, key = parse_uri(uri)
        if scheme == "file":
            return os.path.exists(key)
        from botocore.exceptions import ClientError

        try:
            self.s3.head_object(Bucket=bucket, Key=key)
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    # -- transfer --------------------------------------------------------------------------------
    def download(self, uri: str, dest: str | os.PathLike[str]) -> None:
        scheme, bucket, key = parse_uri(uri)
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        if scheme == "file":
            shutil.copyfile(key, dest)
        else:
            self.s3.download_file(bucket, key, str(dest))

    def upload(self, src: str | os.PathLike[str], uri: str) -> None:
        if self.journal is not None:
            with open(src, "rb") as f:
                self.upload_fileobj(f, uri)
            return
        scheme, bucket, key = parse_uri(uri)
        if scheme == "file":
            Path(key).parent.mkdir(parents=True, exist_ok=True)
            _replace_whole(key, lambda tmp: shutil.copyfile(src, tmp))
        else:
            self.s3.upload_file(str(src), bucket, key)

    def upload_fileobj(self, f: BinaryIO, uri: str) -> None:
        """Upload an open file (from its current position to its end): a job supervisor uploads what it opened
        inside a host's directory (hostfs), never a path a job's link could redirect. With a journal, the
        temporary name (file://) or the multipart upload's id (s3://) is recorded before anything is written,
        so :mod:`~airflow_smdist.backends.local.job.litter` removes what a killed supervisor left."""
        scheme, bucket, key = parse_uri(uri)
        entry = self.journal.begin(uri) if self.journal is not None else None
        try:
            if scheme == "file":
                Path(key).parent.mkdir(parents=True, exist_ok=True)
                tmp = partial_name(key)
                if entry is not None:
                    self.journal.note(entry, partial=tmp)  # type: ignore[union-attr]
                _replace_whole(key, lambda _tmp: _copy_to(f, tmp), tmp=tmp)
            elif entry is None:
                self.s3.upload_fileobj(f, bucket, key)
            else:
                self._put_s3(f, bucket, key, entry)
        finally:
            if entry is not None:
                self.journal.end(entry)  # type: ignore[union-attr]

    def _put_s3(self, f: BinaryIO, bucket: str, key: str, entry: int) -> None:
        """boto3's managed upload (s3transfer: one PutObject, or a multipart upload from 8 MB on, its parts in
        threads, aborted by s3transfer itself when a part fails); the multipart upload's id goes into the
        journal as S3 answers CreateMultipartUpload (a botocore event), before any part is sent, so a supervisor
        killed meanwhile leaves an id that :mod:`~airflow_smdist.backends.local.job.litter` aborts."""
        journal = self.journal
        assert journal is not None

        def created(parsed: dict[str, Any], **_: object) -> None:
            if parsed.get("Bucket") == bucket and parsed.get("Key") == key and parsed.get("UploadId"):
                journal.note(entry, bucket=bucket, key=key, upload_id=parsed["UploadId"],
                             endpoint_url=self.endpoint_url, region=self.region_name)

        def part_sent(**_: object) -> None:
            pause_for_test("multipart")

        events = self.s3.meta.events
        ids = (f"smdist-journal-{entry}-create", f"smdist-journal-{entry}-part")
        events.register("after-call.s3.CreateMultipartUpload", created, unique_id=ids[0])
        events.register("after-call.s3.UploadPart", part_sent, unique_id=ids[1])
        try:
            self.s3.upload_fileobj(f, bucket, key)
        finally:
            events.unregister("after-call.s3.CreateMultipartUpload", unique_id=ids[0])
            events.unregister("after-call.s3.UploadPart", unique_id=ids[1])

    def read_bytes(self, uri: str) -> bytes:
        scheme, bucket, key = parse_uri(uri)
        if scheme == "file":
            return Path(key).read_bytes()
        data: bytes = self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return data

    def write_bytes(self, data: bytes, uri: str) -> None:
        scheme, bucket, key = parse_uri(uri)
        if scheme == "file":
            Path(key).parent.mkdir(parents=True, exist_ok=True)
            _replace_whole(key, lambda tmp: Path(tmp).write_bytes(data))
        else:
            self.s3.put_object(Bucket=bucket, Key=key, Body=data)

    def download_prefix(self, prefix_uri: str, dest: str | os.PathLike[str],
                        objects: builtins.list[StoredObject] | None = None) -> builtins.list[Path]:
        """Download the objects under ``prefix_uri`` into ``dest`` keeping their paths relative to the prefix.

        ``objects`` restricts it to a subset (a shard). Keys are checked with :func:`safe_join`."""
        objs = self.list(prefix_uri) if objects is None else objects
        written: builtins.list[Path] = []
        for obj in objs:
            rel = relative_key(prefix_uri, obj)
            target = safe_join(dest, rel)
            self.download(obj.uri, target)
            written.append(target)
        return written


PARTIAL = ".smdist-partial"


def partial_name(path: str) -> str:
    """The temporary name an object is written under before it is renamed into place: its own per writer
    (``<obj>.<pid>-<hex>.smdist-partial``), so two writers never share one and a journal can name it."""
    return f"{path}.{os.getpid()}-{os.urandom(4).hex()}{PARTIAL}"


def _copy_to(f: BinaryIO, tmp: str) -> None:
    with open(tmp, "wb") as out:
        chunk = f.read(1024 * 1024)
        out.write(chunk)
        if chunk:
            out.flush()
            pause_for_test("copy")
        shutil.copyfileobj(f, out, 1024 * 1024)


def pause_for_test(where: str) -> None:
    """Tests only (``SMDIST_TEST_PAUSE=<where>:<flag file>``): at ``where`` (pack, copy, multipart) write the
    flag file and wait to be killed, so a test kills a supervisor at a known point instead of guessing."""
    spec = os.environ.get("SMDIST_TEST_PAUSE", "")
    point, _, flag = spec.partition(":")
    if point != where or not flag:
        return
    Path(flag).write_text(str(os.getpid()))
    while True:
        time.sleep(1)


class UploadJournal:
    """``<job dir>/uploads.jsonl``: one line before each upload (its destination), one for what it leaves while
    it runs (the temporary file, the multipart upload's id), one when it ended, and ``{"op": "done"}`` once a
    dead supervisor's leftovers were reclaimed."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._n = 0

    def _write(self, record: dict[str, Any]) -> None:
        # (no fsync: what a kill -9 interrupts is in the page cache all the same; a crash of the machine is not
        # what this journal is for, and checkpoints sync many small files)
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def begin(self, uri: str) -> int:
        self._n += 1
        entry = int(f"{os.getpid()}{self._n:06d}")
        self._write({"id": entry, "op": "begin", "uri": uri, "t": time.time()})
        return entry

    def note(self, entry: int, **what: Any) -> None:
        self._write({"id": entry, "op": "note", **what})

    def end(self, entry: int) -> None:
        self._write({"id": entry, "op": "end"})

    def open_entries(self) -> list[dict[str, Any]]:
        """What uploads begun and not ended left (their notes merged), unless the journal is marked done."""
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        entries: dict[int, dict[str, Any]] = {}
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut by the kill
                continue
            if rec.get("op") == "done":
                entries.clear()
            elif rec.get("op") == "begin":
                entries[rec["id"]] = dict(rec)
            elif rec.get("op") == "note" and rec.get("id") in entries:
                entries[rec["id"]].update({k: v for k, v in rec.items() if k not in ("op", "id")})
            elif rec.get("op") == "end":
                entries.pop(rec.get("id"), None)
        return list(entries.values())

    def finished(self) -> bool:
        """Whether the journal is absent or ends with ``done`` (read from its end: journals are long)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
                tail = f.read().splitlines()
        except FileNotFoundError:
            return True
        return bool(tail) and tail[-1].startswith(b'{"op": "done"')

    def mark_done(self) -> None:
        self._write({"op": "done", "t": time.time()})


def _replace_whole(path: str, write: Callable[[str], object], tmp: str | None = None) -> None:
    """Write ``path`` through a temporary file next to it, renamed into place: readers see the old file or
    the new one, never half of it; a write that fails leaves no temporary file behind."""
    tmp = tmp or partial_name(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def relative_key(prefix_uri: str, obj: StoredObject) -> str:
    """The path of ``obj`` below the prefix it was listed under, as SageMaker lays it out in a channel.

    ``s3://b/data/train`` + key ``data/train/part-1.csv`` -> ``part-1.csv``; a prefix that is the object
    itself -> its base name."""
    _scheme, _bucket, key = parse_uri(prefix_uri)
    rel = obj.key[len(key):] if obj.key.startswith(key) else obj.key
    if rel.startswith("/") and key and not key.endswith("/"):
        rel = rel[1:]  # the separator between the prefix and the rest; a second '/' is an absolute key
    if not rel:
        rel = PurePosixPath(obj.key).name
    return rel
