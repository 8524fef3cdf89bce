#!/usr/bin/env bash
# Make .venv the virtual environment of requirements.txt. The environment itself lives outside the clone, keyed by
# requirements.txt and the Python that builds it (~/.cache/dlinfra-gpu-cluster/venv-KEY, or DLINFRA_VENV_CACHE), and
# .venv links to it: a fresh clone of the same requirements (every CI run) reuses it instead of spending 45-75 s on pip.
# A venv cannot move once made (its scripts name their interpreter's path), hence a link, not a copy.
set -euo pipefail
cd "$(dirname "$0")/../../.."
# The distribution's interpreter where there is one: Debian builds it with profile-guided and link-time optimization, a
# source build (pyenv's default) without; the unit tests took 16-18 % less CPU in it, a playbook's controller 5 %.
python=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; fi
command -v "$python" >/dev/null || { echo "ensure_venv: $python not found: install python3 (3.11) and python3-venv" >&2; exit 1; }
key=$( { cat requirements.txt; "$python" -c 'import sys; print(sys.version, sys.executable)'; } | sha256sum | cut -c1-16)
cache=${DLINFRA_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dlinfra-gpu-cluster}
venv=$cache/venv-$key
mkdir -p "$cache"
# Two clones setting up at once: the second waits for the first, then reuses its environment.
exec 9>"$venv.lock"
flock 9
# .complete is written last: an environment whose pip install failed or was killed is built again.
if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
  if [ "$(readlink .venv 2>/dev/null)" != "$venv" ]; then
    rm -rf .venv
    ln -s "$venv" .venv
  fi
  echo "ensure_venv: .venv is current ($venv)"
  exit 0
fi
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  [ "$(id -u)" -eq 0 ] || { echo "ensure_venv: $python cannot create venvs: sudo apt-get install python3-venv" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null
fi
echo "ensure_venv: building $venv from requirements.txt"
rm -rf "$venv" .venv
"$python" -m venv "$venv"
log=$venv/pip-install.log
# --no-compile: Python compiles what is imported on first use (into the shared environment, once); compiling the whole
# `ansible` package up front cost 11-26 s of 45-75 s here.
"$venv/bin/pip" install --disable-pip-version-check --no-compile -r requirements.txt >"$log" 2>&1 || {
  tail -n 30 "$log" >&2
  echo "ensure_venv: pip install failed (whole log: $log)" >&2
  exit 1
}
touch "$venv/.complete"
ln -s "$venv" .venv
