#!/usr/bin/env bash
# ansible-test sanity on a copy of the collection laid out as ansible_collections/dlinfra/gpu_cluster,
# each test in its own ansible-test managed venv (so .venv is never altered).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PATH="$PWD/.venv/bin:$PATH"

if [ -z "$(find plugins -name '*.py' -print -quit)" ]; then
  echo "sanity: plugins/ holds no Python yet: nothing for ansible-test sanity to check"
  exit 0
fi

# ansible-test bootstraps pip with a script it downloads from a host unreachable here; it looks in its
# cache first. This stand-in bootstraps the bundled pip, then installs what it was asked for from PyPI.
pip_version=$(sed -n "s/^ *pip='\([0-9.]*\)',$/\1/p" .venv/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py)
get_pip=~/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [ ! -f "$get_pip" ]; then
  mkdir -p "$(dirname "$get_pip")"
  cat >"$get_pip" <<'PY'
import ensurepip, subprocess, sys
ensurepip.bootstrap()
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "pip", "install", "--cert", "/etc/ssl/certs/ca-certificates.crt"] + args)
PY
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
copy=$work/ansible_collections/dlinfra/gpu_cluster
mkdir -p "$copy"
git ls-files -co --exclude-standard | grep -v '^collections/' | while read -r f; do [ -e "$f" ] && echo "$f"; done \
  | tar -cf - -T - | tar -C "$copy" -xf -
cd "$copy"
ansible-test sanity --venv --requirements --python 3.11 --color no "$@"
