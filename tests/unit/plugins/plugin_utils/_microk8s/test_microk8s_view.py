"""The cluster items of the microk8s role's record: each thing the role manages in the cluster shows in them, run-time
noise (heartbeats, capacities, other addons) does not, and a failed read never passes for a converged cluster."""

import json
import pathlib

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._microk8s import view as microk8s_view

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "microk8s"
ADDONS = ["dns", "hostpath-storage", "nvidia"]


def read(name):
    return (FIXTURES / name).read_text()


CONFIGS = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "nvidia-device-plugin-configs", "resourceVersion": "1"},
                      "data": {"whole": "flags:\n  migStrategy: none\nversion: v1\n"}})


def view(status=None, nodes=None, plugin=None, plugin_rc=0, configs=CONFIGS):
    """The register of the role's read loop, as Ansible makes it."""
    results = [{"item": {"key": "status"}, "rc": 0, "stdout": read("status.txt") if status is None else status,
                "stderr": ""},
               {"item": {"key": "nodes"}, "rc": 0, "stdout": read("nodes.json") if nodes is None else nodes,
                "stderr": ""}]
    if plugin is not None or plugin_rc:
        results.append({"item": {"key": "device_plugin"}, "rc": plugin_rc, "stdout": plugin or "",
                        "stderr": "" if plugin_rc == 0 else
                        'Error from server (NotFound): daemonsets.apps "nvidia-device-plugin-daemonset" not found'})
        results.append({"item": {"key": "device_plugin_configs"}, "rc": plugin_rc, "stdout": configs if not plugin_rc
                        else "", "stderr": "" if plugin_rc == 0 else
                        'Error from server (NotFound): configmaps "nvidia-device-plugin-configs" not found'})
    return {"changed": False, "results": results}


def items(registered, name="dgx01", address="10.0.0.21", **options):
    return microk8s_view.observed_items(registered, name, address, ADDONS, **options)


def test_a_gpu_worker_holds_its_node_and_the_wanted_addons():
    assert items(view(), high_availability=True) == {
        "k8s running": "true",
        "k8s addon dns": "enabled", "k8s addon hostpath-storage": "enabled", "k8s addon nvidia": "enabled",
        "k8s high-availability": "enabled",
        "k8s node": "worker Ready nvidia.com/gpu.present=true",
    }


@pytest.mark.parametrize("name, address, node", [
    ("head-a1", "10.0.0.11", "controlplane Ready nvidia.com/gpu.present=-"),
    ("cpu01", "10.0.0.31", "worker NotReady nvidia.com/gpu.present=-"),
    ("dgx01-renamed", "10.0.0.21", "worker Ready nvidia.com/gpu.present=true"),  # found by address, as joins are
    ("new01", "10.0.0.99", "absent"),
])
def test_each_host_finds_its_own_node(name, address, node):
    assert items(view(), name, address)["k8s node"] == node


def noise(nodes):
    """Heartbeats, resource versions and capacities move on a converged cluster."""
    document = json.loads(nodes)
    for node in document["items"]:
        node["metadata"]["resourceVersion"] = "999999"
        for condition in node["status"]["conditions"]:
            condition["lastHeartbeatTime"] = "2026-11-28T10:00:00Z"
        node["status"]["allocatable"] = {"cpu": "1"}
    return json.dumps(document)


def test_what_moves_on_a_converged_cluster_is_no_drift():
    before = items(view(plugin=read("daemonset.json")), device_plugin=True)
    plugin = json.loads(read("daemonset.json"))
    plugin["status"]["numberReady"] = 0
    plugin["metadata"]["resourceVersion"] = "1"
    status = read("status.txt").replace("status: disabled", "status: enabled")  # an addon the role leaves alone
    assert items(view(status, noise(read("nodes.json")), json.dumps(plugin)), device_plugin=True) == before


def label_removed(nodes):
    return nodes.replace('"nvidia.com/gpu.present": "true"', '"nvidia.com/gpu.pres": "x"')


def plugin_image(plugin):
    return plugin.replace("k8s-device-plugin:v0.17.1", "k8s-device-plugin:v0.16.0")


