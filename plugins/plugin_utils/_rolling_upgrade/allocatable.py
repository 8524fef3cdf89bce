# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU resources a node must show Kubernetes before the rolling path uncordons it. Pure Python.

The device plugin advertises what it finds on the node with the config the node's labels name: whole GPUs (those on
PCI) as ``nvidia.com/gpu``, each as many times as the replicas where the node is time-sliced, and where it shares by
MIG its MIG devices - every one as ``nvidia.com/gpu`` under the single strategy, each profile as
``nvidia.com/mig-<profile>`` and the GPUs without MIG as ``nvidia.com/gpu`` under the mixed one. Read from what is
there (the labels the microk8s role set, the MIG devices nvidia-smi lists), so a rollback is checked as a change is.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_jobs import mig_resource

GPU = "nvidia.com/gpu"


def expected_allocatable(labels, pci_gpus, mig_gpus):
    """{resource: count} (resources with none left out).

    labels: the node's labels in Kubernetes. pci_gpus: how many NVIDIA GPUs are on its PCI bus. mig_gpus: the
    nvidia_mig module's ``gpus`` (index, mig, instances as 'profile@start'); empty where MIG is not read.
    """
    sharing = labels.get("dlinfra.io/gpu.sharing", "none")
    if sharing == "time-sliced":
        replicas = str(labels.get("nvidia.com/gpu.replicas") or "1")
        counts = {GPU: pci_gpus * max(1, int(replicas) if replicas.isdigit() else 1)}
    elif sharing == "mig":
        single = labels.get("nvidia.com/mig.strategy") == "single"
        counts = {}
        for gpu in mig_gpus:
            if not gpu["mig"]:
                counts[GPU] = counts.get(GPU, 0) + (0 if single else 1)
            for instance in gpu["instances"]:
                resource = GPU if single else mig_resource(instance.split("@")[0])
                counts[resource] = counts.get(resource, 0) + 1
    else:
        counts = {GPU: pci_gpus}
    return {resource: count for resource, count in sorted(counts.items()) if count}


def allocatable_problem(node, pci_gpus, mig_gpus):
    """'' when the node (``kubectl get node -o json``, parsed) shows the GPU resources expected_allocatable gives;
    else what it shows and what was expected."""
    metadata, status = (node or {}).get("metadata") or {}, (node or {}).get("status") or {}
    shown = {key: int(value) for key, value in sorted((status.get("allocatable") or {}).items())
             if (key == GPU or key.startswith("nvidia.com/mig-")) and int(value)}
    wanted = expected_allocatable(metadata.get("labels") or {}, pci_gpus, mig_gpus or [])
    if shown == wanted:
        return ""
    return "allocatable shows %s, expected %s" % (_said(shown), _said(wanted))


def _said(counts):
    return ", ".join("%s %d" % item for item in counts.items()) or "no GPU resource"
