#!/usr/bin/env bash
# What a site's admin does before turning on the workspace of tests/fixtures/workspace_hosts.yml, done on the simulated
# lab (make demo's workspace step and make test's workspace stage run it):
#
#   workspace_node.sh USER INDEX_DIR
#
#   - Jupyter's pinned wheels as a package index in INDEX_DIR, served by the store at /pypi (store_jupyter_index.sh),
#     as a site without PyPI serves them;
#   - USER on sim-gpu1 (the roles refuse a user the node does not know);
#   - Mesa's libGL, selected: the driver's Debian packages select NVIDIA's GLX alternative, which holds no libGL without
#     NVIDIA's GLX package, and Xtigervnc links libGL (the remote_desktop role stops naming this);
#   - the `run` command's engine, rootless podman from Debian, the way this lab's nodes can run it: inside a Docker
#     container on cgroup v1 it takes runc and the cgroupfs manager (crun refuses the host's hybrid cgroups) and the vfs
#     storage driver (no /dev/fuse for fuse-overlayfs); the container's /proc is unmasked by demo.sh
#     (systempaths=unconfined) so that podman can mount a new one;
#   - TEST DOUBLES of the GPU's device nodes, /dev/nvidia0 and /dev/nvidiactl as copies of /dev/null, and of the CDI
#     spec that names them: the toolkit role writes the spec only where a driver answers, which no lab node has, so
#     this runs the toolkit's nvidia-ctk as the role would (the lab's is itself a test double, tests/test_doubles/
#     nvidia_container_toolkit/nvidia-ctk.fixture);
#   - the image the fixture's run command names, made from Debian's busybox-static and imported into USER's own
#     (rootless) image store, since the lab has no registry.
set -euo pipefail
cd "$(dirname "$0")/../../.."
user=${1:?usage: workspace_node.sh USER INDEX_DIR}
index=${2:?usage: workspace_node.sh USER INDEX_DIR}
node=sim-gpu1
image=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["all"]["hosts"]["sim-gpu1"]["nvidia_container_toolkit_run_image"])' \
  tests/fixtures/workspace_hosts.yml)

tests/harness/lab/store_jupyter_index.sh "$index"

docker exec -i -e USER_NAME="$user" -e IMAGE="$image" "$node" bash -euo pipefail <<'EOF'
id -u "$USER_NAME" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$USER_NAME"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends libgl1 libglx-mesa0 podman uidmap runc busybox-static >/dev/null
update-alternatives --set glx /usr/lib/mesa-diverted >/dev/null
printf '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n' > /etc/containers/containers.conf
printf '[storage]\ndriver = "vfs"\n' > /etc/containers/storage.conf
for device in nvidia0 nvidiactl; do
  [ -e "/dev/$device" ] || mknod -m 666 "/dev/$device" c 1 3
done
[ -e /etc/cdi/nvidia.yaml ] || nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml
if ! su - "$USER_NAME" -c "podman image exists $IMAGE" 2>/dev/null; then
  rootfs=$(mktemp -d /var/tmp/run-image.XXXXXX)
  chmod 755 "$rootfs"  # the image's /: mktemp made it its owner's alone
  mkdir -p "$rootfs/bin" "$rootfs/proc" "$rootfs/sys" "$rootfs/dev" "$rootfs/etc" "$rootfs/tmp"
  cp /bin/busybox "$rootfs/bin/"
  chroot "$rootfs" /bin/busybox --install -s /bin
  tar -C "$rootfs" -cf "$rootfs.tar" .
  chmod 644 "$rootfs.tar"
  su - "$USER_NAME" -c "podman import $rootfs.tar $IMAGE" >/dev/null
  rm -rf "$rootfs" "$rootfs.tar"
fi
EOF
