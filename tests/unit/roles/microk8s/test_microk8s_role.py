# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The microk8s role's Kubernetes manifests and the data its tasks decide on, rendered by Ansible's own templating.

Every manifest the role ships (templates/*.yml.j2) is rendered with the role's defaults and validated against the
Kubernetes schemas of the pinned minor (microk8s_channel) with kubernetes-validate, strictly (unknown fields fail).
"""

from __future__ import annotations

import copy
import hashlib
import json
import pathlib
import re
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.k8s_gpu_job import k8s_gpu_job
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.kubetpl import DEFAULT_IMAGE, DEFAULT_WORLDS_DIR
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import make_plan
from role_vars import defaults, MODULE_UTILS, imported_closure, load, trust

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "microk8s"
pytestmark = pytest.mark.usefixtures("ansible_plugin_loader")  # the inputs and kubetpl's template read files with lookups
MANIFESTS = sorted(p.name for p in (ROLE / "templates").glob("*.yml.j2"))
GROUPS = {
    "all": ["head-a1", "head-a2", "head-a3", "dgx01", "head-b1", "cpu01", "lonely"],
    "cluster_a": ["head-a1", "head-a2", "head-a3", "dgx01"],
    "cluster_b": ["head-b1", "cpu01"],
    "head": ["head-a1", "head-a2", "head-a3", "head-b1"],
    "gpu_nodes": ["dgx01"],
    "ungrouped": ["lonely"],
}
# `snap list` as snapd prints it, for a held classic snap next to an unheld base.
SNAP_LIST = """Name      Version  Rev    Tracking       Publisher   Notes
core20    20250213 2501   latest/stable  canonical\u2713  base
microk8s  v1.32.3  8148   1.32/stable    canonical\u2713  classic,held"""


def role_templar(host="dgx01", **overrides):
    variables = {}
    variables.update(defaults(ROLE))
    variables.update(load(ROLE / "vars" / "main.yml"))
    variables.update({
        "playbook_dir": "/srv/playbooks",
        "role_path": str(ROLE),
        "inventory_hostname": host,
        "group_names": sorted(g for g, hosts in GROUPS.items() if host in hosts and g != "all"),
        "groups": GROUPS,
        "ansible_play_hosts_all": GROUPS["all"],
        "ansible_play_hosts": GROUPS["all"],
        "__microk8s_batch": GROUPS["all"],  # the role's first task notes the play's batch
        "ansible_managed": "Ansible managed: do not edit",
        "ansible_facts": {"nodename": host.upper(), "default_ipv4": {"address": "10.0.0.9"}},
        # registered by the role's first tasks: a node whose GPUs the facts do not see, and the device plugin's
        # configs (gpu.yml's task variable)
        "__microk8s_gpu": {"gpu_count": 0, "gpus": [], "pci_gpus": []},
        "__microk8s_plugin_configs": {"whole": {"version": "v1", "flags": {"migStrategy": "none"}}},
    })
    variables.update(trust(overrides))
    return Templar(loader=DataLoader(), variables=variables)


def resolve(templar, expression):
    return templar.template(trust("{{ %s }}" % expression))


def render(name, **overrides):
    text = role_templar(**overrides).template(trust((ROLE / "templates" / name).read_text()))
    return [doc for doc in yaml.safe_load_all(text) if doc]


def daemonset(**overrides):
    return next(obj for obj in render("nvidia-device-plugin.yml.j2", **overrides) if obj["kind"] == "DaemonSet")


def kubernetes_minor(**overrides):
    channel = resolve(role_templar(**overrides), "microk8s_channel")
    return re.match(r"^(\d+\.\d+)/", channel).group(1)


# Manifests ---------------------------------------------------------------------------------------------------

def test_the_role_ships_manifests():
    assert "nvidia-device-plugin.yml.j2" in MANIFESTS


@pytest.mark.parametrize("name", MANIFESTS)
def test_every_manifest_validates_against_the_kubernetes_schemas(name):
    documents = render(name)
    assert documents, "%s renders no object" % name
    for obj in documents:
        kubernetes_validate.validate(obj, kubernetes_minor(), strict=True)


@pytest.mark.parametrize("channel", ["1.31/stable", "1.33/stable"])
def test_device_plugin_validates_for_other_pinned_minors(channel):
    for obj in render("nvidia-device-plugin.yml.j2", microk8s_channel=channel):
        kubernetes_validate.validate(obj, kubernetes_minor(microk8s_channel=channel), strict=True)


@pytest.mark.parametrize("breakage", [
    # A misspelt field that strict validation must refuse, a wrong type, and a missing required field.
    lambda spec: spec["template"]["spec"].update(nodeSelektor={"a": "b"}),
    lambda spec: spec["template"]["spec"].update(containers="nvidia-device-plugin-ctr"),
    lambda spec: spec.pop("selector"),
])
def test_a_broken_manifest_fails_validation(breakage):
    obj = copy.deepcopy(daemonset())
    breakage(obj["spec"])
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, kubernetes_minor(), strict=True)


def test_device_plugin_is_pinned_and_runs_on_the_labelled_nodes_with_microk8s_kubelet_dir():
    spec = daemonset(microk8s_device_plugin_version="v0.17.0",
                     microk8s_device_plugin_image="registry.lab.example/nvidia/k8s-device-plugin")["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == "registry.lab.example/nvidia/k8s-device-plugin:v0.17.0"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["volumes"][0]["hostPath"]["path"] == "/var/snap/microk8s/common/var/lib/kubelet/device-plugins"
    assert spec["containers"][0]["volumeMounts"][0]["mountPath"] == "/var/lib/kubelet/device-plugins"


def test_each_node_gets_the_config_its_label_names_through_the_plugins_config_manager():
    configs = {"whole": {"version": "v1", "flags": {"migStrategy": "none"}},
               "time-slicing-4": {"version": "v1", "flags": {"migStrategy": "none"}, "sharing": {"timeSlicing": {
                   "renameByDefault": False, "failRequestsGreaterThanOne": True,
                   "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}}
    objects = {obj["kind"]: obj for obj in render("nvidia-device-plugin.yml.j2", __microk8s_plugin_configs=configs)}
    assert sorted(objects) == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "ServiceAccount"]
    assert {name: yaml.safe_load(text) for name, text in objects["ConfigMap"]["data"].items()} == configs
    spec = objects["DaemonSet"]["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    assert objects["ClusterRoleBinding"]["subjects"][0]["name"] == spec["serviceAccountName"]
    assert objects["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    managers = spec["initContainers"] + spec["containers"][1:]
    for manager in managers:
        env = {item["name"]: item.get("value") for item in manager["env"]}
        assert manager["command"] == ["config-manager"] and env["NODE_LABEL"] == "nvidia.com/device-plugin.config"
        assert env["CONFIG_FILE_DST"] == "/config/config.yaml" and env["DEFAULT_CONFIG"] == "whole"
    assert [item for item in spec["initContainers"][0]["env"] if item["name"] == "ONESHOT"][0]["value"] == "true"
    assert {"name": "CONFIG_FILE", "value": "/config/config.yaml"} in spec["containers"][0]["env"]
    assert {"name": "available-configs", "configMap": {"name": objects["ConfigMap"]["metadata"]["name"]}} \
        in spec["volumes"]


# What the tasks decide on ------------------------------------------------------------------------------------

@pytest.mark.parametrize("host, cluster, first_head, heads", [
    ("dgx01", "cluster_a", "head-a1", ["head-a1", "head-a2", "head-a3"]),
    ("head-a2", "cluster_a", "head-a1", ["head-a1", "head-a2", "head-a3"]),
    ("cpu01", "cluster_b", "head-b1", ["head-b1"]),
    ("lonely", "", "", []),
])
def test_each_cluster_group_forms_its_own_cluster(host, cluster, first_head, heads):
    templar = role_templar(host)
    assert resolve(templar, "__microk8s_cluster") == cluster
    assert resolve(templar, "__microk8s_first_head") == first_head
    assert resolve(templar, "__microk8s_heads") == heads


def test_the_leader_is_the_batchs_first_host_of_the_cluster():
    assert resolve(role_templar("dgx01"), "__microk8s_leader") == "head-a1"
    assert resolve(role_templar("cpu01", __microk8s_batch=["dgx01", "cpu01"]), "__microk8s_leader") == "cpu01"


def test_a_batch_of_one_worker_leads_itself_and_waits_for_no_other_host():
    # upgrade.yml runs the role one batch at a time: hosts of later batches have not run it yet.
    templar = role_templar("dgx01", __microk8s_batch=["dgx01"])
    assert resolve(templar, "__microk8s_leader") == "dgx01"
    assert resolve(templar, "__microk8s_cluster_play_hosts") == ["dgx01"]


def test_node_name_is_the_lowercased_hostname():
    assert resolve(role_templar("dgx01"), "__microk8s_node_name") == "dgx01"


@pytest.mark.parametrize("host, support, driver, expected", [
    ("dgx01", "nvidia_addon", "host", [{"name": "nvidia", "args": ["--gpu-operator-driver", "host"], "state": "enabled"}]),
    ("dgx01", "nvidia_addon", "operator", [{"name": "nvidia", "args": ["--gpu-operator-driver", "operator"], "state": "enabled"}]),
    ("cpu01", "nvidia_addon", "host", []),  # no GPU node in cluster_b
    ("dgx01", "device_plugin", "host", [{"name": "nvidia", "args": [], "state": "disabled"}]),
    ("dgx01", "none", "host", []),
])
def test_gpu_addon_follows_the_gpu_support_and_the_clusters_gpu_nodes(host, support, driver, expected):
    templar = role_templar(host, microk8s_gpu_support=support, microk8s_gpu_operator_driver=driver)
    assert resolve(templar, "__microk8s_gpu_addon") == expected
    assert resolve(templar, "__microk8s_wanted_addons") == [{"name": "dns"}, {"name": "hostpath-storage"}] + expected


def test_snap_list_gives_the_hold_and_the_installed_revisions():
    templar = role_templar(__microk8s_snap_list={"stdout_lines": SNAP_LIST.splitlines()})
    assert resolve(templar, "__microk8s_held") is True
    assert resolve(templar, "__microk8s_installed_revisions") == ["core20_2501", "microk8s_8148"]
    unheld = role_templar(__microk8s_snap_list={"stdout_lines": SNAP_LIST.replace("classic,held", "classic").splitlines()})
    assert resolve(unheld, "__microk8s_held") is False
    assert resolve(role_templar(__microk8s_snap_list={"stdout_lines": []}), "__microk8s_held") is False


def test_snap_list_gives_the_tracked_channel_that_decides_whether_the_store_is_asked():
    # The store is asked (snap debug connectivity) only where the tracked channel differs from microk8s_channel.
    assert resolve(role_templar(__microk8s_snap_list={"stdout_lines": SNAP_LIST.splitlines()}), "__microk8s_tracking") == "1.32/stable"
    from_file = SNAP_LIST.replace("1.32/stable   ", "-             ").splitlines()
    assert resolve(role_templar(__microk8s_snap_list={"stdout_lines": from_file}), "__microk8s_tracking") == "-"
    assert resolve(role_templar(__microk8s_snap_list={"stdout_lines": SNAP_LIST.splitlines()[:2]}), "__microk8s_tracking") == ""


def test_offline_pairs_resolve_relative_paths_from_the_inventory_directory():
    # Not playbook_dir: for dlinfra.gpu_cluster.microk8s installed from Galaxy, that is inside the collection.
    templar = role_templar(inventory_dir="/srv/inventory", microk8s_offline_snaps=[
        {"snap": "files/core20_2501.snap", "assert": "files/core20_2501.assert"},
        {"snap": "/mirror/microk8s_8148.snap", "assert": "/mirror/microk8s_8148.assert"},
    ])
    assert resolve(templar, "__microk8s_offline") == [
        ["/srv/inventory/files/core20_2501.snap", "/srv/inventory/files/core20_2501.assert"],
        ["/mirror/microk8s_8148.snap", "/mirror/microk8s_8148.assert"],
    ]


# ---- the converged_state record (tasks/main.yml, converge.yml, record.yml) ----

def converged(*hosts):
    return {host: {"__microk8s_converged": {"converged": host in hosts}} for host in GROUPS["all"]}


def test_only_the_hosts_whose_record_failed_run_in_full_and_one_of_them_leads():
    templar = role_templar("dgx01", ansible_play_batch=GROUPS["all"], hostvars=converged("head-a1", "head-a2"))
    batch = resolve(templar, "__microk8s_full_run_hosts")
    assert batch == ["head-a3", "dgx01", "head-b1", "cpu01", "lonely"]
    templar = role_templar("dgx01", ansible_play_batch=GROUPS["all"], __microk8s_batch=batch)
    # The first head is converged: a host running in full leads, its cluster steps still go to the first head.
    assert resolve(templar, "__microk8s_leader") == "head-a3"
    assert resolve(templar, "__microk8s_first_head") == "head-a1"
    assert resolve(templar, "__microk8s_cluster_play_hosts") == ["head-a3", "dgx01"]


def test_a_host_of_the_batch_that_did_not_run_the_role_takes_no_part():
    hostvars = converged("head-a1")
    del hostvars["head-a2"]["__microk8s_converged"]
    templar = role_templar("dgx01", ansible_play_batch=GROUPS["all"], hostvars=hostvars)
    assert resolve(templar, "__microk8s_full_run_hosts") == ["head-a3", "dgx01", "head-b1", "cpu01", "lonely"]


def test_the_cluster_is_read_by_the_batchs_first_host_and_recorded_by_the_first_still_running_in_full():
    templar = role_templar("dgx01", ansible_play_batch=["head-a1", "head-a2", "dgx01"],
                           __microk8s_batch=["head-a2", "dgx01"])
    assert resolve(templar, "__microk8s_reader") == "head-a1"
    assert resolve(templar, "__microk8s_recorder") == "head-a2"
    # head-a2 failed during the run: the next host still running records.
    templar = role_templar("dgx01", ansible_play_batch=["head-a1", "dgx01"], __microk8s_batch=["head-a2", "dgx01"])
    assert resolve(templar, "__microk8s_recorder") == "dgx01"


def inputs(host="dgx01", groups=None, **overrides):
    templar = role_templar(host, **overrides)
    if groups:
        templar.available_variables = dict(templar.available_variables, groups=groups)
    return resolve(templar, "__microk8s_inputs")


@pytest.mark.parametrize("groups", [
    dict(GROUPS, cluster_a=GROUPS["cluster_a"] + ["dgx02"], all=GROUPS["all"] + ["dgx02"]),  # a node added
    dict(GROUPS, cluster_a=["head-a1", "head-a2", "dgx01"]),  # a head removed
    dict(GROUPS, head=["head-a2", "head-a1", "head-a3", "head-b1"]),  # another first head
    dict(GROUPS, gpu_nodes=[]),  # no GPU node left: the nvidia addon goes
])
def test_the_clusters_membership_is_in_every_hosts_inputs(groups):
    for host in ("head-a1", "dgx01"):
        assert inputs(host, groups) != inputs(host)


def test_another_clusters_membership_is_not():
    groups = dict(GROUPS, cluster_b=GROUPS["cluster_b"] + ["cpu02"], all=GROUPS["all"] + ["cpu02"])
    assert inputs("dgx01", groups) == inputs("dgx01")


def test_the_wanted_addons_are_in_the_inputs():
    assert inputs(microk8s_addons=[{"name": "dns"}]) != inputs()
    wanted = inputs(microk8s_gpu_support="device_plugin")["addons"]
    assert wanted[-1] == {"name": "nvidia", "args": [], "state": "disabled"}


def test_the_record_covers_the_worker_lock_the_gpus_the_shipped_snaps_and_the_manifest_on_the_first_head():
    snaps = [{"snap": "/srv/b/microk8s_8148.snap", "assert": "/srv/b/microk8s_8148.assert"}]
    paths = resolve(role_templar("dgx01", microk8s_offline_snaps=snaps), "__microk8s_managed_paths")
    assert paths == ["/var/snap/microk8s/current/var/lock/clustered.lock", "/sys/bus/pci/devices",
                     "/var/lib/dlinfra/microk8s/snaps/microk8s_8148.snap",
                     "/var/lib/dlinfra/microk8s/snaps/microk8s_8148.assert"]
    head = resolve(role_templar("head-a1", microk8s_gpu_support="device_plugin"), "__microk8s_managed_paths")
    assert head[-1] == "/var/lib/dlinfra/microk8s/manifests/nvidia-device-plugin.yml"
    assert "/var/lib/dlinfra/microk8s/manifests/nvidia-device-plugin.yml" not in resolve(
        role_templar("head-a2", microk8s_gpu_support="device_plugin"), "__microk8s_managed_paths")


def test_the_kubeconfig_on_the_controller_is_recorded_where_the_role_writes_it():
    assert resolve(role_templar("dgx01", microk8s_kubeconfig_dir="/home/ops/.kube"), "__microk8s_controller_paths") \
        == ["/home/ops/.kube/cluster_a.kubeconfig"]
    assert resolve(role_templar("dgx01", microk8s_kubeconfig_dir=""), "__microk8s_controller_paths") == []


# kubetpl on the heads -------------------------------------------------------------------------------------------

KUBETPL_MODULES = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__microk8s_kubetpl_modules"]


def test_kubetpl_carries_every_module_it_imports_under_its_name():
    assert sorted(KUBETPL_MODULES.values()) == sorted(imported_closure("kubetpl.py"))
    for module, file in KUBETPL_MODULES.items():
        assert module == file[:-len(".py")].replace("/__init__", "").replace("/", ".")


def test_kubetpl_reads_the_worlds_where_shard_staging_writes_them():
    staging = yaml.safe_load((ROLE.parent / "shard_staging" / "defaults" / "main.yml").read_text())
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert staging["shard_staging_worlds_dir"] == defaults["microk8s_kubetpl_worlds_dir"] == DEFAULT_WORLDS_DIR


def test_the_installed_kubetpl_runs_the_collections_code(tmp_path):
    """The command from its template, as the role writes it on a head, run through its own first line in a directory
    that holds no collection: the code it runs is what it carries."""
    worlds = tmp_path / "worlds"
    templar = role_templar("head-a1", __microk8s_kubetpl_python=sys.executable, microk8s_kubetpl_worlds_dir=str(worlds),
                           role_path=str(ROLE))
    command = tmp_path / "kubetpl"
    command.write_text(templar.template(trust((ROLE / "templates" / "kubetpl.j2").read_text())))
    command.chmod(0o755)
    assert command.read_text().startswith("#!/bin/sh\n")
    assert '\n"exec" "%s" "-I" "$0" "$@"\n' % sys.executable in command.read_text()
    for file in KUBETPL_MODULES.values():
        assert json.dumps((MODULE_UTILS / file).read_text()) in command.read_text()

    done = subprocess.run([str(command), "job", "-G", "1", "-c", "nvidia-smi"], capture_output=True, text=True,
                          check=True, cwd=tmp_path, timeout=60)
    assert json.loads(done.stdout) == k8s_gpu_job("nvidia-smi", DEFAULT_IMAGE, "nvidia-smi", 1)

    # --dataset reads the worlds from microk8s_kubetpl_worlds_dir, as shard_staging writes them there.
    records = [{"name": "s-%d.tar" % i, "url": "http://store/s-%d.tar" % i, "size": 10, "sha256": "0" * 64}
               for i in range(4)]
    plan = make_plan({"name": "ds", "mode": "partition"}, records,
                     {"gpu1": {"free_bytes": 1 << 30, "ranks": 1}, "gpu2": {"free_bytes": 1 << 30, "ranks": 1}})
    (worlds / "ds").mkdir(parents=True)
    for host, node in plan["nodes"].items():
        (worlds / "ds" / (host + ".json")).write_text(json.dumps({"world": node["world"], "dest": "/srv/ds"}))
    done = subprocess.run([str(command), "job", "--dataset", "ds", "-c", "train.py"], capture_output=True, text=True,
                          check=True, cwd=tmp_path, timeout=60)
    jobs = json.loads(done.stdout)["items"][1:]
    assert [job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] for job in jobs] == ["gpu1", "gpu2"]


def test_a_head_runs_in_full_when_a_module_kubetpl_carries_changes():
    files = list(KUBETPL_MODULES.values()) + ["carried_sources.py"]
    # the file lookup strips the trailing newline
    assert inputs("head-a1")["kubetpl"] == [
        hashlib.sha256((MODULE_UTILS / file).read_text().rstrip().encode()).hexdigest() for file in files]
    assert inputs("dgx01")["kubetpl"] == [] == inputs("head-a1", microk8s_kubetpl=False)["kubetpl"]


def test_kubetpl_is_recorded_on_the_heads_only():
    head = resolve(role_templar("head-a2"), "__microk8s_managed_paths")
    assert "/usr/local/bin/kubetpl" in head
    assert not [path for path in head if path.startswith("/usr/local/lib/dlinfra-kubetpl")]
    assert not [path for path in resolve(role_templar("dgx01"), "__microk8s_managed_paths") if "kubetpl" in path]
