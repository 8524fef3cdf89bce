# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU table: each generation's parts by PCI id, and the loaded kernel module's flavour."""
from pathlib import Path

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import (
    ARCHITECTURES, DEVICES, describe, kernel_module_flavor)

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"


@pytest.mark.parametrize("device_id, name, architecture, capability, open_module, branches", [
    ("0x102d", "Tesla K80", "Kepler", "3.7", "unsupported", (390, 470)),
    ("0x13f2", "Tesla M60", "Maxwell", "5.2", "unsupported", (390, 580)),
    ("0x15f8", "Tesla P100-PCIE-16GB", "Pascal", "6.0", "unsupported", (390, 580)),
    ("0x1db5", "Tesla V100-SXM2-32GB", "Volta", "7.0", "unsupported", (390, 580)),
    ("0x1eb8", "Tesla T4", "Turing", "7.5", "supported", (418, None)),
    ("0x20b2", "NVIDIA A100-SXM4-80GB", "Ampere", "8.0", "supported", (450, None)),
    ("0x2330", "NVIDIA H100 80GB HBM3", "Hopper", "9.0", "supported", (525, None)),
    ("0x2335", "NVIDIA H200", "Hopper", "9.0", "supported", (550, None)),
    ("0x26b9", "NVIDIA L40S", "Ada", "8.9", "supported", (525, None)),
    ("0x2901", "NVIDIA B200", "Blackwell", "10.0", "required", (570, None)),
    ("0x2b85", "NVIDIA GeForce RTX 5090", "Blackwell", "12.0", "required", (570, None)),
])
def test_each_generation_is_known_by_its_pci_id(device_id, name, architecture, capability, open_module, branches):
    gpu = describe(device_id)
    assert (gpu["name"], gpu["architecture"], gpu["compute_capability"], gpu["open_module"]) == (name, architecture, capability, open_module)
    assert (gpu["min_branch"], gpu["max_branch"]) == branches
    assert gpu["device_id"] == "10de:" + device_id[2:] and gpu["unknown"] is False


def test_an_id_the_table_does_not_list_is_unknown_not_guessed():
    # 0x2336 sits between two Hopper ids; nothing is inferred from a range.
    assert describe("0x2336") == {"device_id": "10de:2336", "name": None, "architecture": None, "compute_capability": None,
                                  "open_module": None, "min_branch": None, "max_branch": None, "unknown": True}


def test_every_row_names_an_architecture_of_the_table():
    assert {row[1] for row in DEVICES.values()} <= set(ARCHITECTURES)
    assert all(row[3] is None or row[3] >= ARCHITECTURES[row[1]]["min_branch"] for row in DEVICES.values())


def test_the_lent_h200_is_hopper_with_the_open_module():
    pci = [line.split() for line in (FIXTURES / "h200_580_sysfs_pci.txt").read_text().splitlines() if " 0x10de " in line]
    assert describe(pci[0][2])["architecture"] == "Hopper"
    assert kernel_module_flavor((FIXTURES / "proc_driver_nvidia_version_open_h200_580.txt").read_text()) == "open"


@pytest.mark.parametrize("fixture, flavor", [("proc_driver_nvidia_version_open.txt", "open"),
                                             ("proc_driver_nvidia_version_proprietary.txt", "proprietary")])
def test_the_loaded_modules_flavor(fixture, flavor):
    assert kernel_module_flavor((FIXTURES / fixture).read_text()) == flavor


@pytest.mark.parametrize("text", [None, "", "GCC version:  gcc version 12.2.0\n"])
def test_no_module_no_flavor(text):
    assert kernel_module_flavor(text) is None
