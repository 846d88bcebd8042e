"""pip's index credentials (a private index's ``https://user:password@host/simple``, in the worker's pip
configuration) reach uv, and nothing a job or another local user can read: not a process's command line (``ps``),
not the job's own ``pip``. The real uv against a package index on 127.0.0.1 that answers 401 without them."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import os
import subprocess
import threading
import time
import zipfile
from pathlib import Path

import pytest

from airflow_smdist.backends.local.job import runtimes

OWN_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
PASSWORD = "pw-INDEX-5150"
PACKAGE = "smdist-cred-probe"
WHEEL = "smdist_cred_probe-1.0-py3-none-any.whl"


def probe_wheel() -> bytes:
    """A pure-Python wheel of one module, ``smdist_cred_probe``, with its RECORD."""
    files = {"smdist_cred_probe/__init__.py": b"VERSION = '1.0'\n",
             "smdist_cred_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: smdist-cred-probe\n"
                                                         b"Version: 1.0\n",
             "smdist_cred_probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                      b"Tag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in files.items())
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)
        whl.writestr("smdist_cred_probe-1.0.dist-info/RECORD", record + "smdist_cred_probe-1.0.dist-info/RECORD,,\n")
    return out.getvalue()


class Index(http.server.BaseHTTPRequestHandler):
    """A PEP 503 index of one wheel that answers 401 to a request without the user and password."""

    wheel = probe_wheel()
    seen: list[tuple[str, bool]] = []

    def do_HEAD(self) -> None:
        self.do_GET(head=True)

    def do_GET(self, head: bool = False) -> None:
        expected = "Basic " + base64.b64encode(f"smdist:{PASSWORD}".encode()).decode()
        authorized = self.headers.get("Authorization") == expected
        self.seen.append((self.path, authorized))
        if not authorized:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="index"')
            self.end_headers()
            return
        if self.path.rstrip("/") == f"/simple/{PACKAGE}":
            body, kind = f'<html><body><a href="/files/{WHEEL}">{WHEEL}</a></body></html>'.encode(), "text/html"
        elif self.path == f"/files/{WHEEL}":
            body, kind = self.wheel, "application/octet-stream"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


@pytest.fixture
def private_index(tmp_path, monkeypatch):
    """The index beside the default one (where the runtime's other packages come from), its credentials in
    pip's extra index URL (PIP_EXTRA_INDEX_URL)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for name in ("PIP_INDEX_URL", "PIP_CONSTRAINT", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))  # nothing cached: the wheel is fetched
    url = f"http://smdist:{PASSWORD}@127.0.0.1:{server.server_address[1]}/simple/"
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", url)
    Index.seen = []
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def command_lines_with(secret: str, stop: threading.Event, found: list[str]) -> None:
    """Every process's command line, read as any local user reads it (``ps``), until ``stop``."""
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if secret in cmdline:
                    found.append(cmdline)
        time.sleep(0.01)


@pytest.mark.slow
def test_the_index_credentials_reach_uv_and_no_command_line_nor_the_jobs_pip(private_index, tmp_path):
    spec = runtimes.image_spec(OWN_IMAGE, environment={"SMDIST_LOCAL_REQUIREMENTS": PACKAGE})
    stop, found, seen_uv = threading.Event(), [], []
    sampler = threading.Thread(target=command_lines_with, args=(PASSWORD, stop, found), daemon=True)
    uv_sampler = threading.Thread(target=command_lines_with, args=("pip install", stop, seen_uv), daemon=True)
    sampler.start()
    uv_sampler.start()
    try:
        rt = runtimes.build(spec, tmp_path / "runtimes")
    finally:
        stop.set()
        sampler.join(5)
        uv_sampler.join(5)
    assert seen_uv, "the sampler saw no uv install: it could not have seen a password"
    assert found == [], found[:3]
    assert (f"/files/{WHEEL}", True) in Index.seen  # uv fetched the wheel with the credentials
    imported = subprocess.run([rt.python, "-c", "import smdist_cred_probe; print(smdist_cred_probe.VERSION)"],
                              capture_output=True, text=True, timeout=60)
    assert imported.stdout.strip() == "1.0", imported.stderr
    # the job's own pip (bin/pip, a file the job's code can read) names the index without its credentials
    job = runtimes._with_platform(rt, tmp_path / "job")
    pip = Path(job.job_bin or "", "pip").read_text()
    assert PASSWORD not in pip and "smdist@" not in pip, pip
    assert private_index.replace(f"smdist:{PASSWORD}@", "") in pip, pip
