#!/usr/bin/env bash
# Build a systemd-ready Debian test image with debootstrap and `docker import` (no registry here).
# The tag carries a hash of this recipe, so an image is rebuilt only when the recipe changes;
# a stable alias (dlinfra-test/debian:RELEASE) is what molecule and the simulated lab use.
set -euo pipefail

release=${1:?usage: build_image.sh bookworm|trixie}
repo=dlinfra-test/debian
# What a minimal Debian server install holds (no task selected) and nothing more: every role brings what it uses,
# so a check-mode run and a converge on these images see what they would see on a freshly installed server.
# iproute2 (priority important, on every installed server) gives Ansible its network facts. openssh-server (and its
# sftp server) is what a server Ansible manages has; here it is off (ssh.service disabled, nothing listens) and serves only
# the tests' connection, one `sshd -i` per connection started through Docker (container_ssh.sh says why).
packages=python3,systemd,systemd-sysv,sudo,iproute2,openssh-server,openssh-sftp-server

# The one addition to a minimal server, which no role sees: a cache of the code Python compiles from Ansible's module
# payloads (image/dlinfra_zip_code_cache.py says why), loaded by a .pth file in the interpreter's local site directory.
zip_code_cache=$(dirname "$0")/image/dlinfra_zip_code_cache.py

recipe_hash=$( { cat "$0" "$zip_code_cache"; echo "$release"; } | sha256sum | cut -c1-12)
tag="$repo:$release-$recipe_hash"
alias="$repo:$release"

if docker image inspect "$tag" >/dev/null 2>&1; then
  docker tag "$tag" "$alias"
  echo "build_image: $tag is current"
  exit 0
fi

# The host's own Debian mirror (deb822 `URIs:` or a one-line `deb` entry), never a hard-coded host.
mirror=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
if [ -z "$mirror" ]; then
  mirror=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
fi
[ -n "$mirror" ] || { echo "build_image: no Debian mirror found in the host's apt sources" >&2; exit 1; }

command -v debootstrap >/dev/null || { echo "build_image: debootstrap is missing: run build_images.sh (it installs it once)" >&2; exit 1; }

root=$(mktemp -d "${TMPDIR:-/tmp}/dlinfra-$release.XXXXXX")
trap 'rm -rf "$root"' EXIT
echo "build_image: debootstrap $release from $mirror"
debootstrap --variant=minbase --include="$packages" "$release" "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -n 20 "$root.log" >&2
  exit 1
}
rm -f "$root.log"

# A container has no console to getty on, and machine-id must be unique per container.
chroot "$root" systemctl mask getty@tty1.service serial-getty@ttyS0.service console-getty.service systemd-remount-fs.service >/dev/null 2>&1 || true
chroot "$root" systemctl disable ssh.service ssh.socket >/dev/null 2>&1 || true
: >"$root/etc/machine-id"
python=$(basename "$(ls -d "$root"/usr/lib/python3.[0-9]* | head -n1)")
site_dir=$root/usr/local/lib/$python/dist-packages
mkdir -p "$site_dir"
cp "$zip_code_cache" "$site_dir/"
echo "import dlinfra_zip_code_cache" >"$site_dir/dlinfra-zip-code-cache.pth"
# Keep the package lists, as a real installed host has them (check mode cannot refresh them).
chroot "$root" apt-get clean


tar -C "$root" -c . | docker import \
  --change 'CMD ["/lib/systemd/systemd"]' \
  --change 'ENV container=docker' \
  --change "LABEL org.dlinfra.recipe=$recipe_hash" \
  - "$tag" >/dev/null
docker tag "$tag" "$alias"
echo "build_image: built $tag"
