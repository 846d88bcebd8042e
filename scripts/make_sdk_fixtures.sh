#!/usr/bin/env bash
# Re-create tests/fixtures/sdk_v2_requests.json: the requests SageMaker Python SDK 2.x sends (captured from
# its own botocore clients, no AWS account used) for the cases tests/unit/test_sdk_v2_parity.py compares.
# SDK 2 cannot share a venv with SDK 3 (the test venv's), so it runs in a throwaway venv made with uv.
#   bash scripts/make_sdk_fixtures.sh [sagemaker version, default 2.257.7]
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${1:-2.257.7}"
UV="$(command -v uv || echo .venv/bin/uv)"
PY="$(command -v python3.11 || command -v python3)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$UV" venv -q -p "$PY" "$TMP/venv"
VIRTUAL_ENV="$TMP/venv" "$UV" pip install -q "sagemaker==$VERSION"
# Offline: the script opts out of the SDK's telemetry itself (SAGEMAKER_DISABLE_TELEMETRY does not stop
# 2.257.7's emitter) and fails if the SDK tries to reach any host.
SAGEMAKER_SUPPRESS_V2_WARNING=1 "$TMP/venv/bin/python" scripts/sdk_fixtures_v2.py tests/fixtures/sdk_v2_requests.json
echo "wrote tests/fixtures/sdk_v2_requests.json with sagemaker==$VERSION"