@pytest.mark.parametrize("change, item", [
    (lambda v: v["results"][0].update(stdout=read("status.txt").replace(
        "name: nvidia\n    repository: core\n    description: NVIDIA hardware (GPU and network) support\n"
        "    version: 1.0.0\n    status: enabled", "name: nvidia\n    status: disabled")), "k8s addon nvidia"),
    (lambda v: v["results"][0].update(stdout=read("status.txt").replace("enabled: True", "enabled: False")),
     "k8s high-availability"),
    (lambda v: v["results"][1].update(stdout=label_removed(read("nodes.json"))), "k8s node"),
    (lambda v: v["results"][2].update(stdout=plugin_image(read("daemonset.json"))), "k8s device plugin"),
    (lambda v: v["results"][2].update(rc=1, stdout="", stderr='Error from server (NotFound): daemonsets.apps '
                                      '"nvidia-device-plugin-daemonset" not found'), "k8s device plugin"),
    (lambda v: v["results"][3].update(stdout=CONFIGS.replace("migStrategy: none", "migStrategy: mixed")),
     "k8s device plugin"),
    (lambda v: v["results"][3].update(rc=1, stdout="", stderr='Error from server (NotFound): configmaps '
                                      '"nvidia-device-plugin-configs" not found'), "k8s device plugin"),
    (lambda v: v["results"][1].update(stdout=read("nodes.json").replace(
        '"nvidia.com/gpu.present": "true"', '"nvidia.com/gpu.present": "true", "nvidia.com/gpu.replicas": "4"')),
     "k8s node"),
])
def test_each_thing_the_role_manages_in_the_cluster_shows(change, item):
    before = items(view(plugin=read("daemonset.json")), device_plugin=True, high_availability=True)
    changed = view(plugin=read("daemonset.json"))
    change(changed)
    after = items(changed, device_plugin=True, high_availability=True)
    assert [name for name in before if before[name] != after.get(name)] == [item]


def test_with_the_device_plugin_the_node_item_holds_a_digest_of_the_gpu_labels_the_role_writes():
    nodes = read("nodes.json").replace('"nvidia.com/gpu.present": "true"',
                                       '"nvidia.com/gpu.present": "true", "dlinfra.io/gpu.sharing": "none"')
    with_plugin = items(view(nodes=nodes, plugin=read("daemonset.json")), device_plugin=True)["k8s node"]
    assert with_plugin.startswith("worker Ready nvidia.com/gpu.present=true labels ")
    # the nvidia addon's feature discovery owns the labels: only gpu.present counts
    assert items(view(nodes=nodes))["k8s node"] == "worker Ready nvidia.com/gpu.present=true"
    other = nodes.replace('"dlinfra.io/gpu.sharing": "none"', '"dlinfra.io/gpu.sharing": "none", "team": "vision"')
    assert items(view(nodes=other, plugin=read("daemonset.json")), device_plugin=True)["k8s node"] == with_plugin


def test_a_missing_device_plugin_reads_absent():
    assert items(view(plugin_rc=1), device_plugin=True)["k8s device plugin"] == "absent"


@pytest.mark.parametrize("registered, words", [
    ({"skipped": True, "changed": False}, "the cluster was not read"),
    (None, "the cluster was not read"),
    ({"results": [{"item": {"key": "status"}, "rc": 1, "stdout": "microk8s is not running. Use microk8s inspect",
                   "stderr": ""}, {"item": {"key": "nodes"}, "rc": 0, "stdout": "{}"}]},
     "microk8s status: microk8s is not running"),
    ({"results": [{"item": {"key": "status"}, "rc": 0, "stdout": read("status.txt")},
                  {"item": {"key": "nodes"}, "rc": 2, "msg": "[Errno 2] No such file or directory: b'/snap/bin/microk8s'",
                   "stdout": "", "stderr": ""}]}, "kubectl get nodes: [Errno 2]"),
    ({"results": [{"item": {"key": "status"}, "rc": 0, "stdout": read("status.txt")},
                  {"item": {"key": "nodes"}, "rc": 0, "stdout": "not json"}]}, "unreadable: "),
])
def test_a_failed_read_is_one_unreadable_item(registered, words):
    observed = items(registered)
    assert list(observed) == ["k8s cluster"] and observed["k8s cluster"].startswith("unreadable")
    assert words in observed["k8s cluster"]


def test_a_device_plugin_read_that_fails_otherwise_is_unreadable():
    registered = view(plugin="", plugin_rc=1)
    registered["results"][2]["stderr"] = "The connection to the server 127.0.0.1:16443 was refused"
    assert items(registered, device_plugin=True)["k8s device plugin"].startswith("unreadable: kubectl get daemonset")


def test_a_cluster_of_many_nodes_is_parsed_once_for_all_its_hosts():
    microk8s_view._nodes.cache_clear()
    registered = view()
    for name in ("head-a1", "dgx01", "cpu01"):
        items(registered, name, "")
    assert microk8s_view._nodes.cache_info().misses == 1


def test_a_config_map_read_that_fails_otherwise_is_unreadable():
    registered = view(plugin=read("daemonset.json"))
    registered["results"][3].update(rc=1, stdout="", stderr="The connection to the server 127.0.0.1:16443 was refused")
    assert items(registered, device_plugin=True)["k8s device plugin"].startswith("unreadable: kubectl get configmap")
