# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.device_plugin import (
    allocatable, available_configs, config_from_name, config_name, device_plugin_config, mig_strategy)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.resolve import resolve

H100 = "NVIDIA H100 80GB HBM3"
SEVEN = {"mode": "mig", "layout": {"1g.10gb": 7}}

CASES = [
    ("whole", [H100, H100], [], "none", {"nvidia.com/gpu": 2}),
    ("single: one profile on every GPU", [H100, H100], [SEVEN], "single", {"nvidia.com/gpu": 14}),
    ("mixed: two profiles", [H100], [{"mode": "mig", "layout": {"3g.40gb": 1, "4g.40gb": 1}}], "mixed",
     {"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-4g.40gb": 1}),
    ("mixed: MIG next to a whole GPU", [H100, H100], [dict(SEVEN, indexes=[0])], "mixed",
     {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 7}),
    ("mixed: different layouts", [H100, H100], [dict(SEVEN, indexes=[0]),
                                                {"indexes": [1], "mode": "mig", "layout": {"3g.40gb": 2}}], "mixed",
     {"nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 2}),
    ("mixed: media extensions", [H100], [{"mode": "mig", "layout": {"1g.10gb+me": 1, "1g.10gb": 6}}], "mixed",
     {"nvidia.com/mig-1g.10gb": 6, "nvidia.com/mig-1g.10gb.me": 1}),
    ("time-slicing", ["NVIDIA L40S"] * 4, [{"mode": "time_slicing", "replicas": 4}], "none", {"nvidia.com/gpu": 16}),
]


@pytest.mark.parametrize("names, rules, strategy, resources", [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_strategy_and_allocatable(node_facts, names, rules, strategy, resources):
    gpus = resolve("n", node_facts(*names), rules)["gpus"]
    assert mig_strategy(gpus) == strategy
    assert allocatable(gpus) == resources
    assert device_plugin_config(gpus)["flags"] == {"migStrategy": strategy}


def test_time_slicing_config_is_the_plugins_format(node_facts):
    gpus = resolve("n", node_facts("NVIDIA L40S"), [{"mode": "time_slicing", "replicas": 4}])["gpus"]
    assert device_plugin_config(gpus) == {
        "version": "v1", "flags": {"migStrategy": "none"},
        "sharing": {"timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": True,
                                    "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}


def test_no_sharing_section_without_time_slicing(h200_facts):
    assert device_plugin_config(resolve("n", h200_facts, [])["gpus"]) == {"version": "v1",
                                                                          "flags": {"migStrategy": "none"}}


@pytest.mark.parametrize("names, rules, name", [
    ([H100], [], "whole"),
    (["NVIDIA L40S"] * 2, [{"mode": "time_slicing", "replicas": 4}], "time-slicing-4"),
    ([H100, H100], [SEVEN], "mig-single"),
    ([H100, H100], [dict(SEVEN, indexes=[0])], "mig-mixed"),
])
def test_a_configs_name_says_all_of_it(node_facts, names, rules, name):
    config = device_plugin_config(resolve("n", node_facts(*names), rules)["gpus"])
    assert config_name(config) == name
    assert config_from_name(name) == config


@pytest.mark.parametrize("name", ["time-slicing-1", "time-slicing-04", "time-slicing-x", "mig-none", "", "default"])
def test_a_name_config_name_never_makes_stands_for_nothing(name):
    assert config_from_name(name) is None


def test_the_config_map_holds_the_default_and_each_name_in_use_once():
    configs = available_configs(["time-slicing-4", "time-slicing-4", "mig-mixed", "hand-written"])
    assert sorted(configs) == ["mig-mixed", "time-slicing-4", "whole"]
    assert configs["time-slicing-4"]["sharing"]["timeSlicing"] == {
        "renameByDefault": False, "failRequestsGreaterThanOne": True,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
    assert available_configs([]) == {"whole": {"version": "v1", "flags": {"migStrategy": "none"}}}
