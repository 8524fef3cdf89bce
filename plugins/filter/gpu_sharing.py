# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a node shares its GPUs: its declaration resolved per GPU, the device plugin's config, the resources and labels
Kubernetes then shows: a thin wrapper over plugin_utils/_gpu_sharing."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.device_plugin import (
    allocatable, device_plugin_config)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.labels import node_labels
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.resolve import resolve


def gpu_sharing_resolved(rules, facts, host):
    """{"gpus": [each GPU's setting], "problems": [...]} (see plugin_utils/_gpu_sharing/resolve)."""
    return resolve(str(host), dict(facts or {}), rules)


def _gpus(resolved, filter_name):
    if resolved.get("problems"):
        raise AnsibleFilterError("%s: the declaration has problems: %s"
                                 % (filter_name, "; ".join(resolved["problems"])))
    return list(resolved.get("gpus") or [])


def gpu_sharing_device_plugin_config(resolved):
    """The device plugin's config file for the node (see plugin_utils/_gpu_sharing/device_plugin)."""
    return device_plugin_config(_gpus(resolved, "gpu_sharing_device_plugin_config"))


def gpu_sharing_allocatable(resolved):
    """{resource: count} the node shows (see plugin_utils/_gpu_sharing/device_plugin)."""
    return allocatable(_gpus(resolved, "gpu_sharing_allocatable"))


def gpu_sharing_labels(resolved, facts):
    """The node's labels (see plugin_utils/_gpu_sharing/labels)."""
    return node_labels(_gpus(resolved, "gpu_sharing_labels"), dict(facts or {}))


class FilterModule:
    def filters(self):
        return {"gpu_sharing_resolved": gpu_sharing_resolved,
                "gpu_sharing_device_plugin_config": gpu_sharing_device_plugin_config,
                "gpu_sharing_allocatable": gpu_sharing_allocatable, "gpu_sharing_labels": gpu_sharing_labels}
