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
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  [ "$(id -u)" -eq 0 ] || { echo "ensure-venv: $python cannot create venvs: sudo apt-get install python3-venv" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null
fi
echo "ensure-venv: building .venv from requirements.txt"
rm -rf .venv
"$python" -m venv .venv
log=.venv/pip-install.log
# --no-compile: Python compiles what is imported on first use; compiling the whole `ansible` package up front cost
# 11-26 s of 45-75 s here.
.venv/bin/pip install --disable-pip-version-check --no-compile -r requirements.txt >"$log" 2>&1 || {
  tail -n 30 "$log" >&2
  echo "ensure-venv: pip install failed (whole log: $log)" >&2
  exit 1
}
echo "$want" >"$stamp"
