# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import re

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.labels import (
    gpu_node_labels, label_changes, label_value, node_labels, own_label)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.resolve import resolve

VALID = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def labels_of(facts, rules):
    return node_labels(resolve("n", facts, rules)["gpus"], facts)


def test_the_real_h200_whole(h200_facts):
    assert labels_of(h200_facts, []) == {
        "dlinfra.io/gpu.sharing": "none",
        "nvidia.com/cuda.driver-version.full": "580.159.04", "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "159", "nvidia.com/cuda.driver-version.revision": "04",
        "nvidia.com/cuda.driver.major": "580", "nvidia.com/cuda.driver.minor": "159",
        "nvidia.com/cuda.driver.rev": "04",
        "nvidia.com/cuda.runtime-version.full": "13.0", "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0", "nvidia.com/cuda.runtime.major": "13",
        "nvidia.com/cuda.runtime.minor": "0",
        "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.memory": "143771", "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "none"}


@pytest.mark.parametrize("rules, expected", [
    ([{"mode": "time_slicing", "replicas": 4}],
     {"nvidia.com/gpu.product": "NVIDIA-H200-SHARED", "nvidia.com/gpu.replicas": "4",
      "nvidia.com/gpu.sharing-strategy": "time-slicing", "dlinfra.io/gpu.sharing": "time-sliced"}),
    ([{"mode": "mig", "layout": {"1g.18gb": 7}}],
     {"nvidia.com/gpu.product": "NVIDIA-H200-MIG-1g.18gb", "nvidia.com/mig.strategy": "single",
      "nvidia.com/mig-1g.18gb.count": "7", "dlinfra.io/gpu.sharing": "mig", "dlinfra.io/gpu.mig-layout": "7x1g.18gb"}),
    ([{"mode": "mig", "layout": {"1g.18gb+me": 1, "2g.35gb": 1, "3g.71gb": 1}}],
     {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/mig.strategy": "mixed",
      "nvidia.com/mig-1g.18gb.me.count": "1", "nvidia.com/mig-3g.71gb.count": "1",
      "dlinfra.io/gpu.mig-layout": "1x1g.18gb.me_1x2g.35gb_1x3g.71gb"}),
])
def test_sharing_labels(h200_facts, rules, expected):
    labels = labels_of(h200_facts, rules)
    assert {key: labels.get(key) for key in expected} == expected


def test_every_value_is_a_valid_label_value(node_facts):
    facts = node_facts(*["NVIDIA H100 80GB HBM3"] * 8)
    labels = labels_of(facts, [{"mode": "mig", "layout": {"1g.10gb+me": 1, "1g.10gb": 6}},
                               {"indexes": [0], "mode": "mig", "layout": {"3g.40gb": 1, "4g.40gb": 1}}])
    assert labels["dlinfra.io/gpu.mig-layout"] == "42x1g.10gb_7x1g.10gb.me_1x3g.40gb_1x4g.40gb"
    assert [value for value in labels.values() if not VALID.match(value) or len(value) > 63] == []


def test_family_and_capability_come_from_the_pci_id(h200_facts):
    facts = dict(h200_facts, pci_gpus=[{"address": "0000:00:06.0", "class": "0x030200", "device_id": "0x26b9"}])
    labels = labels_of(facts, [])
    assert (labels["nvidia.com/gpu.family"], labels["nvidia.com/gpu.compute.major"],
            labels["nvidia.com/gpu.compute.minor"]) == ("ada-lovelace", "8", "9")


def test_an_unknown_pci_id_leaves_family_and_capability_out(h200_facts):
    labels = labels_of(dict(h200_facts, pci_gpus=[{"device_id": "0xffff"}]), [])
    assert "nvidia.com/gpu.family" not in labels and "nvidia.com/gpu.compute.major" not in labels


def test_a_node_without_gpus_has_no_labels(node_facts):
    assert labels_of(node_facts(), []) == {}


@pytest.mark.parametrize("text, value", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
    ("Tesla V100-SXM2-16GB", "Tesla-V100-SXM2-16GB"),
    (" (weird) name! ", "weird--name"),
    ("x" * 70, "x" * 63),
    ("a" * 62 + " b", "a" * 62),
    ("---", ""),
])
def test_label_values_are_sanitised(text, value):
    assert label_value(text) == value
    assert VALID.match(label_value(text))


def test_the_microk8s_role_keeps_gpu_present_and_the_plugins_config_name_with_the_labels(h200_facts):
    gpus = resolve("n", h200_facts, [{"mode": "time_slicing", "replicas": 4}])["gpus"]
    labels = gpu_node_labels(gpus, h200_facts)
    assert labels == dict(node_labels(gpus, h200_facts), **{
        "nvidia.com/gpu.present": "true", "nvidia.com/device-plugin.config": "time-slicing-4"})
    # with the nvidia addon its own feature discovery labels the node; a node without GPUs gets none
    assert gpu_node_labels(gpus, h200_facts, device_plugin=False) == {"nvidia.com/gpu.present": "true"}
    assert gpu_node_labels([], h200_facts) == {}


def test_without_a_driver_the_labels_come_from_the_gpus_on_pci(h200_facts):
    facts = dict(h200_facts, gpus=[], driver_version=None, cuda_version=None)
    labels = gpu_node_labels(resolve("n", facts, [])["gpus"], facts)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200" and labels["nvidia.com/gpu.count"] == "1"
    assert labels["nvidia.com/gpu.family"] == "hopper" and "nvidia.com/gpu.memory" not in labels
    assert not [key for key in labels if key.startswith("nvidia.com/cuda.")]


def test_label_changes_set_what_differs_and_remove_only_our_own_labels_no_longer_wanted():
    current = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.replicas": "2", "nvidia.com/mig-1g.10gb.count": "7",
               "dlinfra.io/gpu.mig-layout": "7x1g.10gb", "kubernetes.io/hostname": "dgx01", "team": "vision",
               "nvidia.com/gpu.deploy.operands": "false"}
    wanted = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.replicas": "4", "dlinfra.io/gpu.sharing": "time-sliced"}
    assert label_changes(current, wanted) == [
        "dlinfra.io/gpu.sharing=time-sliced", "nvidia.com/gpu.replicas=4",
        "dlinfra.io/gpu.mig-layout-", "nvidia.com/mig-1g.10gb.count-"]
    stale = ["dlinfra.io/gpu.mig-layout-", "nvidia.com/mig-1g.10gb.count-"]
    assert label_changes(dict(current, **wanted), wanted) == stale
    assert label_changes(wanted, wanted) == []


@pytest.mark.parametrize("key, own", [
    ("nvidia.com/gpu.present", True), ("nvidia.com/gpu.product", True), ("nvidia.com/cuda.driver-version.full", True),
    ("nvidia.com/cuda.driver.rev", True), ("nvidia.com/mig-3g.40gb.count", True), ("nvidia.com/mig.strategy", True),
    ("nvidia.com/device-plugin.config", True), ("dlinfra.io/gpu.sharing", True),
    ("nvidia.com/gpu.deploy.driver", False), ("nvidia.com/gpu", False), ("kubernetes.io/arch", False),
])
def test_own_labels_are_those_the_role_may_write(key, own):
    assert own_label(key) is own
