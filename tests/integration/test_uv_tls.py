"""A runtime build behind a certificate uv does not trust (a TLS-intercepting proxy's): the real uv against an
HTTPS package index on 127.0.0.1 whose certificate a test CA signed. Without the CA the build fails and says TLS
failed (uv's line, the fix), not that the image's packages "do not install on this machine"; with the CA given
as pip's cert or SSL_CERT_FILE, uv gets past TLS (the index is empty: then "not found", which is fine)."""

from __future__ import annotations

import datetime
import functools
import http.server
import ipaddress
import os
import ssl
import threading

import pytest

from airflow_smdist.backends.local.job import runtimes

SKLEARN_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
#: see tests/unit/test_pip_tls_config.py
TLS_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSL_CLIENT_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                 "PIP_CERT", "PIP_CLIENT_CERT", "PIP_TRUSTED_HOST", "PIP_FIND_LINKS", "PIP_INDEX_URL",
                 "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "UV_NATIVE_TLS", "UV_SYSTEM_CERTS", "UV_INSECURE_HOST")
#: the server stops by itself after this long, whatever the test does
SERVER_LIFETIME = 120


def make_certificates(where) -> tuple[str, str]:
    """A test CA (ca.pem) and the index's certificate for 127.0.0.1 that it signed, with its key (server.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def builder(subject: str, issuer: str, key):
        return (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(hours=1)))

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (builder("smdist test CA", "smdist test CA", ca_key)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server = (builder("127.0.0.1", "smdist test CA", key)
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .sign(ca_key, hashes.SHA256()))
    ca_path, server_path = os.path.join(where, "ca.pem"), os.path.join(where, "server.pem")
    with open(ca_path, "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(server_path, "wb") as f:
        f.write(server.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return ca_path, server_path


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_args) -> None:
        pass


@pytest.fixture
def https_index(tmp_path):
    """An empty PEP 503 index over HTTPS on 127.0.0.1; yields (its URL, the CA that signed its certificate)."""
    ca, server_pem = make_certificates(str(tmp_path))
    (tmp_path / "www" / "simple").mkdir(parents=True)
    (tmp_path / "www" / "simple" / "index.html").write_text("<!DOCTYPE html><html><body></body></html>\n")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(server_pem)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(tmp_path / "www")))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stopper = threading.Timer(SERVER_LIFETIME, server.shutdown)
    stopper.daemon = True
    stopper.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/simple/", ca
    finally:
        stopper.cancel()
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def behind_the_index(https_index, monkeypatch, tmp_path):
    """The runtime build's package sources are that index alone (no config file or variable of this machine)."""
    for name in TLS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", https_index[0])
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    return https_index


def build_error(tmp_path) -> str:
    spec = runtimes.image_spec(SKLEARN_IMAGE)
    lines: list[str] = []
    with pytest.raises(runtimes.RuntimeSetupError) as info:
        runtimes.build(spec, tmp_path / "runtimes", lines.append)
    return str(info.value)


@pytest.mark.slow
def test_a_runtime_build_with_an_untrusted_index_certificate_says_tls_failed(behind_the_index, tmp_path):
    url, _ca = behind_the_index
    error = build_error(tmp_path)
    assert "TLS to the package index failed" in error, error
    assert "invalid peer certificate: UnknownIssuer" in error or "certificate verify failed" in error, error
    assert url in error  # which index
    assert "pip's cert" in error and "SSL_CERT_FILE=" in error  # the fix
    assert "does not install on this machine" not in error


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SSL_CERT_FILE", "pip.conf cert", "PIP_CERT"])
def test_with_the_ca_given_a_runtime_build_gets_past_tls(behind_the_index, tmp_path, monkeypatch, how):
    _url, ca = behind_the_index
    if how == "pip.conf cert":
        (tmp_path / "pip.conf").write_text(f"[global]\ncert = {ca}\n")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    else:
        monkeypatch.setenv(how, ca)
    error = build_error(tmp_path)
    assert "TLS" not in error and "certificate" not in error, error
    assert "does not install on this machine" in error and "not found in the package registry" in error, error
