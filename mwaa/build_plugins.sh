#!/usr/bin/env bash
# Build what MWAA takes for one row of mwaa/rows.txt (default: the newest):
#   dist/mwaa/plugins.zip       the provider's pure-Python wheel, every wheel it adds to that row's environment
#                               (what it needs that MWAA's image does not already hold), and constraints.txt
#                               pinning them, so a private-network environment installs it with --no-index
#   dist/mwaa/requirements.txt  MWAA's constraints line plus --find-links /usr/local/airflow/plugins
#   dist/mwaa/startup.sh        SMDIST_BACKEND=sagemaker and deferrable waiting
#
#   bash mwaa/build_plugins.sh                       # the newest row (Airflow 3.3.1, Python 3.12)
#   MWAA_AIRFLOW_VERSION=2.11.0 bash mwaa/build_plugins.sh
#   OUT=dist/mwaa-2.11.0 CONSTRAINTS_FILE=constraints-3.12.txt bash mwaa/build_plugins.sh
#
# "What MWAA's image holds" is the row's Airflow, Amazon provider and boto3 as MWAA pins them, resolved here
# for the row's Python on x86_64 Linux (MWAA's platform); the wheels the provider adds are the difference
# between that resolution and the same one with the provider. With CONSTRAINTS_FILE (your environment's
# Airflow constraints file), both resolutions honour it and it is shipped as constraints.txt instead.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# paths given relative to where the caller stands, resolved before anything changes directory
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
PYTHON="${PYTHON:-python3}"
case "$PYTHON" in */*) PYTHON="$(abspath "$PYTHON")" ;; esac
OUT="$(abspath "${OUT:-$ROOT/dist/mwaa}")"
[ -n "${CONSTRAINTS_FILE:-}" ] && CONSTRAINTS_FILE="$(abspath "$CONSTRAINTS_FILE")"
cd "$ROOT"

ROW="${MWAA_AIRFLOW_VERSION:-$(awk '!/^#/ && NF {v = $1} END {print v}' mwaa/rows.txt)}"
read -r airflow pyver amazon boto3 pins < <(awk -v a="$ROW" '!/^#/ && $1 == a {print $1, $2, $3, $4, $5}' mwaa/rows.txt)
[ -n "${airflow:-}" ] || { echo "no MWAA row $ROW in mwaa/rows.txt" >&2; exit 2; }

UV="${UV:-$(command -v uv || true)}"
[ -n "$UV" ] || UV="$("$PYTHON" -c 'import os, uv; print(os.fsdecode(uv.find_uv_bin()))' 2>/dev/null || true)"
[ -n "$UV" ] || { echo "build_plugins.sh needs uv (pip install uv)" >&2; exit 2; }

rm -rf "$OUT" && mkdir -p "$OUT/plugins"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$WORK/provider" .
WHEEL=$(ls "$WORK"/provider/airflow_smdist-*.whl)
case "$WHEEL" in
  *-py3-none-any.whl) ;;
  *) echo "not a pure-Python wheel: $WHEEL" >&2; exit 1 ;;
esac
cp "$WHEEL" "$OUT/plugins/"

# the row's environment, then the same with the provider: what differs is what the provider adds
{ echo "apache-airflow==$airflow"; echo "apache-airflow-providers-amazon==$amazon"; echo "boto3==$boto3"
  [ -n "${pins:-}" ] && tr ',' '\n' <<<"$pins"; } >"$WORK/base.in"
cp "$WORK/base.in" "$WORK/full.in" && echo "airflow-smdist @ file://$WHEEL" >>"$WORK/full.in"
COMPILE=("$UV" pip compile --quiet --no-header --no-annotate --python-version "$pyver"
         --python-platform x86_64-manylinux_2_28 --index-strategy unsafe-best-match)
for idx in /opt/pypi/simple /opt/pypi-more/simple; do [ -d "$idx" ] && COMPILE+=(--extra-index-url "file://$idx"); done
[ -n "${CONSTRAINTS_FILE:-}" ] && COMPILE+=(--constraint "$CONSTRAINTS_FILE")
"${COMPILE[@]}" "$WORK/base.in" -o "$WORK/base.txt"
"${COMPILE[@]}" "$WORK/full.in" -o "$WORK/full.txt"
grep -v '^airflow-smdist' "$WORK/full.txt" | grep -vxFf "$WORK/base.txt" | grep '==' >"$WORK/added.txt" || true
if [ -s "$WORK/added.txt" ]; then
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform any -d "$OUT/plugins" -r "$WORK/added.txt"
fi
if [ -n "${CONSTRAINTS_FILE:-}" ]; then
  cp "$CONSTRAINTS_FILE" "$OUT/plugins/constraints.txt"
else
  cp "$WORK/added.txt" "$OUT/plugins/constraints.txt"
fi
(cd "$OUT/plugins" && "$PYTHON" -c "import zipfile, os
with zipfile.ZipFile('../plugins.zip', 'w', zipfile.ZIP_DEFLATED) as z:
    for name in sorted(os.listdir('.')):
        z.write(name)
")
cp mwaa/requirements.txt "$OUT/requirements.txt"
cp mwaa/startup.sh "$OUT/startup.sh"
added=$(grep -c '==' "$WORK/added.txt" || true)
echo "built $OUT/plugins.zip for MWAA $airflow (Python $pyver): $(basename "$WHEEL") + $added wheel(s) it adds" \
     "to that environment${added:+ ($(tr '\n' ' ' <"$WORK/added.txt"))}; $OUT/requirements.txt, $OUT/startup.sh"
