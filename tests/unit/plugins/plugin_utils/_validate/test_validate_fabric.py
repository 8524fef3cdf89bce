# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's fabric.ports and fabric.gpudirect on rdma_fabric_facts results: a node without HCAs, two NDR HCAs up, a
port down, a slow port, GPUDirect expected and missing, the module failing or not run."""

import copy
import pathlib

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.fabric import (
    fabric_checks, node_fabric, transport_check)

PORT = {"port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "link_layer": "InfiniBand", "rate": "400 Gb/sec (4X NDR)",
        "rate_gbps": 400.0}
FACTS = {"changed": False, "hca_count": 2,
         "hcas": [{"name": "mlx5_0", "ports": [dict(PORT)]}, {"name": "mlx5_1", "ports": [dict(PORT)]}],
         "gpudirect": {"method": "dmabuf", "reason": ""}}
EXPECTED = {"fabric_ports": "all", "fabric_rate_gbps": "", "fabric_link_layer": "", "fabric_gpudirect": False}


def run(facts, **expected):
    checks = fabric_checks("gpu1", {"fabric": facts, "expected": dict(EXPECTED, **expected)})
    assert [c["check"] for c in checks] == ["fabric.ports", "fabric.gpudirect"]
    return [(c["status"], c["message"]) for c in checks]


def test_a_node_without_hcas_has_nothing_to_check():
    ports, gpudirect = run({"changed": False, "hca_count": 0, "hcas": [], "gpudirect": {"method": None}},
                           fabric_gpudirect=True)
    assert ports == ("skip", "no RDMA HCA on this node: its ranks reach other nodes over TCP sockets")
    assert gpudirect == ("skip", "no RDMA HCA on this node to move GPU memory through")


def test_every_port_up_at_the_rate_with_gpudirect():
    ports, gpudirect = run(FACTS, fabric_rate_gbps=400, fabric_link_layer="InfiniBand", fabric_gpudirect=True)
    assert ports == ("pass", "2 port(s) of 2 HCA(s) up as expected")
    assert gpudirect == ("pass", "GPUDirect RDMA through dmabuf")


def test_gpudirect_not_expected_is_skipped_saying_what_there_is():
    assert run(FACTS)[1] == ("skip", "not expected (validate_fabric_gpudirect); available: dmabuf")


@pytest.mark.parametrize("change, expected, words", [
    ({"state": "DOWN", "phys_state": "Polling"}, {}, "gpu1: mlx5_1 port 1 is DOWN, physical state Polling"),
    ({"rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200.0}, {"fabric_rate_gbps": 400},
     "gpu1: mlx5_1 port 1 runs at 200 Gb/s (200 Gb/sec (4X HDR)), below the expected 400 Gb/s"),
])
def test_a_port_that_is_not_up_as_expected_fails_naming_host_and_port(change, expected, words):
    facts = copy.deepcopy(FACTS)
    facts["hcas"][1]["ports"][0].update(change)
    status, message = run(facts, **expected)[0]
    assert status == "fail" and message.startswith(words), message


def test_an_expected_hca_the_node_lacks_fails_even_without_hcas():
    status, message = run({"changed": False, "hca_count": 0, "hcas": [], "gpudirect": {}},
                          fabric_ports=["mlx5_0"])[0]
    assert status == "fail" and message.startswith("gpu1: mlx5_0 is expected (validate_fabric_expected_ports)")


def test_gpudirect_expected_but_missing_fails_with_the_reason():
    facts = dict(FACTS, gpudirect={"method": None, "reason": "the nvidia kernel module is not loaded"})
    assert run(facts, fabric_gpudirect=True)[1] == (
        "fail", "gpu1: GPUDirect RDMA is expected (validate_fabric_gpudirect) but unavailable: the nvidia kernel module "
                "is not loaded")


def test_a_failed_module_fails_both_and_one_not_run_skips_both():
    failed = run({"failed": False, "msg": "sysfs_root /sys is not a directory"})
    assert failed == [("fail", "rdma_fabric_facts failed: sysfs_root /sys is not a directory")] * 2
    assert run({"skipped": True}) == [("skip", "rdma_fabric_facts did not run on this node")] * 2


def test_the_node_table_shows_each_hca_with_its_ports_and_nearest_gpus():
    facts = copy.deepcopy(FACTS)
    facts["pcie_paths"] = [
        {"hca": "mlx5_0", "gpu_pci_address": "0000:18:00.0", "relation": "PIX"},
        {"hca": "mlx5_0", "gpu_pci_address": "0000:9a:00.0", "relation": "SYS"},
        {"hca": "mlx5_1", "gpu_pci_address": "0000:18:00.0", "relation": "SYS"},
        {"hca": "mlx5_1", "gpu_pci_address": "0000:9a:00.0", "relation": "NODE"},
        {"hca": "mlx5_1", "gpu_pci_address": "0000:ab:00.0", "relation": "NODE"},
    ]
    port = {"port": 1, "state": "ACTIVE", "link_layer": "InfiniBand", "rate_gbps": 400.0}
    assert node_fabric({"fabric": facts}) == {"hcas": [
        {"name": "mlx5_0", "ports": [port], "nearest_gpus": ["0000:18:00.0"], "relation": "PIX"},
        {"name": "mlx5_1", "ports": [port], "nearest_gpus": ["0000:9a:00.0", "0000:ab:00.0"], "relation": "NODE"}]}


def test_an_hca_sysfs_cannot_place_has_no_nearest_gpu():
    facts = dict(copy.deepcopy(FACTS), pcie_paths=[{"hca": "mlx5_0", "gpu_pci_address": "0000:18:00.0", "relation": None}])
    assert [(h["nearest_gpus"], h["relation"]) for h in node_fabric({"fabric": facts})["hcas"]] == [([], None), ([], None)]


@pytest.mark.parametrize("facts", [None, {"skipped": True}, {"failed": True, "msg": "no sysfs"}])
def test_no_fabric_where_the_facts_did_not_run_or_failed(facts):
    assert node_fabric({"fabric": facts}) is None


LOGS = pathlib.Path(__file__).parents[1] / "_nccl" / "fixtures" / "nccl_transport"


def transport(log, hca_count=2, reason=None, rc=0, **expected):
    first = {"allreduce_multinode": {"rc": rc, "stdout": (LOGS / log).read_text(), "stderr": ""},
             "fabric": {"changed": False, "hca_count": hca_count, "hcas": []}}
    result = transport_check(first, dict(EXPECTED, **expected), reason)
    assert result["check"] == "nccl.transport"
    return result


def test_nccl_over_ib_with_gdr_passes_where_gdr_is_expected():
    result = transport("ib_gdr_two_nodes.log", fabric_gpudirect=True)
    assert (result["status"], result["expected"]) == ("pass", "NET/IB with GPUDirect RDMA")
    assert result["message"].startswith("NCCL ran the all-reduce's inter-node channels over IB: ")
    assert result["measured"].endswith("with GPUDirect RDMA, 0 over sockets")


def test_sockets_on_nodes_with_hcas_fail_quoting_nccls_line():
    result = transport("socket_two_nodes.log")
    assert result["status"] == "fail"
    assert "over sockets although the nodes have HCAs: '" in result["message"] and "via NET/Socket/" in result["message"]


def test_sockets_on_nodes_without_hcas_pass():
    assert transport("socket_two_nodes.log", hca_count=0)["status"] == "pass"


def test_ib_without_gdr_fails_only_where_gdr_is_expected():
    assert transport("ib_gdr_disabled_two_nodes.log")["status"] == "pass"
    result = transport("ib_gdr_disabled_two_nodes.log", fabric_gpudirect="dmabuf")
    assert result["status"] == "fail" and "without GPUDirect RDMA, through host memory" in result["message"]
    assert "GPU Direct RDMA Disabled for HCA" in result["message"]


def test_no_transport_is_judged_where_the_all_reduce_did_not_run_or_failed():
    assert transport("ib_gdr_two_nodes.log", reason="validate_nccl_multinode is false")["message"] == (
        "validate_nccl_multinode is false")
    failed = transport("ib_gdr_two_nodes.log", rc=1)
    assert (failed["status"], failed["message"]) == (
        "skip", "the multi-node all-reduce failed (nccl.busbw_multinode says how)")
