#!/usr/bin/env bash
# The controller's key for the tests' SSH connection to the containers (container_ssh.sh): made once per clone, in
# .cache/ssh. Written under another name first, so that a run killed half-way leaves no key without its public half.
set -euo pipefail
dir=$(cd "$(dirname "$0")/../../.." && pwd)/.cache/ssh
[ -s "$dir/id_ed25519.pub" ] && [ -s "$dir/id_ed25519" ] && exit 0
command -v ssh-keygen >/dev/null && command -v ssh >/dev/null || {
  [ "$(id -u)" -eq 0 ] || { echo "ensure_ssh_key: ssh is missing: sudo apt-get install openssh-client" >&2; exit 1; }
  echo "ensure_ssh_key: installing openssh-client"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q openssh-client >/dev/null
}
mkdir -p -m 0700 "$dir"
rm -f "$dir/new" "$dir/new.pub"
ssh-keygen -q -t ed25519 -N "" -C "dlinfra test controller" -f "$dir/new"
mv "$dir/new.pub" "$dir/id_ed25519.pub"
mv "$dir/new" "$dir/id_ed25519"
