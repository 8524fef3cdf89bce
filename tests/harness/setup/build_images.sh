#!/usr/bin/env bash
# Build (or reuse) every test image, in parallel. Tools the builds share are installed once, before the
# parallel part: two `apt-get install` at the same moment fail on dpkg's lock.
set -euo pipefail
here=$(dirname "$0")

if ! command -v debootstrap >/dev/null; then
  [ "$(id -u)" -eq 0 ] || { echo "build_images: debootstrap is missing: sudo apt-get install debootstrap" >&2; exit 1; }
  echo "build_images: installing debootstrap"
  # Another apt (unattended-upgrades, a parallel make) may hold the lock: wait for it instead of failing.
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q debootstrap >/dev/null
fi

# The key of the tests' SSH connection to the containers of these images (container_ssh.sh)
"$here/ensure_ssh_key.sh"

pids=()
for release in bookworm trixie; do
  "$here/build_image.sh" "$release" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
