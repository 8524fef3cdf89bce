# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the nccl role sets up GPUDirect RDMA on a node (nccl_gpudirect), from what the node will run. Pure Python.

GPUDirect RDMA lets an HCA read and write GPU memory. It needs an HCA, and one of two ways to register GPU memory with
it: DMA-BUF (the open kernel module on Linux 5.12 or later: nothing to load, NCCL uses it by itself) or the driver's
nvidia-peermem module (the proprietary module, or an older kernel), which nothing loads unless told to.

The plan is made from the driver the nvidia_driver role planned for the node (its flavour) and the running kernel, not
from what is loaded now: on a freshly provisioned node the driver loads only after the reboot, and the module must
then load at boot. nccl_gpudirect, as nccl_rdma takes its values:
  auto   GPUDirect where the node has an HCA and a planned driver; otherwise nothing, and the plan says why.
  true   the same, and a node where it cannot be set up (no HCA, no planned driver) is a problem.
  false  GPUDirect off: nvidia-peermem is not loaded at boot, and NCCL_NET_GDR_LEVEL=LOC keeps NCCL from using it.
NCCL's network GDR settings (NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ) from nccl_conf_extra are written only on nodes
with an HCA: they concern the network transport alone.
"""

import re

CHOICES = ("auto", "true", "false")
DMABUF_MIN_KERNEL = (5, 12)
# NCCL's environment variables that concern GPUDirect RDMA over the network (NCCL's documentation, "Environment
# Variables"): where the node has no HCA they have nothing to act on.
NET_GDR_KEYS = ("NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ")
OFF_LEVEL = "LOC"  # NCCL_NET_GDR_LEVEL=LOC: never use GPUDirect RDMA

_RELEASE = re.compile(r"^(\d+)\.(\d+)")


def _kernel(release):
    match = _RELEASE.match(str(release or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def gpudirect_plan(setting, hca, driver_flavor, kernel_release, conf_extra=None):
    """{"method", "load_peermem", "conf", "note", "problems"} for one node.

    setting: nccl_gpudirect (auto, true or false, as a string or a bool). hca: whether the node gets the RDMA userspace (it has an HCA, or nccl_rdma is true).
    driver_flavor: 'open', 'proprietary', or None where the nvidia_driver role planned no driver for the node.
    kernel_release: the running kernel's (uname -r). conf_extra: nccl_conf_extra, for what nccl.conf gets.
    method: 'dmabuf', 'peermem' or None. conf: nccl.conf's GDR entries for this node ({key: value}, None to leave a key
    out). note: one line saying what the node gets and why. problems: what the nccl role's preflight lists under
    its line naming the host.
    """
    setting = str(setting).lower()
    conf_extra = dict(conf_extra or {})
    plan = {"method": None, "load_peermem": False, "conf": {}, "note": "", "problems": []}
    if setting not in CHOICES:
        plan["problems"].append("nccl_gpudirect=%r is none of auto, true and false; set auto (GPUDirect RDMA where "
                                "the node has an HCA and a driver), true (and stop where it cannot) or false" % (setting,))
        return plan
    if not hca:
        plan["conf"] = {key: None for key in NET_GDR_KEYS if key in conf_extra}
        plan["note"] = "no GPUDirect RDMA: the node has no RDMA device"
        if plan["conf"]:
            plan["note"] += " (%s left out of nccl.conf)" % ", ".join(sorted(plan["conf"]))
        if setting == "true":
            plan["problems"].append("nccl_gpudirect is true but the node has no RDMA device (HCA), which "
                                    "GPUDirect RDMA goes through; set nccl_gpudirect: auto for nodes without one")
        return plan
    if setting == "false":
        given = str(conf_extra.get("NCCL_NET_GDR_LEVEL", OFF_LEVEL))
        if given.upper() != OFF_LEVEL:
            plan["problems"].append("nccl_gpudirect is false but nccl_conf_extra sets NCCL_NET_GDR_LEVEL=%s, which "
                                    "asks NCCL to use it; remove that key, or set nccl_gpudirect: auto" % given)
        plan["conf"] = {"NCCL_NET_GDR_LEVEL": OFF_LEVEL}
        plan["note"] = "GPUDirect RDMA off (nccl_gpudirect: false): NCCL_NET_GDR_LEVEL=%s, nvidia-peermem not loaded" % OFF_LEVEL
        return plan
    if driver_flavor not in ("open", "proprietary"):
        plan["note"] = "no GPUDirect RDMA yet: the nvidia_driver role planned no driver for this node"
        if setting == "true":
            plan["problems"].append("nccl_gpudirect is true but the nvidia_driver role planned no driver for "
                                    "this node (no gpu_cluster_driver_plan_file), and GPUDirect RDMA goes through the "
                                    "driver; run the nvidia_driver role first (site.yml does), or set nccl_gpudirect: "
                                    "auto")
        return plan
    kernel = _kernel(kernel_release)
    if driver_flavor == "open" and kernel and kernel >= DMABUF_MIN_KERNEL:
        plan["method"] = "dmabuf"
        plan["note"] = "GPUDirect RDMA through DMA-BUF (the open kernel module on Linux %s): nothing to load" % kernel_release
        return plan
    plan["method"], plan["load_peermem"] = "peermem", True
    why = "the proprietary kernel module" if driver_flavor == "proprietary" else "Linux %s, older than %d.%d," % (
        (kernel_release or "unknown",) + DMABUF_MIN_KERNEL)
    plan["note"] = "GPUDirect RDMA through nvidia-peermem (%s has no DMA-BUF for it), loaded at boot" % why
    return plan
