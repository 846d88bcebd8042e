#!/usr/bin/env bash
# One compatibility run per MWAA row (mwaa/rows.txt: the Airflow, Python, Amazon provider and boto3 versions MWAA
# pins, aws/amazon-mwaa-docker-images, 2026-08), each on MWAA's own Python (3.11 for 2.10.3, 3.12 for the rest).
# Each row's venv is made the way MWAA makes its environment: the row's Airflow, Amazon provider and boto3 first,
# then the provider from the row's plugins.zip (mwaa/build_plugins.sh) with --no-index, as a private-network
# environment installs it, then what tests/compat needs (the [local] extra, pytest, moto). A row fails when the
# provider's install pulls a CUDA wheel or torch. The tests: provider registration and connection form, cheap
# imports, every example DAG parsed within MWAA's limits, one DAG end to end on the local backend and one on
# the sagemaker backend against a moto server (tests/compat). Installs with uv (no constraints files: they are
# not reachable from here, so uv resolves the rest, with the row's own extra pins where the newest release of a
# dependency breaks that Airflow); each row's venv (.venv-compat-<airflow>) is kept and reused while
# pyproject.toml, mwaa/ and this script are unchanged.
#
#   bash scripts/compat-mwaa.sh                  # the rows in $COMPAT_ROWS, else all five
#   bash scripts/compat-mwaa.sh 2.10.3 3.3.1     # some rows
#   COMPAT_INSTALL_ONLY=1 bash scripts/compat-mwaa.sh 2.11.0   # only make the rows' venvs
# The README's version table says which rows CI runs and how each one fares.
set -euo pipefail
cd "$(dirname "$0")/.."
# every install compiles its bytecode, as pip does (uv does not by default): where PYTHONDONTWRITEBYTECODE is
# set, or a venv is read-only to its user, every interpreter would compile what it imports from source again
# (measured: importing Airflow and the provider 5.2 CPU-s without, 2.3 with; torch 3.7 against 1.8)
export UV_COMPILE_BYTECODE=1
REPO="$PWD"
read -r -a ROWS <<<"${*:-${COMPAT_ROWS:-$(awk '!/^#/ && NF {printf "%s ", $1}' mwaa/rows.txt)}}"

UV="${UV:-$(command -v uv || true)}"
if [ -z "$UV" ]; then
  [ -x .venv/bin/uv ] || { [ -x .venv/bin/python ] && .venv/bin/python -m pip install --quiet uv; } || python3 -m pip install --quiet uv
  UV="$([ -x .venv/bin/uv ] && echo "$REPO/.venv/bin/uv" || command -v uv)"
fi
# this machine's mirrors, as pip.conf names them for pip (uv does not read pip.conf)
UV_ARGS=(--index-strategy unsafe-best-match)
for idx in /opt/pypi/simple /opt/pypi-more/simple; do [ -d "$idx" ] && UV_ARGS+=(--extra-index-url "file://$idx"); done

stamp_of() { cat pyproject.toml scripts/compat-mwaa.sh mwaa/* | sha1sum | cut -c1-12; }

no_cuda() {  # venv what: fails when the venv holds torch or a CUDA wheel
  local heavy
  if heavy=$("$UV" pip list --python "$1/bin/python" 2>/dev/null | grep -Ei '^(torch|nvidia-[a-z0-9-]+) '); then
    echo "[compat] $2 pulled what a provider install must not: $(tr -s ' \n' ' ' <<<"$heavy")"; return 1
  fi
}

install_row() {  # airflow python amazon boto3 [extra pins, comma-separated]
  local venv=".venv-compat-$1" stamp extra=() plugins
  [ -n "${5:-}" ] && IFS=, read -r -a extra <<<"$5"
  stamp="$1-$2-$3-$4-$(stamp_of)"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.smdist-stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "[compat $1] reusing $venv"; return 0
  fi
  rm -rf "$venv"
  "$UV" venv --quiet --seed --python "$(bash scripts/find-python.sh "$2")" "$venv"
  # 1. MWAA's image: the row's Airflow, Amazon provider and boto3
  "$UV" pip install --quiet --python "$venv/bin/python" "${UV_ARGS[@]}" "apache-airflow==$1" \
    "apache-airflow-providers-amazon==$3" "boto3==$4" "${extra[@]}" >"$venv.install.log" 2>&1 \
    || { tail -30 "$venv.install.log"; return 1; }
  # 2. the provider from the row's plugins.zip, without an index (a private-network MWAA environment)
  plugins="$(mktemp -d)"
  OUT="$plugins/dist" MWAA_AIRFLOW_VERSION="$1" PYTHON="$REPO/.venv/bin/python" UV="$UV" bash mwaa/build_plugins.sh \
    >>"$venv.install.log" 2>&1 && "$REPO/.venv/bin/python" -m zipfile -e "$plugins/dist/plugins.zip" "$plugins/wheels" \
    && "$UV" pip install --python "$venv/bin/python" --no-index --find-links "$plugins/wheels" \
         --constraint "$plugins/wheels/constraints.txt" airflow-smdist >>"$venv.install.log" 2>&1 \
    || { tail -30 "$venv.install.log"; rm -rf "$plugins"; echo "[compat $1] plugins.zip does not install with --no-index"; return 1; }
  echo "[compat $1] installed from plugins.zip with --no-index: $(cd "$plugins/wheels" && ls | tr '\n' ' ')"
  no_cuda "$venv" "the provider's install" || { rm -rf "$plugins"; return 1; }
  # 3. what tests/compat needs: the local backend's extra (the same wheel), pytest, moto
  "$UV" pip install --quiet --python "$venv/bin/python" "${UV_ARGS[@]}" --find-links "$plugins/wheels" \
    "apache-airflow==$1" "apache-airflow-providers-amazon==$3" "boto3==$4" "${extra[@]}" "airflow-smdist[local]" \
    "pytest>=8" "pytest-timeout>=2.3" "moto[server]>=5.0.20" >>"$venv.install.log" 2>&1 \
    || { tail -30 "$venv.install.log"; rm -rf "$plugins"; return 1; }
  rm -rf "$plugins"
  no_cuda "$venv" "the [local] extra" || return 1
  echo "$stamp" >"$venv/.smdist-stamp"
}

failed=()
declare -A took
for row in "${ROWS[@]}"; do
  pins=""
  read -r airflow pyver amazon boto3 pins < <(awk -v a="$row" '!/^#/ && $1 == a {print $1, $2, $3, $4, $5}' mwaa/rows.txt)
  [ -n "${airflow:-}" ] || { echo "unknown row $row (rows: $(awk '!/^#/ && NF {printf "%s ", $1}' mwaa/rows.txt))"; exit 2; }
  start=$(date +%s)
  echo "[compat $airflow] apache-airflow==$airflow apache-airflow-providers-amazon==$amazon boto3==$boto3${pins:+ $pins} (Python $pyver)"
  if ! install_row "$airflow" "$pyver" "$amazon" "$boto3" "${pins:-}"; then
    failed+=("$airflow (install)"); took[$airflow]=$(( $(date +%s) - start )); continue
  fi
  venv=".venv-compat-$airflow"
  # COMPAT_INSTALL_ONLY=1: make (or check) the rows' venvs and stop; CI makes them ahead, while other steps run
  if [ "${COMPAT_INSTALL_ONLY:-}" = 1 ]; then took[$airflow]=$(( $(date +%s) - start )); continue; fi
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
if [ "${COMPAT_INSTALL_ONLY:-}" = 1 ]; then echo "[compat] rows installed: ${ROWS[*]}"; else echo "[compat] rows green: ${ROWS[*]}"; fi
