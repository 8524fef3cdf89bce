"""rdma_fabric_facts' main() on recorded sysfs/procfs trees (module_utils/fixtures/rdma_sysfs)."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.modules import rdma_fabric_facts


@pytest.fixture
def run_module(module_result):
    return lambda args, check_mode=False: module_result(rdma_fabric_facts.main, args, check_mode)


def _facts(result):
    top_level = {key: value for key, value in result.items() if key not in ("changed", "ansible_facts", "invocation", "_exit_code")}
    assert result["ansible_facts"] == {"rdma_fabric": top_level}
    assert result["changed"] is False and result["_exit_code"] == 0
    return top_level


@pytest.mark.parametrize("check_mode", [False, True])
def test_two_ndr_hcas_and_five_gpus(rdma_tree, run_module, check_mode):
    sysfs, procfs = rdma_tree("pci_two_sockets_switches.txt", "ib_ndr_two_cx7.txt", "driver_open_580_kernel_6_8.txt")
    facts = _facts(run_module({"sysfs_root": sysfs, "procfs_root": procfs}, check_mode))
    assert facts["hca_count"] == 2
    assert [(hca["name"], hca["ports"][0]["state"], hca["ports"][0]["rate_gbps"]) for hca in facts["hcas"]] == [
        ("mlx5_0", "ACTIVE", 400), ("mlx5_1", "ACTIVE", 400)]
    assert facts["gpu_pci_addresses"] == ["0000:18:00.0", "0000:1c:00.0", "0000:1d:00.0", "0000:3b:00.0", "0000:9d:00.0"]
    assert [path["relation"] for path in facts["pcie_paths"] if path["hca"] == "mlx5_0"] == ["PIX", "PXB", "PHB", "NODE", "SYS"]
    assert facts["gpudirect"]["method"] == "dmabuf"


def test_gpu_bus_ids_choose_and_normalise_the_gpus(rdma_tree, run_module):
    sysfs, procfs = rdma_tree("pci_two_sockets_switches.txt", "ib_ndr_two_cx7.txt")
    facts = _facts(run_module({"sysfs_root": sysfs, "procfs_root": procfs, "gpu_bus_ids": ["00000000:9D:00.0"]}))
    assert facts["gpu_pci_addresses"] == ["0000:9d:00.0"]
    assert [(path["hca"], path["relation"]) for path in facts["pcie_paths"]] == [("mlx5_0", "SYS"), ("mlx5_1", "PIX")]


def test_the_h200_vm_without_hcas_is_an_empty_list_not_an_error(rdma_tree, run_module):
    sysfs, procfs = rdma_tree("pci_h200_vm.txt", "driver_open_580_kernel_6_8.txt")
    facts = _facts(run_module({"sysfs_root": sysfs, "procfs_root": procfs}))
    assert (facts["hca_count"], facts["hcas"], facts["pcie_paths"]) == (0, [], [])
    assert facts["gpu_pci_addresses"] == ["0000:00:06.0"]


def test_roce(rdma_tree, run_module):
    sysfs, procfs = rdma_tree("pci_h200_vm.txt", "roce_vf_h200_vm.txt", "driver_proprietary_535_kernel_5_4_peermem.txt")
    facts = _facts(run_module({"sysfs_root": sysfs, "procfs_root": procfs}))
    port = facts["hcas"][0]["ports"][0]
    assert (port["link_layer"], len(port["gids"]), facts["pcie_paths"][0]["relation"]) == ("Ethernet", 4, "PHB")
    assert facts["gpudirect"]["method"] == "peermem"


@pytest.mark.parametrize("option", ["sysfs_root", "procfs_root"])
def test_a_root_that_is_not_a_directory_is_refused(rdma_tree, run_module, tmp_path, option):
    sysfs, procfs = rdma_tree("pci_h200_vm.txt")
    args = {"sysfs_root": sysfs, "procfs_root": procfs, option: str(tmp_path / "absent")}
    result = run_module(args)
    usual = {"sysfs_root": "sysfs is mounted (normally /sys)", "procfs_root": "procfs is mounted (normally /proc)"}[option]
    assert result["failed"] is True
    assert result["msg"] == "%s=%s is not a directory; set it to where %s" % (option, tmp_path / "absent", usual)


def test_a_bad_gpu_bus_id_is_refused(rdma_tree, run_module):
    sysfs, procfs = rdma_tree("pci_h200_vm.txt")
    result = run_module({"sysfs_root": sysfs, "procfs_root": procfs, "gpu_bus_ids": ["0000:00:06.0", "GPU-0"]})
    assert result["failed"] is True
    assert result["msg"] == ("gpu_bus_ids: 'GPU-0' is not a PCI bus id (DOMAIN:BUS:DEVICE.FUNCTION, for example "
                             "0000:07:00.0); give the GPUs' bus ids as nvidia-smi or lspci -D prints them, or leave the "
                             "option unset to pair every NVIDIA GPU on PCI")
