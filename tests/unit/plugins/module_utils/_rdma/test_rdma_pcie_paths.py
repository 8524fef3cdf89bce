"""The PCIe relation between HCAs and GPUs, as nvidia-smi topo -m names it, from recorded sysfs trees."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.hcas import read_hcas
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.pcie_paths import (
    classify,
    gpu_hca_paths,
    locate,
    normalize_bus_id,
    pci_device_dir,
)

IB = ("pci_two_sockets_switches.txt", "ib_ndr_two_cx7.txt")
GPUS = ["0000:18:00.0", "0000:1c:00.0", "0000:1d:00.0", "0000:3b:00.0", "0000:9d:00.0"]


@pytest.mark.parametrize("text, expected", [
    ("00000000:07:00.0", "0000:07:00.0"), ("0000:07:00.0", "0000:07:00.0"), ("07:00.0", "0000:07:00.0"),
    ("0000:4E:00.0", "0000:4e:00.0"), (" 0001:c1:00.1 ", "0001:c1:00.1"),
])
def test_normalize_bus_id(text, expected):
    assert normalize_bus_id(text) == expected


@pytest.mark.parametrize("text", ["", "GPU-1", "0000:07:00", "0000:07:00.8", "zz:07:00.0"])
def test_normalize_bus_id_refuses_what_is_not_a_bus_id(text):
    with pytest.raises(ValueError, match="is not a PCI bus id"):
        normalize_bus_id(text)


def test_locate_reads_the_chain_of_bridges(rdma_tree):
    sysfs, _procfs = rdma_tree(*IB)
    assert locate(pci_device_dir(sysfs, "0000:1c:00.0"), sysfs) == {
        "address": "0000:1c:00.0", "host_bridge": "pci0000:15", "numa_node": 0,
        "bridges": ["0000:15:01.0", "0000:16:00.0", "0000:17:02.0", "0000:1a:00.0", "0000:1b:00.0"]}


def test_locate_is_none_for_what_is_not_on_pci(rdma_tree, tmp_path):
    sysfs, _procfs = rdma_tree(*IB)
    assert locate(pci_device_dir(sysfs, "0000:99:00.0"), sysfs) is None
    virtual = tmp_path / "host" / "sys" / "devices" / "virtual" / "net" / "lo"
    virtual.mkdir(parents=True)
    assert locate(str(virtual), sysfs) is None


def test_every_relation_against_mlx5_0_and_mlx5_1(rdma_tree):
    sysfs, _procfs = rdma_tree(*IB)
    paths = gpu_hca_paths(sysfs, read_hcas(sysfs), GPUS)
    relations = {(path["hca"], path["gpu_pci_address"]): path["relation"] for path in paths}
    assert relations == {
        ("mlx5_0", "0000:18:00.0"): "PIX", ("mlx5_0", "0000:1c:00.0"): "PXB", ("mlx5_0", "0000:1d:00.0"): "PHB",
        ("mlx5_0", "0000:3b:00.0"): "NODE", ("mlx5_0", "0000:9d:00.0"): "SYS",
        ("mlx5_1", "0000:18:00.0"): "SYS", ("mlx5_1", "0000:1c:00.0"): "SYS", ("mlx5_1", "0000:1d:00.0"): "SYS",
        ("mlx5_1", "0000:3b:00.0"): "SYS", ("mlx5_1", "0000:9d:00.0"): "PIX",
    }
    assert paths[0] == {"hca": "mlx5_0", "hca_pci_address": "0000:19:00.0", "gpu_pci_address": "0000:18:00.0",
                        "relation": "PIX"}


def _placed(host_bridge, bridges, numa_node=0):
    return {"address": "x", "host_bridge": host_bridge, "bridges": bridges, "numa_node": numa_node}


@pytest.mark.parametrize("one, other, expected", [
    # Two functions of one device, or two devices right below one root port: no bridge between.
    (_placed("pci0000:00", ["a"]), _placed("pci0000:00", ["a"]), "PIX"),
    (_placed("pci0000:00", []), _placed("pci0000:00", []), "PHB"),
    (_placed("pci0000:00", ["a", "b", "c"]), _placed("pci0000:00", ["a", "b", "d", "e", "f"]), "PXB"),
    (_placed("pci0000:00", ["a"], None), _placed("pci0000:80", ["b"], None), "NODE"),
    (_placed("pci0000:00", ["a"], 0), _placed("pci0000:80", ["b"], None), "SYS"),
])
def test_classify_edge_cases(one, other, expected):
    assert classify(one, other) == expected
    assert classify(other, one) == expected


def test_the_h200_vm_gpu_and_a_passed_through_vf_share_only_the_host_bridge(rdma_tree):
    sysfs, _procfs = rdma_tree("pci_h200_vm.txt", "roce_vf_h200_vm.txt")
    assert gpu_hca_paths(sysfs, read_hcas(sysfs), ["0000:00:06.0"]) == [
        {"hca": "mlx5_0", "hca_pci_address": "0000:00:07.0", "gpu_pci_address": "0000:00:06.0", "relation": "PHB"}]


def test_an_unplaced_gpu_or_software_hca_has_no_relation(rdma_tree):
    sysfs, _procfs = rdma_tree(*IB)
    hcas = read_hcas(sysfs) + [{"name": "rxe0", "pci_address": None}]
    relations = [(path["hca"], path["relation"]) for path in gpu_hca_paths(sysfs, hcas, ["0000:77:00.0"])]
    assert relations == [("mlx5_0", None), ("mlx5_1", None), ("rxe0", None)]
