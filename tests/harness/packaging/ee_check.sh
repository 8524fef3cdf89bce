#!/usr/bin/env bash
# The collection in an execution environment, offline and without a container engine:
#   1. an EE definition (ansible-builder schema version 3) that installs this collection's tarball (type: file) and the
#      collections it declares (artifacts of the `ansible` package's copies, as Galaxy is unreachable here);
#   2. `ansible-builder create` writes the build context, with no network (its own network namespace);
#   3. the two dependency steps of the generated Containerfile run here as the build would run them, with the image's
#      /usr/share/ansible and /output moved under a scratch directory: the galaxy stage's `ansible-galaxy collection
#      install -r requirements.yml` (--offline), then the builder stage's `introspect.py introspect`, which writes the
#      Python and system requirements the final image gets;
#   4. the Python requirements must be exactly the packages the controller-side plugins import beyond ansible-core
#      (tests/harness/packaging/controller_deps.py), all from dlinfra.gpu_cluster; the system requirements must be empty.
#   ee_check.sh [TARBALL]   (without TARBALL it builds one)
set -euo pipefail
cd "$(dirname "$0")/../../.."
repo=$PWD
PATH="$repo/.venv/bin:$PATH"
work=$(mktemp -d "${TMPDIR:-/tmp}/dlinfra-ee.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "ee: FAILED: $*" >&2; exit 1; }

ee=$work/ee
mkdir -p "$ee/collections" "$work/home"
if [ $# -ge 1 ]; then
  cp "$1" "$ee/collections/"
else
  ansible-galaxy collection build --force --output-path "$ee/collections" >/dev/null
fi
mapfile -t deps < <(python tests/harness/packaging/dependency_tarballs.py "$ee/collections")
core=$(sed -n 's/^ansible-core==/&/p' requirements.txt)

{
  echo "---"
  echo "version: 3"
  echo "images:"
  echo "  base_image:"
  echo "    name: registry.invalid/ee-base:1  # never pulled: create only writes the build context"
  echo "dependencies:"
  echo "  ansible_core:"
  echo "    package_pip: $core"
  echo "  ansible_runner:"
  echo "    package_pip: ansible-runner"
  echo "  galaxy:"
  echo "    collections:"
  for tarball in "$ee"/collections/dlinfra-gpu_cluster-*.tar.gz "${deps[@]}"; do
    echo "      - name: collections/$(basename "$tarball")"
    echo "        type: file"
  done
  echo "additional_build_files:"
  echo "  - src: collections"
  echo "    dest: collections"
  echo "build_arg_defaults:"
  echo "  ANSIBLE_GALAXY_CLI_COLLECTION_OPTS: --offline"
} >"$ee/execution-environment.yml"

# Without network where this machine can make a network namespace (root here); else as is.
offline=()
if unshare -n true 2>/dev/null; then offline=(unshare -n); fi

echo "ee: ansible-builder create (collections: $(cd "$ee/collections" && echo *))"
(cd "$ee" && "${offline[@]}" ansible-builder create -f execution-environment.yml -c context >"$work/create.log" 2>&1) \
  || { cat "$work/create.log"; fail "ansible-builder create"; }
build=$ee/context/_build
containerfile=
for candidate in "$ee/context/Containerfile" "$ee/context/Dockerfile"; do  # the name follows the container runtime
  if [ -f "$candidate" ]; then containerfile=$candidate; break; fi
done
[ -n "$containerfile" ] || fail "ansible-builder wrote no Containerfile"

# The generated steps, with the image's paths under $work/image. The introspect step reads its default folder,
# /usr/share/ansible/collections, which the replay names explicitly.
image=$work/image
galaxy_step=$(sed -n 's/^RUN \(.*ansible-galaxy collection install .*\)$/\1/p' "$containerfile")
introspect_step=$(sed -n 's/^RUN \(.*introspect\.py introspect.*\)$/\1/p' "$containerfile")
[ -n "$galaxy_step" ] && [ -n "$introspect_step" ] || fail "the Containerfile has no galaxy install or introspect step"
relocate() { sed -e "s#/usr/share/ansible#$image/usr/share/ansible#g" -e "s#/output/scripts#$build/scripts#g" -e "s#/tmp/src#$image/tmp/src#g"; }
galaxy_step=$(relocate <<<"$galaxy_step")
introspect_step=$(relocate <<<"$introspect_step")
introspect_step=${introspect_step/ introspect / introspect $image/usr/share/ansible/collections }
ANSIBLE_GALAXY_CLI_COLLECTION_OPTS=$(sed -n 's/^ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="\(.*\)"$/\1/p' "$containerfile")
export ANSIBLE_GALAXY_CLI_COLLECTION_OPTS PYCMD=python
# A fresh image knows no other collections: not this machine's HOME, nor the venv's `ansible` package.
export HOME=$work/home ANSIBLE_COLLECTIONS_PATH=$image/usr/share/ansible/collections ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
unset ANSIBLE_CONFIG

echo "ee: galaxy stage: $galaxy_step"
(cd "$build" && "${offline[@]}" bash -c "$galaxy_step" >"$work/galaxy.log" 2>&1) || { cat "$work/galaxy.log"; fail "the galaxy stage"; }
echo "ee: builder stage: $introspect_step"
(cd "$build" && "${offline[@]}" bash -c "$introspect_step") >"$work/introspect.log" 2>&1 || { cat "$work/introspect.log"; fail "introspection"; }
cat "$work/introspect.log"

installed=$(cd "$image/usr/share/ansible/collections/ansible_collections" && echo */* | tr ' /' '\n.' | sort)
wanted=$(printf '%s\n' dlinfra.gpu_cluster "${deps[@]}" | sed 's#.*/\([a-z0-9_]*\)-\([a-z0-9_]*\)-[0-9].*#\1.\2#' | sort)
[ "$installed" = "$wanted" ] || fail "the image would hold $(echo $installed), not $(echo $wanted)"

python_reqs=$image/tmp/src/requirements.txt system_reqs=$image/tmp/src/bindep.txt
expected=$(python tests/harness/packaging/controller_deps.py)
got=$(if [ -f "$python_reqs" ]; then python -c '
import sys
from packaging.requirements import Requirement
for line in open(sys.argv[1]):
    line = line.strip()
    if line:
        requirement, _, source = line.partition("  # from collection ")
        print(Requirement(requirement).name.lower(), source)' "$python_reqs" | sort; fi)
[ "$got" = "$(for name in $expected; do echo "$name dlinfra.gpu_cluster"; done | sort)" ] \
  || fail "Python requirements of the image: '$(echo $got)'; the controller side imports: '$(echo $expected)' (from dlinfra.gpu_cluster only)"
[ ! -s "$system_reqs" ] || fail "system requirements where none are needed: $(cat "$system_reqs")"
echo "ee: passed: $(echo $installed); Python: ${expected:-none} (from dlinfra.gpu_cluster); system: none"
