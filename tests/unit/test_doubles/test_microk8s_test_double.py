# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The microk8s TEST DOUBLE's server-side dry run and GPU accounting (tests/test_doubles/snapd/microk8s.py).

The simulated lab (`make demo`, tests/harness/lab/lab_verify.yml) relies on them: a manifest the double accepts with --dry-run=server must be one
the real API server accepts (the k8s_gpu_job filter's output, checked here against the Kubernetes schemas too), a
broken one must be refused with kubectl's message, and a dry run must store nothing.
"""

from __future__ import annotations

import importlib.util
import io
import json
import pathlib

import kubernetes_validate
import pytest
import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.k8s_gpu_job import k8s_gpu_job

SOURCE = pathlib.Path(__file__).resolve().parents[3] / "tests" / "test_doubles" / "snapd" / "microk8s.py"
SPEC = importlib.util.spec_from_file_location("test_double_microk8s", SOURCE)
double = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(double)

JOB = k8s_gpu_job("yt8m-train", "nvcr.io/nvidia/pytorch:24.10-py3", command=["nvidia-smi", "-L"], gpus=1,
                  node_selector={"nvidia.com/gpu.present": "true"}, dataset_host_path="/srv/ssd/yt8m",
                  backoff_limit=0)


def cluster(addon="disabled", plugin_selector=None):
    state = {"addons": {"nvidia": {"status": addon, "args": []}}, "objects": {}, "nodes": {}}
    if plugin_selector is not None:
        state["objects"][double.DEVICE_PLUGIN] = {"spec": {"template": {"spec": {"nodeSelector": plugin_selector}}}}
    return state


def node(gpus, **labels):
    return {"gpus": gpus, "labels": labels}


def test_the_filters_job_is_valid_for_kubernetes_and_for_the_double():
    kubernetes_validate.validate(JOB, "1.32", strict=True)
    assert double.invalid_fields(JOB) == []


@pytest.mark.parametrize("change, field", [
    (lambda job: job["spec"]["template"]["spec"]["containers"][0].pop("image"),
     "spec.template.spec.containers[0].image"),
    (lambda job: job["spec"]["template"]["spec"].update(restartPolicy="Always"), "spec.template.spec.restartPolicy"),
    (lambda job: job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "0.5"}),
     "resources.limits[nvidia.com/gpu]"),
    (lambda job: job["spec"]["template"]["spec"].pop("volumes"), "volumeMounts.name"),
    (lambda job: job["metadata"].update(name="Not_A_Name"), "metadata.name"),
    (lambda job: job["spec"]["template"]["spec"].update(containers=[]), "spec.template.spec.containers"),
])
def test_broken_manifests_are_refused_naming_the_field(change, field):
    job = yaml.safe_load(yaml.safe_dump(JOB))
    change(job)
    assert any(field in problem[0] for problem in double.invalid_fields(job))


def test_server_dry_run_stores_nothing_and_says_so(tmp_path, capsys):
    manifest = tmp_path / "job.yml"
    manifest.write_text(yaml.safe_dump(JOB))
    state = cluster()
    double.kubectl_apply(["--dry-run=server", "-f", str(manifest)], state)
    assert capsys.readouterr().out == "job.batch/yt8m-train created (server dry run)\n"
    assert state["objects"] == {}
    double.kubectl_apply(["-f", str(manifest)], state)
    assert list(state["objects"]) == ["Job/default/yt8m-train"]


def test_a_list_from_standard_input_is_applied_item_by_item(monkeypatch, capsys):
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "yt8m-rdzv"}, "spec": {"clusterIP": "None"}}
    listed = {"apiVersion": "v1", "kind": "List", "items": [service, JOB]}
    monkeypatch.setattr(double.sys, "stdin", io.StringIO(json.dumps(listed)))
    double.kubectl_apply(["--dry-run=server", "-f", "-"], cluster())
    assert capsys.readouterr().out == ("service/yt8m-rdzv created (server dry run)\n"
                                       "job.batch/yt8m-train created (server dry run)\n")


def test_an_invalid_object_exits_with_kubectls_message(tmp_path, capsys):
    job = yaml.safe_load(yaml.safe_dump(JOB))
    del job["spec"]["template"]["spec"]["containers"][0]["image"]
    manifest = tmp_path / "job.yml"
    manifest.write_text(yaml.safe_dump(job))
    with pytest.raises(SystemExit) as exit_:
        double.kubectl_apply(["--dry-run=server", "-f", str(manifest)], cluster())
    assert exit_.value.code == 1
    assert capsys.readouterr().out.startswith('The Job "yt8m-train" is invalid: spec.template.spec.containers[0].image: '
                                              "Required value")


@pytest.mark.parametrize("state, the_node, served", [
    (cluster(), node(1, **{"nvidia.com/gpu.present": "true"}), 0),  # no GPU mechanism yet
    (cluster(addon="enabled"), node(2), 2),  # the GPU operator serves every GPU node
    (cluster(addon="enabled"), node(0), 0),  # a CPU-only node has nothing to advertise
    (cluster(plugin_selector={"nvidia.com/gpu.present": "true"}), node(1, **{"nvidia.com/gpu.present": "true"}), 1),
    (cluster(plugin_selector={"nvidia.com/gpu.present": "true"}), node(1), 0),  # the plugin does not run there
])
def test_allocatable_gpus_need_a_gpu_and_something_that_serves_it(state, the_node, served):
    assert double.gpus_served(the_node, state) == served


def test_nodes_report_allocatable_gpus_where_served():
    the_node = dict(node(1, **{"nvidia.com/gpu.present": "true"}), address="10.0.0.2", ready=True, version="v1.32.3",
                    created="2025-01-01T00:00:00Z", cpus=4, memory_kib=1024)
    obj = double.node_object("gpu1", the_node, cluster(addon="enabled"))
    assert obj["status"]["allocatable"] == {"cpu": "4", "memory": "1024Ki", "pods": "110", "nvidia.com/gpu": "1"}
    kubernetes_validate.validate(obj, "1.32", strict=True)


def full_node(gpus, ready=True, **labels):
    return dict(node(gpus, **labels), address="10.0.0.2", ready=ready, version="v1.32.3", created="2025-01-01T00:00:00Z",
                cpus=4, memory_kib=1024)


def test_device_plugin_pods_run_where_gpus_are_served_and_follow_readiness():
    state = cluster(plugin_selector={"nvidia.com/gpu.present": "true"})
    state["nodes"] = {"gpu1": full_node(1, **{"nvidia.com/gpu.present": "true"}),
                      "gpu2": full_node(1, ready=False, **{"nvidia.com/gpu.present": "true"}),
                      "cpu1": full_node(0)}
    pods = double.device_plugin_pods(state)
    assert [(p["spec"]["nodeName"], p["status"]["phase"]) for p in pods] == [("gpu1", "Running"), ("gpu2", "Unknown")]
    assert all(p["metadata"]["namespace"] == "kube-system" and p["metadata"]["name"].startswith("nvidia-device-plugin")
               for p in pods)
    for pod in pods:
        kubernetes_validate.validate(dict(pod, spec=dict(pod["spec"], containers=[{"name": "x", "image": "x"}])),
                                     "1.32", strict=True)
    assert double.device_plugin_pods(cluster()) == []  # nothing serves GPUs: no plugin pods


def test_cordon_marks_the_node_unschedulable_and_uncordon_clears_it(capsys):
    state = cluster()
    state["nodes"] = {"gpu1": full_node(1)}
    double.kubectl_cordon(["gpu1"], state)
    assert double.node_object("gpu1", state["nodes"]["gpu1"], state)["spec"] == {"unschedulable": True}
    double.kubectl_cordon(["gpu1"], state)
    double.kubectl_cordon(["gpu1"], state, unschedulable=False)
    assert double.node_object("gpu1", state["nodes"]["gpu1"], state)["spec"] == {}
    assert capsys.readouterr().out.splitlines() == ["node/gpu1 cordoned", "node/gpu1 already cordoned", "node/gpu1 uncordoned"]


def plugin_with_configs(state, configs, default="whole"):
    """The role's DaemonSet as far as the double reads it: its selector, the ConfigMap volume and the
    config-manager's label and default; and the ConfigMap."""
    state["objects"][double.DEVICE_PLUGIN] = {"metadata": {"namespace": "kube-system"}, "spec": {"template": {"spec": {
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "initContainers": [{"env": [{"name": "NODE_LABEL", "value": "nvidia.com/device-plugin.config"},
                                    {"name": "DEFAULT_CONFIG", "value": default}]}],
        "volumes": [{"name": "available-configs", "configMap": {"name": "nvidia-device-plugin-configs"}}]}}}}
    state["objects"]["ConfigMap/kube-system/nvidia-device-plugin-configs"] = {"data": {
        name: yaml.safe_dump(config) for name, config in configs.items()}}
    return state


TIME_SLICED = {"version": "v1", "flags": {"migStrategy": "none"}, "sharing": {"timeSlicing": {
    "failRequestsGreaterThanOne": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}


@pytest.mark.parametrize("labels, served", [
    ({"nvidia.com/device-plugin.config": "time-slicing-4"}, 8),  # each of 2 GPUs advertised 4 times
    ({"nvidia.com/device-plugin.config": "whole"}, 2),
    ({}, 2),  # no label: the config-manager's default
    ({"nvidia.com/device-plugin.config": "missing"}, 2),  # a name the ConfigMap lacks: no sharing
])
def test_the_node_label_names_its_config_and_time_slicing_multiplies_the_gpus(labels, served):
    state = plugin_with_configs(cluster(), {"whole": {"version": "v1", "flags": {"migStrategy": "none"}},
                                            "time-slicing-4": TIME_SLICED})
    assert double.gpus_served(node(2, **dict(labels, **{"nvidia.com/gpu.present": "true"})), state) == served


MIG_CONFIGS = {"whole": {"version": "v1", "flags": {"migStrategy": "none"}},
               "mig-single": {"version": "v1", "flags": {"migStrategy": "single"}},
               "mig-mixed": {"version": "v1", "flags": {"migStrategy": "mixed"}}}


@pytest.mark.parametrize("config, allocatable", [
    ("mig-single", {"nvidia.com/gpu": "2"}),  # every MIG device as a GPU
    ("mig-mixed", {"nvidia.com/mig-3g.71gb": "2", "nvidia.com/gpu": "1"}),  # each profile its own; the whole GPU
    ("whole", {"nvidia.com/gpu": "2"}),  # no MIG strategy: the GPUs on PCI
])
def test_a_mig_config_advertises_the_mig_devices_the_nvidia_smi_double_published(
        tmp_path, monkeypatch, config, allocatable):
    monkeypatch.setattr(double, "GPUS_DIR", str(tmp_path))
    (tmp_path / "gpu1.json").write_text(json.dumps({"gpus": [
        {"index": 0, "mig": True, "mig_devices": ["3g.71gb", "3g.71gb"]}, {"index": 1, "mig": False, "mig_devices": []}]}))
    state = plugin_with_configs(cluster(), MIG_CONFIGS)
    the_node = full_node(2, **{"nvidia.com/gpu.present": "true", "nvidia.com/device-plugin.config": config})
    resources = double.node_object("gpu1", the_node, state)["status"]["allocatable"]
    assert {key: value for key, value in resources.items() if key.startswith("nvidia.com/")} == allocatable


def test_a_mig_config_without_published_gpus_advertises_the_gpus_on_pci(tmp_path, monkeypatch):
    monkeypatch.setattr(double, "GPUS_DIR", str(tmp_path))
    state = plugin_with_configs(cluster(), MIG_CONFIGS)
    the_node = full_node(2, **{"nvidia.com/gpu.present": "true", "nvidia.com/device-plugin.config": "mig-single"})
    assert double.node_object("gpu1", the_node, state)["status"]["allocatable"]["nvidia.com/gpu"] == "2"


def test_the_plugin_reads_the_mig_devices_when_it_starts_so_a_new_layout_needs_its_pod_restarted(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(double, "GPUS_DIR", str(tmp_path))
    published = tmp_path / "gpu1.json"
    published.write_text(json.dumps({"gpus": [{"index": 0, "mig": True, "mig_devices": ["3g.71gb", "3g.71gb"]}]}))
    state = plugin_with_configs(cluster(), MIG_CONFIGS)
    state["objects"][double.DEVICE_PLUGIN]["spec"]["template"]["metadata"] = {"labels": {"name": "nvidia-device-plugin-ds"}}
    state["nodes"] = {"gpu1": full_node(1, **{"nvidia.com/gpu.present": "true"})}
    double.kubectl_label(["node", "gpu1", "nvidia.com/device-plugin.config=mig-single"], state)  # the config-manager
    published.write_text(json.dumps({"gpus": [{"index": 0, "mig": True, "mig_devices": ["1g.18gb"] * 7}]}))

    def gpus():
        return double.node_object("gpu1", state["nodes"]["gpu1"], state)["status"]["allocatable"]["nvidia.com/gpu"]
    assert gpus() == "2"  # the running plugin has not seen the new instances
    double.kubectl_delete(["pod", "-n", "kube-system", "-l", "name=nvidia-device-plugin-ds",
                           "--field-selector", "spec.nodeName=gpu1"], state)
    assert gpus() == "7"
    double.kubectl_delete(["pod", "-n", "kube-system", "-l", "name=other", "--field-selector=spec.nodeName=gpu1"], state)
    assert capsys.readouterr().out.splitlines()[-2:] == ['pod "nvidia-device-plugin-daemonset-%s" deleted'
                                                         % double.hashlib.sha256(b"gpu1").hexdigest()[:5],
                                                         "No resources found"]
