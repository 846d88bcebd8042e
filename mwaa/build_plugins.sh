#!/usr/bin/env bash
# Build what MWAA takes: dist/mwaa/plugins.zip (the provider's pure-Python wheel, plus a constraints file
# for private environments) and dist/mwaa/requirements.txt. Upload both to the environment's S3 bucket
# and point PluginsS3Path / RequirementsS3Path at them.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=dist/mwaa
PYTHON="${PYTHON:-python3}"
rm -rf "$OUT" && mkdir -p "$OUT/plugins"
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$OUT/plugins" .
WHEEL=$(ls "$OUT"/plugins/airflow_smdist-*.whl)
case "$WHEEL" in
  *-py3-none-any.whl) ;;
  *) echo "not a pure-Python wheel: $WHEEL" >&2; exit 1 ;;
esac
if [ -n "${CONSTRAINTS_FILE:-}" ]; then cp "$CONSTRAINTS_FILE" "$OUT/plugins/constraints.txt"; fi
(cd "$OUT/plugins" && "$PYTHON" -c "import sys, zipfile, os
with zipfile.ZipFile('../plugins.zip', 'w', zipfile.ZIP_DEFLATED) as z:
    for name in sorted(os.listdir('.')):
        z.write(name)
")
cp mwaa/requirements.txt "$OUT/requirements.txt"
cp mwaa/startup.sh "$OUT/startup.sh"
echo "built $OUT/plugins.zip ($(basename "$WHEEL")), $OUT/requirements.txt, $OUT/startup.sh"
