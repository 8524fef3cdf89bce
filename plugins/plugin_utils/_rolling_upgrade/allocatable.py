# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU resources a node must show Kubernetes before the rolling path uncordons it. Pure Python.

The device plugin advertises what it finds on the node with the config the node's labels name: whole GPUs (those on
PCI) as ``nvidia.com/gpu``, each as many times as the replicas where the node is time-sliced, and where it shares by
MIG the MIG devices the GPUs have. The node is described as _gpu_sharing's settings and counted by the same
``allocatable`` that the microk8s role's config comes from. Read from what is there (the labels the microk8s role set,
the MIG devices nvidia-smi lists), so a rollback is checked as a change is.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.device_plugin import GPU_RESOURCE, allocatable


def _mig_setting(gpu):
    """A GPU as the nvidia_mig module read it (mig, instances as 'profile@start'), as a resolved setting."""
    if not (gpu["mig"] and gpu["instances"]):
        return {"mode": "whole"}
    layout = {}
    for instance in gpu["instances"]:
        profile = instance.split("@")[0]
        layout[profile] = layout.get(profile, 0) + 1
    return {"mode": "mig", "layout": layout}


def expected_allocatable(labels, pci_gpus, mig_gpus):
    """{resource: count} (resources with none left out).

    labels: the node's labels in Kubernetes. pci_gpus: how many NVIDIA GPUs are on its PCI bus. mig_gpus: the
    nvidia_mig module's ``gpus`` (index, mig, instances as 'profile@start'); empty where MIG is not read.
    """
    sharing = labels.get("dlinfra.io/gpu.sharing", "none")
    if sharing == "mig":
        return allocatable([_mig_setting(gpu) for gpu in mig_gpus])
    replicas = str(labels.get("nvidia.com/gpu.replicas") or "1") if sharing == "time-sliced" else "1"
    return allocatable([{"mode": "whole", "replicas": max(1, int(replicas) if replicas.isdigit() else 1)}] * pci_gpus)


def allocatable_problem(node, pci_gpus, mig_gpus):
    """'' when the node (``kubectl get node -o json``, parsed) shows the GPU resources expected_allocatable gives;
    else what it shows and what was expected."""
    metadata, status = (node or {}).get("metadata") or {}, (node or {}).get("status") or {}
    shown = {key: int(value) for key, value in sorted((status.get("allocatable") or {}).items())
             if (key == GPU_RESOURCE or key.startswith("nvidia.com/mig-")) and int(value)}
    wanted = expected_allocatable(metadata.get("labels") or {}, pci_gpus, mig_gpus or [])
    if shown == wanted:
        return ""
    return "allocatable shows %s, expected %s" % (_said(shown), _said(wanted))


def _said(counts):
    return ", ".join("%s %d" % item for item in counts.items()) or "no GPU resource"
