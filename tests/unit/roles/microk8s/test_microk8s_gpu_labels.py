# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU labels in the microk8s role's record inputs, through the collection's gpu_sharing filters.

A module of its own: Ansible's plugin loader finds this collection's filters only where the test module imported none
of the collection's Python before it started (test_microk8s_role.py imports several).
"""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from role_vars import defaults, load, trust

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "microk8s"
H200 = json.loads((pathlib.Path(__file__).resolve().parents[2] / "plugins" / "plugin_utils" / "_validate" / "fixtures"
                   / "nvidia_gpu_facts_h200_580.json").read_text())
GROUPS = {"all": ["head-a1", "dgx01"], "cluster_a": ["head-a1", "dgx01"], "head": ["head-a1"], "gpu_nodes": ["dgx01"]}
pytestmark = pytest.mark.usefixtures("ansible_plugin_loader")


def gpu_labels(**overrides):
    variables = dict(defaults(ROLE), **load(ROLE / "vars" / "main.yml"))
    variables.update({
        "inventory_hostname": "dgx01", "group_names": ["cluster_a", "gpu_nodes"], "groups": GROUPS,
        "ansible_play_hosts_all": GROUPS["all"], "ansible_play_hosts": GROUPS["all"], "__microk8s_batch": GROUPS["all"],
        "ansible_facts": {"nodename": "dgx01", "default_ipv4": {"address": "10.0.0.9"}}, "role_path": str(ROLE),
        "__microk8s_gpu": {"gpu_count": 0, "gpus": [], "pci_gpus": []},
    })
    variables.update(trust(overrides))
    return Templar(loader=DataLoader(), variables=variables).template(trust("{{ __microk8s_inputs.gpu_labels }}"))


PLUGIN = {"microk8s_gpu_support": "device_plugin", "__microk8s_gpu": H200}


def test_the_labels_follow_the_facts_so_a_new_driver_relabels_the_node():
    labels = gpu_labels(**PLUGIN)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200" and labels["nvidia.com/device-plugin.config"] == "whole"
    assert labels["nvidia.com/cuda.driver-version.full"] == "580.159.04"
    newer_driver = dict(PLUGIN)
    newer_driver["__microk8s_gpu"] = dict(H200, driver_version="580.95.05")
    assert gpu_labels(**newer_driver) != labels


def test_the_declaration_comes_from_the_inventorys_gpu_sharing_layout_or_the_roles_own_variable():
    shared = gpu_labels(microk8s_gpu_sharing_layout=[{"mode": "time_slicing", "replicas": 4}], **PLUGIN)
    assert shared["nvidia.com/gpu.replicas"] == "4" and shared["nvidia.com/device-plugin.config"] == "time-slicing-4"
    assert gpu_labels(gpu_sharing_layout=[{"mode": "time_slicing", "replicas": 4}], **PLUGIN) == shared


def test_a_declaration_with_problems_is_an_input_too_naming_the_roles_variable():
    assert gpu_labels(microk8s_gpu_sharing_layout=[{"mode": "time_slicing", "replicas": 1}], **PLUGIN) == [
        "dgx01: microk8s_gpu_sharing_layout[0]: time_slicing needs replicas from 2 to 64 (pods per GPU); got 1"]


def test_the_nvidia_addon_labels_for_itself_and_a_node_without_gpus_gets_none():
    assert gpu_labels(__microk8s_gpu=H200) == {"nvidia.com/gpu.present": "true"}
    assert gpu_labels(microk8s_gpu_support="device_plugin") == {}


def test_a_mig_layout_is_labelled_once_its_instances_exist():
    declared = dict(PLUGIN, microk8s_gpu_sharing_layout=[{"mode": "mig", "layout": {"3g.71gb": 2}}])
    before = gpu_labels(**declared)  # MIG off on the H200: whole until the rolling path makes the instances
    assert before["dlinfra.io/gpu.sharing"] == "none" and before["nvidia.com/device-plugin.config"] == "whole"
    in_place = dict(H200, gpus=[dict(H200["gpus"][0], mig_mode_current=True, mig_device_count=2)])
    declared["__microk8s_gpu"] = in_place
    after = gpu_labels(**declared)
    assert after["dlinfra.io/gpu.sharing"] == "mig" and after["nvidia.com/device-plugin.config"] == "mig-single"
    assert after["nvidia.com/mig-3g.71gb.count"] == "2"
