# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu.driver_flavor on the lent H200's real facts (open 580), and on every way a loaded module can be wrong."""
import json
from pathlib import Path

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.driver import driver_flavor_check, node_driver

H200 = json.loads((Path(__file__).parent / "fixtures" / "nvidia_gpu_facts_h200_580.json").read_text())


def facts(device_id, flavor, version):
    return {"pci_gpus": [{"address": "0000:18:00.0", "device_id": device_id, "class": "0x030200"}],
            "kernel_module_flavor": flavor, "kernel_module_version": version}


def test_the_h200_runs_the_open_module_of_branch_580_as_planned():
    result = driver_flavor_check("h200", dict(H200, kernel_module_flavor="open"), {"flavor": "open", "branch": "580"})
    assert result == {"check": "gpu.driver_flavor", "status": "pass", "expected": "open 580", "measured": "open 580.159.04",
                      "message": "open kernel module 580.159.04 loaded, as planned; it drives Hopper"}


def test_a_module_other_than_planned_names_the_rolling_path():
    result = driver_flavor_check("h200", facts("0x2335", "proprietary", "550.163.01"), {"flavor": "open", "branch": "550"})
    assert result["status"] == "fail" and result["message"] == (
        "the loaded kernel module is proprietary 550.163.01 but nvidia_driver planned open 550: the new module waits for a "
        "reboot, or the node drifted; roll it through rolling_upgrade (drain, reboot, verify)")


def test_a_module_the_gpus_cannot_run_is_a_failure_naming_them():
    result = driver_flavor_check("b200", facts("0x2901", "proprietary", "570.86.15"), None)
    assert result["status"] == "fail" and "NVIDIA B200 (Blackwell, 10de:2901) run(s) only with the open kernel modules" in result["message"]
    below = driver_flavor_check("h200", facts("0x2335", "proprietary", "535.261.03"), None)
    assert below["status"] == "fail" and "nvidia_driver_branch 535 cannot drive NVIDIA H200" in below["message"]


def test_nothing_to_check_without_gpus_or_without_a_loaded_module():
    assert driver_flavor_check("cpu", {}, None)["status"] == "skip"
    assert driver_flavor_check("gpu", facts("0x2335", None, None), None)["message"] == (
        "no NVIDIA kernel module is loaded (gpu.driver_state says why)")


def test_the_node_table_shows_the_architectures_and_the_loaded_module():
    assert node_driver(dict(H200, kernel_module_flavor="open")) == {"architectures": ["Hopper"], "branch": "580", "flavor": "open"}
    mixed = facts("0x2335", None, None)
    mixed["pci_gpus"].append({"address": "0000:19:00.0", "device_id": "0x9999", "class": "0x030200"})
    assert node_driver(mixed) == {"architectures": ["Hopper", "unknown"], "branch": None, "flavor": None}
    assert node_driver({}) is None and node_driver(None) is None
