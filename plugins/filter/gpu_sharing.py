# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a node shares its GPUs: its declaration resolved per GPU, the device plugin's config, the resources and labels
Kubernetes then shows: a thin wrapper over plugin_utils/_gpu_sharing."""

import json

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.device_plugin import (
    CONFIG_LABEL, allocatable, available_configs, device_plugin_config)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.labels import (
    gpu_node_labels, label_changes, node_labels)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.resolve import (
    VARIABLE, in_place, mig_layout, resolve)


def gpu_sharing_resolved(rules, facts, host, variable=VARIABLE):
    """{"gpus": [each GPU's setting], "problems": [...]} (see plugin_utils/_gpu_sharing/resolve)."""
    return resolve(str(host), dict(facts or {}), rules, str(variable))


def gpu_sharing_in_place(resolved, facts):
    """The resolved sharing with MIG GPUs that lack their layout shown whole (see plugin_utils/_gpu_sharing/resolve)."""
    return in_place(dict(resolved or {}), dict(facts or {}))


def gpu_sharing_mig_layout(resolved):
    """{GPU index: instances} for the nvidia_mig module (see plugin_utils/_gpu_sharing/resolve)."""
    _gpus(resolved, "gpu_sharing_mig_layout")
    return mig_layout(resolved)


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


def gpu_sharing_node_labels(resolved, facts, device_plugin=True):
    """The labels the microk8s role keeps on a node (see plugin_utils/_gpu_sharing/labels)."""
    return gpu_node_labels(_gpus(resolved, "gpu_sharing_node_labels"), dict(facts or {}), bool(device_plugin))


def gpu_sharing_label_changes(current, wanted):
    """kubectl label's arguments from a node's labels to the wanted ones (see plugin_utils/_gpu_sharing/labels)."""
    return label_changes(dict(current or {}), dict(wanted or {}))


def gpu_sharing_device_plugin_configs(nodes_json, wanted):
    """{name: config} of the device plugin's ConfigMap: the configs the nodes' labels name once this run's are applied
    (see plugin_utils/_gpu_sharing/device_plugin). nodes_json: `kubectl get nodes -o json`; wanted: [{name, labels}]."""
    labels = {node["metadata"]["name"]: node["metadata"].get("labels") or {}
              for node in json.loads(nodes_json or "{}").get("items") or []}
    labels.update((item["name"], item["labels"]) for item in wanted or [] if item.get("name"))
    return available_configs([node.get(CONFIG_LABEL) for node in labels.values() if node.get(CONFIG_LABEL)])


class FilterModule:
    def filters(self):
        return {"gpu_sharing_resolved": gpu_sharing_resolved, "gpu_sharing_in_place": gpu_sharing_in_place,
                "gpu_sharing_mig_layout": gpu_sharing_mig_layout,
                "gpu_sharing_device_plugin_config": gpu_sharing_device_plugin_config,
                "gpu_sharing_allocatable": gpu_sharing_allocatable, "gpu_sharing_labels": gpu_sharing_labels,
                "gpu_sharing_node_labels": gpu_sharing_node_labels,
                "gpu_sharing_label_changes": gpu_sharing_label_changes,
                "gpu_sharing_device_plugin_configs": gpu_sharing_device_plugin_configs}
