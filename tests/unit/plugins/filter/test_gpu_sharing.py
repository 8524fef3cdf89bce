# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import json
import pathlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.gpu_sharing import (
    FilterModule, gpu_sharing_allocatable, gpu_sharing_device_plugin_config, gpu_sharing_device_plugin_configs,
    gpu_sharing_label_changes, gpu_sharing_labels, gpu_sharing_node_labels, gpu_sharing_resolved)

FACTS = json.loads((pathlib.Path(__file__).parents[1] / "plugin_utils" / "_validate" / "fixtures"
                    / "nvidia_gpu_facts_h200_580.json").read_text())


def test_the_filters_chain_on_the_real_h200_facts():
    resolved = gpu_sharing_resolved([{"mode": "mig", "layout": {"1g.18gb": 7}}], FACTS, "gpu1")
    assert resolved["problems"] == []
    assert gpu_sharing_device_plugin_config(resolved) == {"version": "v1", "flags": {"migStrategy": "single"}}
    assert gpu_sharing_allocatable(resolved) == {"nvidia.com/gpu": 7}
    assert gpu_sharing_labels(resolved, FACTS)["nvidia.com/gpu.product"] == "NVIDIA-H200-MIG-1g.18gb"


@pytest.mark.parametrize("face", [gpu_sharing_device_plugin_config, gpu_sharing_allocatable,
                                  lambda resolved: gpu_sharing_labels(resolved, FACTS),
                                  lambda resolved: gpu_sharing_node_labels(resolved, FACTS)])
def test_the_faces_refuse_a_declaration_with_problems(face):
    resolved = gpu_sharing_resolved([{"mode": "mig", "layout": {"1g.5gb": 1}}], FACTS, "gpu1")
    with pytest.raises(AnsibleFilterError, match="has no MIG profile 1g.5gb"):
        face(resolved)


def test_every_filter_has_its_documentation():
    folder = pathlib.Path(__file__).parents[4] / "plugins" / "filter"
    assert sorted(FilterModule().filters()) == sorted(path.stem for path in folder.glob("gpu_sharing_*.yml"))


def test_the_messages_name_the_variable_the_rules_came_from():
    resolved = gpu_sharing_resolved([{"mode": "time_slicing", "replicas": 1}], FACTS, "gpu1",
                                    "microk8s_gpu_sharing_layout")
    assert resolved["problems"] == ["gpu1: microk8s_gpu_sharing_layout[0]: time_slicing needs replicas from 2 to 64 "
                                    "(pods per GPU); got 1"]


def test_the_microk8s_roles_chain_from_declaration_to_labels_and_configs():
    resolved = gpu_sharing_resolved([{"mode": "time_slicing", "replicas": 4}], FACTS, "gpu1")
    wanted = gpu_sharing_node_labels(resolved, FACTS)
    assert wanted["nvidia.com/device-plugin.config"] == "time-slicing-4"
    assert gpu_sharing_label_changes({"nvidia.com/gpu.present": "true"}, wanted) == [
        "%s=%s" % item for item in sorted(wanted.items()) if item[0] != "nvidia.com/gpu.present"]
    nodes = json.dumps({"items": [
        {"metadata": {"name": "gpu1", "labels": {"nvidia.com/device-plugin.config": "time-slicing-2"}}},
        {"metadata": {"name": "gpu2", "labels": {"nvidia.com/device-plugin.config": "mig-mixed"}}},
        {"metadata": {"name": "head1", "labels": {}}}]})
    # gpu1's label is about to change: its old config goes, gpu2's (a node this run does not touch) stays
    wanted_by_node = [{"name": "gpu1", "labels": wanted}, {"name": "head1", "labels": {}}]
    configs = gpu_sharing_device_plugin_configs(nodes, wanted_by_node)
    assert sorted(configs) == ["mig-mixed", "time-slicing-4", "whole"]
