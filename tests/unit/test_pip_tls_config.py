"""pip's TLS settings reach uv (runtimes.tls_env): a runtime build behind a TLS-intercepting proxy trusts what
pip on this machine trusts. The real uv runs against an HTTPS index are in tests/integration/test_uv_tls.py."""

from __future__ import annotations

import os

import pytest

from airflow_smdist.backends.local.job import runtimes
from airflow_smdist.backends.local.job.runtimes import _clean_env, _pip_config, tls_env, tls_error, tls_failure

#: what the machine (here: a TLS-intercepting proxy's CA everywhere) or the user may have set
TLS_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSL_CLIENT_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                 "PIP_CERT", "PIP_CLIENT_CERT", "PIP_TRUSTED_HOST", "PIP_FIND_LINKS", "PIP_INDEX_URL",
                 "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "UV_NATIVE_TLS", "UV_SYSTEM_CERTS", "UV_INSECURE_HOST")


@pytest.fixture
def pip_env(monkeypatch, tmp_path):
    """No TLS setting from this machine's environment or its pip config files; returns a writer of the
    pip.conf that PIP_CONFIG_FILE names (read after the machine's, so its keys win)."""
    for name in TLS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)

    def write(text: str) -> str:
        conf = tmp_path / "pip.conf"
        conf.write_text(text)
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        return str(conf)

    return write


def pem(tmp_path, name: str = "ca.pem") -> str:
    path = tmp_path / name
    path.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    return str(path)


def test_pip_conf_cert_client_cert_and_trusted_host_reach_uvs_environment(pip_env, tmp_path):
    ca, client = pem(tmp_path), pem(tmp_path, "client.pem")
    pip_env(f"[global]\ncert = {ca}\nclient-cert = {client}\ntrusted-host = pypi.corp.example\n"
            "  mirror.corp.example:8443\n")
    assert tls_env() == {"SSL_CERT_FILE": ca, "SSL_CLIENT_CERT": client,
                         "UV_INSECURE_HOST": "pypi.corp.example mirror.corp.example:8443"}
    env = _clean_env()  # what every uv run of a runtime build gets
    assert env["SSL_CERT_FILE"] == ca and env["SSL_CLIENT_CERT"] == client


def test_a_cert_with_spaces_in_its_path_stays_whole_and_the_install_section_wins(pip_env, tmp_path):
    ca = pem(tmp_path, "corp ca.pem")
    pip_env(f"[global]\ncert = /nowhere/global.pem\n[install]\ncert = {ca}\n")
    assert _pip_config()["cert"] == [ca]
    assert tls_env() == {"SSL_CERT_FILE": ca}


def test_a_cert_directory_becomes_ssl_cert_dir(pip_env, tmp_path):
    certs = tmp_path / "certs"
    certs.mkdir()
    pip_env(f"[global]\ncert = {certs}\n")
    assert tls_env() == {"SSL_CERT_DIR": str(certs)}


def test_pip_cert_variable_wins_over_pip_conf_and_ssl_cert_file(pip_env, tmp_path, monkeypatch):
    ca, other = pem(tmp_path), pem(tmp_path, "other.pem")
    pip_env(f"[global]\ncert = {other}\n")
    monkeypatch.setenv("SSL_CERT_FILE", other)
    monkeypatch.setenv("PIP_CERT", ca)
    assert _clean_env()["SSL_CERT_FILE"] == ca


def test_without_pip_cert_the_environment_bundles_are_used(pip_env, tmp_path, monkeypatch):
    ca, mine = pem(tmp_path), pem(tmp_path, "mine.pem")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ca)
    assert tls_env() == {"SSL_CERT_FILE": ca}  # what requests (pip) would trust
    monkeypatch.setenv("SSL_CERT_FILE", mine)
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    assert tls_env() == {}  # uv reads SSL_CERT_FILE itself: kept, not replaced by requests' bundle
    env = _clean_env()
    assert env["SSL_CERT_FILE"] == mine and env["SSL_CERT_DIR"] == str(tmp_path)


def test_a_missing_cert_is_not_passed_and_the_tls_error_names_it(pip_env, tmp_path):
    pip_env("[global]\ncert = /nowhere/corp-ca.pem\n")
    assert tls_env() == {}
    error = str(tls_error("F", "no local runtime for X", "invalid peer certificate: UnknownIssuer", ""))
    assert "pip cert /nowhere/corp-ca.pem does not exist" in error


def test_pip_config_file_devnull_reads_no_config_file(pip_env, tmp_path, monkeypatch):
    """pip's own rule: PIP_CONFIG_FILE=os.devnull loads no configuration file (not even /etc/pip.conf)."""
    home = tmp_path / "home" / ".config" / "pip"
    home.mkdir(parents=True)
    (home / "pip.conf").write_text(f"[global]\ncert = {pem(tmp_path)}\nfind-links = /opt/wheels\n")
    assert _pip_config()["cert"] == [] and _pip_config()["find-links"] == []
    monkeypatch.delenv("PIP_CONFIG_FILE")
    assert _pip_config()["cert"] == [str(tmp_path / "ca.pem")]  # the user's file, once config files are read


def test_the_jobs_pip_exports_pips_tls_settings(pip_env, tmp_path):
    """A job's ``pip install`` (its shim runs uv with the host's allow-listed environment) trusts the same CA."""
    ca = pem(tmp_path, "corp's ca.pem")
    pip_env(f"[global]\ncert = {ca}\ntrusted-host = pypi.corp.example\n")
    rt = runtimes.Runtime(name="r", python="/usr/bin/python3", bin_dir="/usr/bin", root=str(tmp_path / "rt"))
    runtimes._with_platform(rt, tmp_path / "job")
    shim = (tmp_path / "job" / "bin" / "pip").read_text()
    assert f"export SSL_CERT_FILE='{tmp_path}/corp'\"'\"'s ca.pem'\n" in shim
    assert "export UV_INSECURE_HOST=pypi.corp.example\n" in shim
    assert shim.index("export SSL_CERT_FILE") < shim.index('case "$1"')


@pytest.mark.parametrize("output, line", [
    ("error: Failed to fetch: https://i/simple/x/\n  cause: client error (Connect)\n"
     "  cause: invalid peer certificate: UnknownIssuer", "invalid peer certificate: UnknownIssuer"),
    ("  Caused by: invalid peer certificate: BadSignature", "invalid peer certificate: BadSignature"),
    ("error: ... [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer "
     "certificate (_ssl.c:1006)", None),
    ("  cause: error:0A000086:SSL routines:tls_post_process_server_certificate:certificate verify failed",
     "error:0A000086:SSL routines:tls_post_process_server_certificate:certificate verify failed"),
])
def test_tls_failures_are_recognised(output, line):
    found = tls_failure(output)
    assert found is not None and (line is None or found == line)


@pytest.mark.parametrize("output", [
    "error: No solution found when resolving dependencies\n  cause: Because torch==2.5.1 was not found in the "
    "package registry and you require torch==2.5.1, we can conclude that your requirements are unsatisfiable.",
    "error: Failed to fetch: https://i/simple/x/\n  cause: HTTP status server error (503 Service Unavailable)",
    "error: Distribution not found at: file:///opt/wheels/x.whl",
])
def test_other_failures_are_not_called_tls(output):
    assert tls_failure(output) is None
