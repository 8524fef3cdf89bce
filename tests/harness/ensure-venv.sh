#!/usr/bin/env bash
# Create .venv from requirements.txt when it is missing or was built from another requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ -x .venv/bin/python ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "ensure-venv: .venv is current"
  exit 0
fi
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "ensure-venv: $python not found: install python3 (3.11) and python3-venv" >&2; exit 1; }
echo "ensure-venv: building .venv from requirements.txt"
rm -rf .venv
"$python" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
echo "$want" >"$stamp"
