#!/usr/bin/env bash
# One compatibility run per MWAA row: the Airflow, Amazon provider and boto3 versions MWAA pins
# (aws/amazon-mwaa-docker-images, 2026-08), on this machine's Python 3.11 (MWAA runs 3.12 for Airflow 3).
# Each row: provider registration and connection form, cheap imports, every example DAG parsed within MWAA's
# limits, one DAG end to end on the local backend and one on the sagemaker backend against a moto server
# (tests/compat). Installs with uv (no constraints files: they are not reachable from here, so uv resolves
# the rest, with the row's own extra pins where the newest release of a dependency breaks that Airflow);
# each row's venv (.venv-compat-<airflow>) is kept and reused while pyproject.toml is unchanged.
#
#   bash scripts/compat-mwaa.sh                  # the rows in $COMPAT_ROWS, else all five
#   bash scripts/compat-mwaa.sh 2.10.3 3.3.1     # some rows
# The README's version table says which rows CI runs and how each one fares.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

# airflow  amazon provider  boto3  [extra pins for this row, comma-separated]
# 3.0.6: fastapi >= 0.132 rejects JSON bodies without a Content-Type header (strict_content_type), and the task
# SDK 1.0.6 sends its Execution API calls (PATCH task-instances/<id>/run, ...) without one: 422 on every task.
# 3.2.1: fastapi >= 0.137 (uv picks the newest, with cadwyn 9) makes Airflow 3.2.1's Execution API fail to build
# (PydanticUserError: Model 'TITerminalStatePayload' needs a discriminator field): Airflow 3.3 caps fastapi<0.137
ROWS_TABLE="
2.10.3 9.0.0  1.35.36
2.11.0 9.8.0  1.37.3
3.0.6  9.12.0 1.39.11 fastapi<0.132
3.2.1  9.25.0 1.42.84 fastapi<0.137
3.3.1  9.34.0 1.43.56
"
PYTHON="${COMPAT_PYTHON:-python3.11}"
read -r -a ROWS <<<"${*:-${COMPAT_ROWS:-2.10.3 2.11.0 3.0.6 3.2.1 3.3.1}}"

UV="${UV:-$(command -v uv || true)}"
if [ -z "$UV" ]; then
  [ -x .venv/bin/uv ] || { [ -x .venv/bin/python ] && .venv/bin/python -m pip install --quiet uv; } || python3 -m pip install --quiet uv
  UV="$([ -x .venv/bin/uv ] && echo .venv/bin/uv || command -v uv)"
fi
# this machine's local wheels (torch's CPU build) and mirrors, as pip.conf names them for pip
UV_ARGS=(--index-strategy unsafe-best-match)
[ -d /opt/wheels ] && UV_ARGS+=(--find-links /opt/wheels)
for idx in /opt/pypi/simple /opt/pypi-more/simple; do [ -d "$idx" ] && UV_ARGS+=(--extra-index-url "file://$idx"); done

stamp_of() { cat pyproject.toml scripts/compat-mwaa.sh | sha1sum | cut -c1-12; }

install_row() {  # airflow amazon boto3 [extra pins, comma-separated]
  local venv=".venv-compat-$1" stamp extra=()
  [ -n "${4:-}" ] && IFS=, read -r -a extra <<<"$4"
  stamp="$1-$2-$3-$(stamp_of)"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.smdist-stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "[compat $1] reusing $venv"; return 0
  fi
  rm -rf "$venv"
  "$UV" venv --quiet --python "$PYTHON" "$venv"
  # the row's pins; torch only as the local disk's CPU wheel; pytest and moto for tests/compat (not the whole
  # test extra: its SDK oracle needs a newer boto3 than MWAA pins)
  "$UV" pip install --quiet --python "$venv/bin/python" "${UV_ARGS[@]}" \
    "apache-airflow==$1" "apache-airflow-providers-amazon[aiobotocore]==$2" "boto3==$3" "torch==2.13.0" \
    "${extra[@]}" -e . "pytest>=8" "pytest-timeout>=2.3" "moto[server]>=5.0.20" >"$venv.install.log" 2>&1 \
    || { tail -30 "$venv.install.log"; return 1; }
  echo "$stamp" >"$venv/.smdist-stamp"
}

failed=()
declare -A took
for row in "${ROWS[@]}"; do
  read -r airflow amazon boto3 pins < <(awk -v a="$row" '$1 == a {print $1, $2, $3, $4}' <<<"$ROWS_TABLE")
  [ -n "${airflow:-}" ] || { echo "unknown row $row (rows: $(awk 'NF {printf "%s ", $1}' <<<"$ROWS_TABLE"))"; exit 2; }
  start=$(date +%s)
  echo "[compat $airflow] apache-airflow==$airflow apache-airflow-providers-amazon==$amazon boto3==$boto3${pins:+ $pins} (Python $("$PYTHON" -c 'import platform; print(platform.python_version())'))"
  if ! install_row "$airflow" "$amazon" "$boto3" "${pins:-}"; then
    failed+=("$airflow (install)"); took[$airflow]=$(( $(date +%s) - start )); continue
  fi
  venv=".venv-compat-$airflow"
  # MWAA's parse limits: a DAG file that imports for longer is an import error ([core] dagbag_import_timeout)
  if ! env AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT=30 AIRFLOW__CORE__DAG_FILE_PROCESSOR_TIMEOUT=50 \
       AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT=50 PYTHONPATH="$REPO" \
       "$venv/bin/python" -m pytest tests/compat -ra -q -p no:cacheprovider; then
    failed+=("$airflow (tests)")
  fi
  took[$airflow]=$(( $(date +%s) - start ))
done
for row in "${ROWS[@]}"; do echo "[compat $row] ${took[$row]:-?} s"; done
if [ ${#failed[@]} -gt 0 ]; then echo "[compat] failed rows: ${failed[*]}"; exit 1; fi
echo "[compat] rows green: ${ROWS[*]}"
