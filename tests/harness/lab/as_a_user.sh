#!/usr/bin/env bash
# `make test` stage "as-a-user": the README's "Use it", literally, as a user with no clone would run it.
#   1. build the tarball; galaxy-importer passes it; an execution environment made with it (ee_check.sh:
#      ansible-builder create) holds exactly the collection's dependencies; make a fresh venv holding only the pinned ansible-core; HOME is an empty directory
#      (a controller that has never run us); the working directory is an empty directory outside the clone;
#   2. `ansible-galaxy collection install` the tarball and its declared dependencies (Galaxy is unreachable here:
#      --offline, from the artifacts dependency_tarballs.py makes of the `ansible` package's copies);
#   3. get the starter inventory with the README's command; a site run against it unedited (hosts that do not
#      exist) must fail, and so must one against an inventory with no hosts;
#   4. against the simulated lab, fresh (tests/harness/lab/demo.sh lab: containers from the minimal images, the store and
#      its vendor stand-ins, no site.yml run): site --check stops where check mode cannot work, the installed
#      dlinfra.gpu_cluster.site converges, a second run changes nothing on any host, and the nodes hold what it promised
#      (tests/harness/lab/lab_verify.yml, from the clone: packages and holds, the cluster, conda, the staged dataset);
#   5. with matplotlib installed on the controller as the README says, dlinfra.gpu_cluster.validate passes on the lab
#      and writes its three files. The inventory (with its plans) is left in .cache/as-a-user/inventory.
# The lab's inventory is inventories/sim, copied out of the clone: it stands in for the user's edited starter
# inventory. Its hosts are reached over SSH as a user's are (the far end: tests/harness/setup/container_ssh.sh).
set -euo pipefail
cd "$(dirname "$0")/../../.."
repo=$PWD
cache=$repo/.cache/as-a-user
rm -rf "$cache"
mkdir -p "$cache/dist" "$cache/deps"
work=$(mktemp -d "${TMPDIR:-/tmp}/dlinfra-user.XXXXXX")
lab_pid=""
# On an early exit the lab's subshell and the demo.sh it runs are stopped too.
trap '[ -z "$lab_pid" ] || { pkill -P "$lab_pid"; kill "$lab_pid"; } 2>/dev/null || true; rm -rf "$work"' EXIT

step() { echo; echo "as-a-user: [${SECONDS} s] $*"; }
fail() { echo "as-a-user: FAILED: $*" >&2; exit 1; }

# The simulated lab, fresh, made while the collection is built and checked (it is Docker's and the store's work, not the
# controller's); step 4 waits for it.
(tests/harness/lab/demo.sh down && tests/harness/lab/demo.sh lab) >"$work/lab.log" 2>&1 &
lab_pid=$!

step "build the collection"
.venv/bin/ansible-galaxy collection build --force --output-path "$cache/dist" >/dev/null
tarball=$(ls "$cache/dist"/dlinfra-gpu_cluster-*.tar.gz)
mapfile -t deps < <(.venv/bin/python tests/harness/packaging/dependency_tarballs.py "$cache/deps")

step "galaxy-importer (the checks Galaxy runs on upload)"
# Its own empty HOME: a dlinfra.gpu_cluster installed earlier in ~/.ansible/collections would otherwise be what its
# syntax check resolves the collection's FQCNs against, and a role or module new in the tarball would not be found.
# Its ansible-lint call is off: the ansible-lint stage of make test runs the production profile with no rule skipped over
# the whole tree, a superset of the importer's call (the same profile less six rules, over the tarball's files), and the
# runs below and in the later lab stages use the collection as installed from this tarball. Running it again here cost
# a minute of CPU in every make test (docs/testing.md, the time budget).
mkdir -p "$work/importer-home"
(cd "$work" && HOME=$work/importer-home PATH="$repo/.venv/bin:$PATH" GALAXY_IMPORTER_RUN_ANSIBLE_LINT=false \
  python -m galaxy_importer.main "$tarball" >"$work/importer.log" 2>&1) || { cat "$work/importer.log"; fail "galaxy-importer"; }
tail -n 3 "$work/importer.log"
if grep -E '^(ERROR|WARNING)' "$work/importer.log"; then fail "galaxy-importer reported the problems above"; fi

step "an execution environment with the tarball: ansible-builder create resolves exactly its dependencies"
tests/harness/packaging/ee_check.sh "$tarball"

core=$(grep -E '^ansible-core==' requirements.txt)
step "a fresh venv with only $core"
# The distribution's python3, as on a fresh Debian machine (not whatever a PATH of this one puts first).
user_python=python3
if [ -x /usr/bin/python3 ]; then user_python=/usr/bin/python3; fi
"$user_python" -m venv "$work/venv"
"$work/venv/bin/pip" install --disable-pip-version-check -q "$core" >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; fail "pip install $core"; }
extra=$("$work/venv/bin/pip" list --format=freeze --disable-pip-version-check | grep -viE '^(ansible-core|cryptography|cffi|pycparser|jinja2|markupsafe|packaging|pyyaml|resolvelib|pip|setuptools)==' || true)
[ -z "$extra" ] || fail "the user's venv holds more than ansible-core and its requirements: $extra"

# From here on: the user's shell. No clone, no .venv, no ansible.cfg, a HOME that has never run Ansible.
mkdir -p "$work/home" "$work/user"
cd "$work/user"
export HOME=$work/home PATH="$work/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin"
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS ANSIBLE_ROLES_PATH

