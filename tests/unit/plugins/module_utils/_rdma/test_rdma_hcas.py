"""HCAs and ports read from recorded sysfs trees (fixtures/rdma_sysfs, built by the sysfs tree test double)."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.hcas import rate_gbps, read_hcas, state_name

IB = ("pci_two_sockets_switches.txt", "ib_ndr_two_cx7.txt")
ROCE = ("pci_h200_vm.txt", "roce_vf_h200_vm.txt")


@pytest.mark.parametrize("text, expected", [
    ("4: ACTIVE", "ACTIVE"), ("1: DOWN", "DOWN"), ("5: ACTIVE_DEFER", "ACTIVE_DEFER"), ("5: LinkUp", "LinkUp"),
    ("2: Polling", "Polling"), ("7: Phy Test", "Phy Test"), ("LinkUp", "LinkUp"), (None, None),
])
def test_state_name_drops_the_code(text, expected):
    assert state_name(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("400 Gb/sec (4X NDR)", 400), ("200 Gb/sec (4X HDR)", 200), ("2.5 Gb/sec (1X SDR)", 2.5), ("25 Gb/sec (1X EDR)", 25),
    ("800 Gb/sec (4X XDR)", 800), ("fast", None), ("", None), (None, None),
])
def test_rate_gbps(text, expected):
    assert rate_gbps(text) == expected


def test_two_connectx7_hcas_on_ndr(rdma_tree):
    sysfs, _procfs = rdma_tree(*IB)
    hcas = read_hcas(sysfs)
    assert [hca["name"] for hca in hcas] == ["mlx5_0", "mlx5_1"]
    first = hcas[0]
    assert {key: first[key] for key in ("node_guid", "fw_ver", "board_id", "hca_type", "pci_address", "numa_node")} == {
        "node_guid": "a088:c203:0042:9f10", "fw_ver": "28.39.2048", "board_id": "MT_0000000838", "hca_type": "MT4129",
        "pci_address": "0000:19:00.0", "numa_node": 0}
    assert hcas[1]["pci_address"] == "0000:9e:00.0" and hcas[1]["numa_node"] == 1
    assert first["ports"] == [{
        "port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "link_layer": "InfiniBand", "rate_gbps": 400,
        "rate": "400 Gb/sec (4X NDR)", "lid": 0x1a, "gids": [],
        "error_counters": {"symbol_error": 0, "link_downed": 1, "port_rcv_errors": 0, "link_error_recovery": 0,
                           "port_xmit_discards": 0}}]


@pytest.mark.parametrize("overlay, state, phys_state, rate", [
    ("ib_mlx5_1_down_polling.txt", "DOWN", "Polling", 10),
    ("ib_mlx5_1_disabled.txt", "DOWN", "Disabled", 10),
    ("ib_mlx5_1_hdr_200.txt", "ACTIVE", "LinkUp", 200),
])
def test_a_port_that_is_down_or_degraded(rdma_tree, overlay, state, phys_state, rate):
    sysfs, _procfs = rdma_tree(*IB + (overlay,))
    port = read_hcas(sysfs)[1]["ports"][0]
    assert (port["state"], port["phys_state"], port["rate_gbps"]) == (state, phys_state, rate)


def test_roce_port_reads_its_gid_table_without_unused_entries(rdma_tree):
    sysfs, _procfs = rdma_tree(*ROCE)
    (hca,) = read_hcas(sysfs)
    assert (hca["pci_address"], hca["numa_node"]) == ("0000:00:07.0", None)
    (port,) = hca["ports"]
    assert (port["link_layer"], port["rate_gbps"], port["lid"]) == ("Ethernet", 200, None)
    assert port["gids"] == [
        {"index": 0, "gid": "fe80:0000:0000:0000:0c42:a1ff:fe5e:2b10", "type": "IB/RoCE v1", "ndev": "eth1"},
        {"index": 1, "gid": "fe80:0000:0000:0000:0c42:a1ff:fe5e:2b10", "type": "RoCE v2", "ndev": "eth1"},
        {"index": 2, "gid": "0000:0000:0000:0000:0000:ffff:0a00:000b", "type": "IB/RoCE v1", "ndev": "eth1"},
        {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a00:000b", "type": "RoCE v2", "ndev": "eth1"},
    ]
    # Only the counters the device has: this one has no link_error_recovery file.
    assert port["error_counters"] == {"symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0, "port_xmit_discards": 12}


def test_a_gid_whose_attributes_cannot_be_read_keeps_null_attributes(rdma_tree, tmp_path):
    sysfs, _procfs = rdma_tree(*ROCE)
    port_dir = tmp_path / "host" / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port_dir / "gid_attrs" / "types" / "3").unlink()
    (port_dir / "gid_attrs" / "ndevs" / "3").unlink()
    assert read_hcas(sysfs)[0]["ports"][0]["gids"][3] == {
        "index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a00:000b", "type": None, "ndev": None}


def test_a_software_device_without_a_pci_function(rdma_tree, tmp_path):
    sysfs, _procfs = rdma_tree(*ROCE)
    (tmp_path / "host" / "sys" / "class" / "infiniband" / "mlx5_0" / "device").unlink()
    (hca,) = read_hcas(sysfs)
    assert (hca["pci_address"], hca["numa_node"]) == (None, None)


def test_a_node_without_hcas(rdma_tree):
    sysfs, _procfs = rdma_tree("pci_h200_vm.txt")
    assert read_hcas(sysfs) == []
