#!/usr/bin/env bash
# Build the collection, install the tarball offline into a scratch path, run a role and the site playbook by
# their FQCNs from that installed copy against a test container, then run galaxy-importer on the tarball. (The
# user's whole path, and the execution environment built with the tarball: the as-a-user stage.)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
PATH="$repo/.venv/bin:$PATH"
dist=$repo/.cache/dist
rm -rf "$dist"
ansible-galaxy collection build --force --output-path "$dist" >/dev/null
tarball=$(ls "$dist"/dlinfra-gpu_cluster-*.tar.gz)
echo "collection: built $(basename "$tarball") ($(du -h "$tarball" | cut -f1))"

work=$(mktemp -d)
container=dlinfra-fqcn-$$
cleanup() { docker rm -f "$container" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

# Away from the repository's ansible.cfg, only the installed copy can answer to dlinfra.gpu_cluster.
cd "$work"
export ANSIBLE_COLLECTIONS_PATH=$work/collections ANSIBLE_ROLES_PATH=$work/roles
ansible-galaxy collection install --offline -p "$work/collections" "$tarball"
ansible-galaxy collection list dlinfra.gpu_cluster

docker run -d --name "$container" --hostname fqcn-node dlinfra-test/debian:bookworm sleep infinity >/dev/null
cat >inventory.yml <<YAML
gpu_cluster:
  children:
    cluster_fqcn:
      hosts:
        $container: {ansible_connection: community.docker.docker}
    head:
      hosts:
        $container: {}
YAML
cat >fqcn.yml <<'YAML'
- name: Run a role by its FQCN from the installed collection
  hosts: all
  gather_facts: false
  roles:
    - role: dlinfra.gpu_cluster.preflight
YAML
ansible-playbook -i inventory.yml fqcn.yml
ansible-playbook -i inventory.yml dlinfra.gpu_cluster.site --syntax-check

echo "collection: galaxy-importer"
python -m galaxy_importer.main "$tarball" >importer.log 2>&1 || { cat importer.log; exit 1; }
tail -n 5 importer.log
if grep -E '^(ERROR|WARNING)' importer.log; then
  echo "collection: galaxy-importer reported the problems above" >&2
  exit 1
fi
