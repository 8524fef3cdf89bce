# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which way GPUDirect RDMA can register GPU memory with the HCAs on this node.

Two methods exist. DMA-BUF: the kernel's own buffer sharing, which RDMA gained in Linux 5.12 and which NVIDIA's open
kernel module exports (NVIDIA recommends it where it works). nvidia-peermem: the driver's peer-memory module, loaded as
`nvidia_peermem`, for the proprietary module and older kernels. NCCL takes DMA-BUF when it can.
"""

import os
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import kernel_module_flavor
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.sysfs_files import read_text

METHODS = ("dmabuf", "peermem")
DMABUF_MIN_KERNEL = (5, 12)

_RELEASE = re.compile(r"^(\d+)\.(\d+)")


def kernel_version(release):
    """'6.8.0-90-generic' -> (6, 8); None when it does not start with major.minor."""
    match = _RELEASE.match(release or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _read_whole(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def gpudirect_state(sysfs_root, procfs_root):
    """{method, reason, dmabuf_possible, peermem_loaded, nvidia_loaded, kernel_module_flavor, kernel_release}.

    method is 'dmabuf', 'peermem' or None; reason says why it is None (what is missing and how to get it), else None.
    """
    nvidia_loaded = os.path.isdir(os.path.join(sysfs_root, "module", "nvidia"))
    peermem_loaded = os.path.isdir(os.path.join(sysfs_root, "module", "nvidia_peermem"))
    flavor = kernel_module_flavor(_read_whole(os.path.join(procfs_root, "driver", "nvidia", "version")))
    release = read_text(os.path.join(procfs_root, "sys", "kernel", "osrelease"))
    version = kernel_version(release)
    dmabuf_possible = bool(nvidia_loaded and flavor == "open" and version and version >= DMABUF_MIN_KERNEL)

    method, reason = None, None
    if dmabuf_possible:
        method = "dmabuf"
    elif peermem_loaded:
        method = "peermem"
    elif not nvidia_loaded:
        reason = "the nvidia kernel module is not loaded, so GPU memory cannot be registered with an HCA"
    else:
        missing = []
        if flavor != "open":
            missing.append("the open kernel module (this one is %s)" % (flavor or "of unknown flavour"))
        if not version or version < DMABUF_MIN_KERNEL:
            missing.append("Linux %d.%d or later (this is %s)" % (DMABUF_MIN_KERNEL + (release or "unknown",)))
        reason = ("DMA-BUF needs %s, and nvidia_peermem is not loaded: load it (modprobe nvidia-peermem, with the "
                  "driver built against the installed RDMA stack) or move to the open kernel module on a newer kernel"
                  % " and ".join(missing))
    return {"method": method, "reason": reason, "dmabuf_possible": dmabuf_possible, "peermem_loaded": peermem_loaded,
            "nvidia_loaded": nvidia_loaded, "kernel_module_flavor": flavor, "kernel_release": release}
