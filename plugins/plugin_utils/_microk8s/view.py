# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the microk8s role's converged_state record holds of the cluster, read once per cluster on its first head.

The role's re-run reads `microk8s status --format yaml`, `microk8s kubectl get nodes -o json` and, where it applies the
device plugin, the DaemonSet, in one task on the first head (registered as a loop, one result per read). For each host
this module reduces them to the few items the role manages that concern it: the host's own node (its role, readiness
and GPU labels), the wanted addons' states, high availability where there are three heads or more, and the device
plugin's spec and configs. Nothing else of the outputs counts (heartbeat times, capacities, other addons), so a
converged cluster reads the same run after run.

A read that failed is 'unreadable ...', which converged_state never takes as converged.
"""

import functools
import hashlib
import json

import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.labels import own_label

GPU_LABEL = "nvidia.com/gpu.present"
WORKER_LABEL = "node.kubernetes.io/microk8s-worker"


@functools.lru_cache(maxsize=8)
def _status(text):
    return yaml.safe_load(text) or {}


@functools.lru_cache(maxsize=8)
def _nodes(text, device_plugin):
    """name -> its item (role, readiness, gpu label and, where the role applies the device plugin, a digest of the
    other GPU labels it writes: with the nvidia addon, its feature discovery owns them), and
    address -> name, of `kubectl get nodes -o json`. Cached: every host of a cluster reads the same output, which at
    1,000 nodes is megabytes."""
    by_name, by_address = {}, {}
    for node in json.loads(text).get("items", []):
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        status = node.get("status") or {}
        ready = any(condition.get("type") == "Ready" and condition.get("status") == "True"
                    for condition in status.get("conditions") or [])
        gpu_labels = sorted((key, value) for key, value in labels.items() if own_label(key))
        by_name[name] = "%s %s %s=%s" % ("worker" if WORKER_LABEL in labels else "controlplane",
                                         "Ready" if ready else "NotReady", GPU_LABEL, labels.get(GPU_LABEL, "-"))
        if device_plugin and gpu_labels:
            by_name[name] += " labels " + hashlib.sha256(json.dumps(gpu_labels).encode()).hexdigest()[:16]
        for address in status.get("addresses") or []:
            if address.get("type") == "InternalIP":
                by_address[address.get("address")] = name
    return by_name, by_address


def _spec_digest(text):
    obj = json.loads(text)
    return "spec " + hashlib.sha256(json.dumps(obj.get("spec"), sort_keys=True).encode()).hexdigest()


def _unreadable(read, result):
    words = (result.get("stderr") or result.get("stdout") or result.get("msg") or "no output").strip().splitlines()
    return "unreadable: %s: %s" % (read, words[0] if words else "no output")


def observed_items(view, node_name, node_address, addons, device_plugin=False, high_availability=False):
    """The items of the cluster this host's record holds, from the registered reads (view).

    view: the loop's register, each result with item.key in status, nodes, device_plugin; node_name and node_address
    are Kubernetes' names for the host (a node is found by either, as the role's join does); addons the names of the
    wanted addons; device_plugin whether the role applies the device plugin; high_availability whether the role asks
    for it (three heads or more).
    """
    results = {result.get("item", {}).get("key"): result for result in (view or {}).get("results") or []}
    if "status" not in results or "nodes" not in results:
        return {"k8s cluster": "unreadable: the cluster was not read"}
    items = {}
    try:
        status = results["status"]
        if status.get("rc") != 0:
            return {"k8s cluster": _unreadable("microk8s status", status)}
        parsed = _status(status["stdout"])
        items["k8s running"] = str(bool((parsed.get("microk8s") or {}).get("running"))).lower()
        states = {addon.get("name"): addon.get("status") for addon in parsed.get("addons") or []}
        items.update(("k8s addon " + name, states.get(name, "not listed")) for name in addons)
        if high_availability:
            enabled = (parsed.get("high-availability") or {}).get("enabled")
            items["k8s high-availability"] = "enabled" if enabled else "disabled"
        nodes = results["nodes"]
        if nodes.get("rc") != 0:
            return {"k8s cluster": _unreadable("kubectl get nodes", nodes)}
        by_name, by_address = _nodes(nodes["stdout"], bool(device_plugin))
        name = node_name if node_name in by_name else by_address.get(node_address)
        items["k8s node"] = by_name[name] if name else "absent"
        if device_plugin:
            plugin = results.get("device_plugin") or {}
            configs = results.get("device_plugin_configs") or {}
            if plugin.get("rc") == 0 and configs.get("rc") == 0:
                data = json.dumps(json.loads(configs["stdout"]).get("data"), sort_keys=True)
                items["k8s device plugin"] = "%s configs %s" % (_spec_digest(plugin["stdout"]),
                                                                hashlib.sha256(data.encode()).hexdigest()[:16])
            else:
                failed, read = (plugin, "kubectl get daemonset") if plugin.get("rc") != 0 else \
                    (configs, "kubectl get configmap")
                missing = "NotFound" in (failed.get("stderr") or "") + (failed.get("stdout") or "")
                items["k8s device plugin"] = "absent" if missing else _unreadable(read, failed)
    except (AttributeError, KeyError, TypeError, ValueError, yaml.YAMLError) as error:
        return {"k8s cluster": "unreadable: %s" % error}
    return items
