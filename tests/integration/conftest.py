"""Fixtures for tests against a moto server on loopback (see moto_server.py for what it adds to moto)."""

from __future__ import annotations

import json
import os
import sys
import uuid

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # so the helper imports under any pytest import mode
    sys.path.insert(0, _HERE)

from moto_server import REGION, MotoServer

#: Environment the session-scoped server sets, and restores afterwards.
_UNSET = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL",
          "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE")


@pytest.fixture(scope="session")
def moto_server():
    """A moto server on 127.0.0.1 for the whole session; yields its endpoint URL.

    Sets fake credentials and region, and the Airflow connection ``aws_default`` (through
    ``AIRFLOW_CONN_AWS_DEFAULT``) pointing at the server; all restored when the session ends."""
    mp = pytest.MonkeyPatch()
    server = MotoServer()
    try:
        url = server.start()
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        for name in _UNSET:
            mp.delenv(name, raising=False)
        mp.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(
            {"conn_type": "aws", "extra": {"endpoint_url": url, "region_name": REGION}}))
        yield url
    finally:
        mp.undo()
        if server.endpoint_url:
            server.stop()


@pytest.fixture
def s3_bucket(moto_server):
    """A fresh S3 bucket on the moto server; yields its name."""
    import boto3

    name = f"smdist-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_server, region_name=REGION).create_bucket(Bucket=name)
    return name
