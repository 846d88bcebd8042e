#!/usr/bin/env bash
# The path of a real CPython interpreter of version $1 (e.g. 3.12): pyenv's build of it where pyenv has one (its
# shims answer only for the active version), else pythonX.Y on PATH. Exits 2, saying so, when there is none.
set -euo pipefail
v="${1:?usage: find-python.sh X.Y}"
for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v" "/usr/local/bin/python$v" "/usr/bin/python$v"; do
  if [ -x "$candidate" ] && "$candidate" -c 'import sys' 2>/dev/null; then echo "$candidate"; exit 0; fi
done
if p="$(command -v "python$v")" && "$p" -c 'import sys' 2>/dev/null; then echo "$p"; exit 0; fi
echo "find-python.sh: no Python $v here (pyenv holds 3.11, 3.12 and 3.13 on these machines)" >&2
exit 2