step "ansible-galaxy collection install (the tarball and its declared dependencies, offline)"
ansible-galaxy collection install --offline "$tarball" "${deps[@]}"
ansible-galaxy collection list
ansible-galaxy collection verify --offline dlinfra.gpu_cluster
# (What the tarball ships, and nothing that only makes sense in a clone: tests/unit/collection/test_packaging.py.)
[ -d "$HOME/.ansible/collections/ansible_collections/dlinfra/gpu_cluster" ] || fail "the collection is not in the user's default collections path"

step "get the starter inventory, as the README says"
ansible-playbook dlinfra.gpu_cluster.init_inventory -e dest=inventories/lab
[ -f inventories/lab/hosts.yml ] && [ -d inventories/lab/group_vars ] || fail "init_inventory wrote no inventory"

step "site against the unedited starter inventory (its hosts do not exist): must fail"
if ansible-playbook dlinfra.gpu_cluster.site -i inventories/lab >"$work/unedited.log" 2>&1; then
  cat "$work/unedited.log"; fail "site exited 0 against hosts that do not exist"
fi
grep -q "UNREACHABLE" "$work/unedited.log" || { tail -n 30 "$work/unedited.log"; fail "site failed, but not on the unreachable hosts"; }

step "site against an inventory with no hosts: must fail naming the groups"
if ansible-playbook dlinfra.gpu_cluster.site -i inventories/missing >"$work/empty.log" 2>&1; then
  cat "$work/empty.log"; fail "site exited 0 with no hosts"
fi
grep -q "empty or missing here: gpu_cluster" "$work/empty.log" || { cat "$work/empty.log"; fail "no message naming the groups"; }

step "the simulated lab, fresh (made since the start of this stage)"
wait "$lab_pid" || { cat "$work/lab.log"; lab_pid=""; fail "tests/harness/lab/demo.sh lab"; }
lab_pid=""
grep -v "lab removed" "$work/lab.log"
cp -r "$repo/inventories/sim" inventories/sim
# The copy's fixture paths point at what `demo.sh lab` left in the clone (inventories/sim/group_vars/all.yml).
lab=(-i inventories/sim -e "demo_cache_dir=$repo/.cache/demo" -e "environment_fixture_dir=$repo/tests/fixtures/environments")

step "site --check on fresh hosts: stops where check mode cannot simulate package changes"
if ansible-playbook dlinfra.gpu_cluster.site "${lab[@]}" --check >"$work/check.log" 2>&1; then
  fail "site --check passed on hosts without python3-apt"
fi
grep -q "check mode cannot simulate package changes on this host: python3-apt is not" "$work/check.log" \
  || { tail -n 40 "$work/check.log"; fail "site --check failed, but not with preflight's message"; }

recap() {  # the PLAY RECAP lines of a log, and the number of hosts with changes or failures
  sed -n '/^PLAY RECAP/,$p' "$1" | grep -E 'ok=' || true
}

step "dlinfra.gpu_cluster.site converges the lab"
started=$(date +%s)
ansible-playbook dlinfra.gpu_cluster.site "${lab[@]}" >"$work/converge.log" 2>&1 || { tail -n 60 "$work/converge.log"; fail "the first site run failed"; }
echo "as-a-user: first run $(( $(date +%s) - started )) s"
recap "$work/converge.log"
recap "$work/converge.log" | grep -qE 'changed=[1-9]' || fail "the first run on fresh hosts changed nothing"

step "a second run changes nothing"
started=$(date +%s)
ansible-playbook dlinfra.gpu_cluster.site "${lab[@]}" >"$work/again.log" 2>&1 || { tail -n 60 "$work/again.log"; fail "the second site run failed"; }
echo "as-a-user: second run $(( $(date +%s) - started )) s"
recap "$work/again.log"
if recap "$work/again.log" | grep -E 'changed=[1-9]|failed=[1-9]|unreachable=[1-9]'; then
  grep -E '^(changed|TASK)' "$work/again.log" | grep -B1 '^changed' >&2 || true
  fail "the second run changed the hosts above"
fi

step "the nodes hold what site.yml promised (tests/harness/lab/lab_verify.yml: packages, holds, the cluster, conda, the dataset)"
started=$(date +%s)
ansible-playbook "$repo/tests/harness/lab/lab_verify.yml" "${lab[@]}" >"$work/verify.log" 2>&1 || { tail -n 60 "$work/verify.log"; fail "the converged lab failed its verify"; }
echo "as-a-user: verify $(( $(date +%s) - started )) s"
recap "$work/verify.log"
step "the acceptance run, as the README says: matplotlib on the controller, then dlinfra.gpu_cluster.validate"
matplotlib=$(grep -E '^matplotlib==' "$repo/requirements.txt")
pip install --disable-pip-version-check -q "$matplotlib" >"$work/pip-matplotlib.log" 2>&1 || { cat "$work/pip-matplotlib.log"; fail "pip install $matplotlib"; }
started=$(date +%s)
ansible-playbook dlinfra.gpu_cluster.validate "${lab[@]}" -e "validate_report_dir=$work/report" >"$work/validate.log" 2>&1 \
  || { tail -n 40 "$work/validate.log"; fail "validate failed on the freshly converged lab"; }
echo "as-a-user: validate $(( $(date +%s) - started )) s"
grep -oE "validate: (PASS|FAIL), [^;]*" "$work/validate.log" | tail -n 1
for file in report.json junit.xml report.html; do [ -s "$work/report/$file" ] || fail "validate wrote no $file"; done
# The converged lab's inventory, with the plans shard_staging wrote into it, for the validate stage that follows.
cp -r inventories/sim "$cache/inventory"
echo "as-a-user: passed in ${SECONDS} s"
