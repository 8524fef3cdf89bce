#!/bin/sh
# TEST DOUBLE of NVIDIA's libnvidia-container apt repository, for the molecule scenario nvidia_container_toolkit.
# NVIDIA's repository is unreachable from the test machines. This builds, under $1, a repository laid out like
# https://nvidia.github.io/libnvidia-container (gpgkey at the top, a flat repository in stable/deb/<arch>/), signed
# with an OpenPGP key generated here (InRelease and Release.gpg), holding FIXTURE packages named like NVIDIA's
# (nvidia-container-toolkit, nvidia-container-toolkit-base, libnvidia-container-tools, libnvidia-container1) in
# every version given after $1. The stand-in binaries are the files nvidia-container-runtime.fixture and
# nvidia-ctk.fixture next to this script. The key's fingerprint is written to $1/fingerprint.
set -eu
root=$1
shift
here=$(dirname "$0")
arch=$(dpkg --print-architecture)
repo=$root/stable/deb/$arch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$repo"

package() {  # name version depends files...
  name=$1 version=$2 depends=$3
  shift 3
  dir=$work/$name-$version
  mkdir -p "$dir/DEBIAN" "$dir/usr/share/doc/$name"
  {
    echo "Package: $name"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: dlinfra.gpu_cluster test fixtures <fixtures@invalid>"
    [ -z "$depends" ] || echo "Depends: $depends"
    echo "Section: utils"
    echo "Priority: optional"
    echo "Description: TEST DOUBLE (fixture) standing in for NVIDIA's $name"
    echo " Built by molecule/nvidia_container_toolkit/files/build-fixture-repo.sh; not NVIDIA software."
  } >"$dir/DEBIAN/control"
  echo "fixture package from molecule/nvidia_container_toolkit, a test double of NVIDIA's $name" \
    >"$dir/usr/share/doc/$name/README.fixture"
  for spec in "$@"; do  # source:destination
    install -D -m 0755 "${spec%%:*}" "$dir${spec#*:}"
    sed -i "s/@VERSION@/${version%-*}/" "$dir${spec#*:}"
  done
  dpkg-deb --root-owner-group --build "$dir" "$repo/${name}_${version}_${arch}.deb" >/dev/null
}

for version in "$@"; do
  package libnvidia-container1 "$version" ""
  package libnvidia-container-tools "$version" "libnvidia-container1 (= $version)"
  package nvidia-container-toolkit-base "$version" "" \
    "$here/nvidia-container-runtime.fixture:/usr/bin/nvidia-container-runtime" "$here/nvidia-ctk.fixture:/usr/bin/nvidia-ctk"
  package nvidia-container-toolkit "$version" \
    "nvidia-container-toolkit-base (= $version), libnvidia-container-tools (= $version)"
done

export GNUPGHOME="$work/gnupg"
mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key \
  'dlinfra fixture repository key (test double of NVIDIA libnvidia-container) <fixtures@invalid>' ed25519 sign never
gpg --batch --armor --export >"$root/gpgkey"
gpg --batch --with-colons --list-keys | awk -F: '$1 == "fpr" { print $10; exit }' >"$root/fingerprint"

cd "$repo"
apt-ftparchive packages . >Packages
apt-ftparchive -o APT::FTPArchive::Release::Origin='dlinfra fixture' \
  -o APT::FTPArchive::Release::Label='libnvidia-container test double' release . >Release
gpg --batch --yes --clearsign -o InRelease Release
gpg --batch --yes --armor --detach-sign -o Release.gpg Release
