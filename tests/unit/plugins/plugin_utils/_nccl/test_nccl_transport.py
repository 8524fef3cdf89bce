"""The transport NCCL chose, read from NCCL_DEBUG=INFO logs (fixtures/nccl_transport), and the verdict on it."""

import pathlib

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.transport import (
    parse_nccl_transport,
    transport_problems,
    transport_summary,
)

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "nccl_transport"


def parsed(name):
    return parse_nccl_transport((FIXTURES / name).read_text())


@pytest.mark.parametrize("name, summary, devices", [
    ("ib_gdr_two_nodes.log",
     {"networks": ["IB"], "net_channels": 16, "gdr_channels": 16, "socket_channels": 0, "intra_node_channels": 8},
     {"IB": ["mlx5_0:1/IB", "mlx5_1:1/IB"]}),
    ("ib_gdr_disabled_two_nodes.log",
     {"networks": ["IB"], "net_channels": 16, "gdr_channels": 0, "socket_channels": 0, "intra_node_channels": 8},
     {"IB": ["mlx5_0:1/IB", "mlx5_1:1/IB"]}),
    ("socket_two_nodes.log",
     {"networks": ["Socket"], "net_channels": 16, "gdr_channels": 0, "socket_channels": 16, "intra_node_channels": 8},
     {"Socket": ["eth0:10.0.0.1<0>", "eth0:10.0.0.2<0>"]}),
])
def test_the_fixture_logs(name, summary, devices):
    result = parsed(name)
    assert transport_summary(result) == summary
    assert result["net_devices"] == devices


def test_a_channel_line():
    (channel,) = parse_nccl_transport(
        "gpu01:51208:51291 [1] NCCL INFO Channel 03/0 : 1[1] -> 2[0] [send] via NET/IB/1/GDRDMA\n")["channels"]
    assert channel == {"line": "gpu01:51208:51291 [1] NCCL INFO Channel 03/0 : 1[1] -> 2[0] [send] via NET/IB/1/GDRDMA",
                       "channel": 3, "from_rank": 1, "to_rank": 2, "direction": "send", "via": "NET/IB/1/GDRDMA",
                       "kind": "net", "network": "IB", "gdr": True}


@pytest.mark.parametrize("line, kind, network, gdr", [
    ("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via NET/IB/0", "net", "IB", False),
    ("h:1:2 [7] NCCL INFO Channel 03/0 : 47[7] -> 39[7] [receive] via NET/IBext_v8/2", "net", "IB", False),
    ("h:1:2 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA", "net", "IB", True),
    ("h:1:2 [0] NCCL INFO Channel 16/0 : 0[0] -> 8[0] [receive] via NET/Socket/0", "net", "Socket", False),
    ("[1] node2:22555:22555 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [send] via NET/Socket/0", "net", "Socket", False),
    ("h:1:2 [2] NCCL INFO Channel 00/0 : 10[2] -> 9[1] via P2P/IPC/read", "p2p", None, None),
    ("h:1:2 [2] NCCL INFO Channel 00/1 : 2[2] -> 3[3] via P2P/direct pointer", "p2p", None, None),
    ("h:1:2 [7] NCCL INFO Channel 00 : 15[7] -> 14[6] via SHM/direct/direct", "shm", None, None),
    ("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via CollNet/0", "other", None, None),
])
def test_transports_of_public_line_formats(line, kind, network, gdr):
    (channel,) = parse_nccl_transport([line])["channels"]
    assert (channel["kind"], channel["network"], channel["gdr"]) == (kind, network, gdr)


def test_lines_that_are_not_channels_are_not_counted():
    result = parse_nccl_transport("h:1:2 [0] NCCL INFO Channel 00/04 :    0   1   2   3\nChannel 00/0 : 0[0] -> 1[0] via "
                                  "NET/IB/0 (not NCCL's line)\n")
    assert (result["info_lines"], result["channels"]) == (1, [])


def test_an_ib_run_with_gdr_passes():
    assert transport_problems(parsed("ib_gdr_two_nodes.log"), has_hcas=True, gdr_expected=True) == []


def test_sockets_on_a_cluster_with_hcas_fail_quoting_nccl():
    assert transport_problems(parsed("socket_two_nodes.log"), has_hcas=True, gdr_expected=False) == [
        "NCCL ran 16 of 16 inter-node channels over sockets although the nodes have HCAs: 'gpu01:51207:51291 [0] NCCL "
        "INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/Socket/0' (NCCL also said 'gpu01:51207:51290 [0] NCCL INFO "
        "NET/IB : No device found.'); check that NCCL_IB_DISABLE is not set, that NCCL_IB_HCA names HCAs the nodes have "
        "(rdma_fabric_facts), that rdma-core's libibverbs and the HCA's verbs provider are installed, and that the ports "
        "are ACTIVE"]


def test_sockets_without_hcas_are_what_the_cluster_has():
    assert transport_problems(parsed("socket_two_nodes.log"), has_hcas=False, gdr_expected=False) == []


def test_gdr_disabled_where_expected_fails_quoting_nccl():
    assert transport_problems(parsed("ib_gdr_disabled_two_nodes.log"), has_hcas=True, gdr_expected=True) == [
        "NCCL ran 16 of 16 inter-node channels without GPUDirect RDMA, through host memory: 'gpu01:51207:51291 [0] NCCL "
        "INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0' (NCCL also said 'gpu01:51207:51290 [0] NCCL INFO "
        "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0''); load nvidia_peermem or use DMA-BUF (open kernel module, "
        "Linux 5.12 or later: rdma_fabric_facts' gpudirect says which the node can do), and where the GPU and HCA are "
        "further apart than NCCL's default allows (rdma_fabric_facts' pcie_paths), set NCCL_NET_GDR_LEVEL"]
    assert transport_problems(parsed("ib_gdr_disabled_two_nodes.log"), has_hcas=True, gdr_expected=False) == []


def test_gdr_missing_on_some_channels_only_says_how_many():
    text = (FIXTURES / "ib_gdr_two_nodes.log").read_text().replace("via NET/IB/1/GDRDMA", "via NET/IB/1")
    (problem,) = transport_problems(parse_nccl_transport(text), has_hcas=True, gdr_expected=True)
    assert problem.startswith("NCCL ran 8 of 16 inter-node channels without GPUDirect RDMA, through host memory: "
                              "'gpu01:51207:51291 [0] NCCL INFO Channel 01/0 : 3[1] -> 0[0] [receive] via NET/IB/1'; load")


def test_sockets_and_no_gdr_are_both_reported():
    text = (FIXTURES / "ib_gdr_disabled_two_nodes.log").read_text().replace("via NET/IB/1", "via NET/Socket/0")
    problems = transport_problems(parse_nccl_transport(text), has_hcas=True, gdr_expected=True)
    assert [problem.split(":", maxsplit=1)[0] for problem in problems] == [
        "NCCL ran 8 of 16 inter-node channels over sockets although the nodes have HCAs",
        "NCCL ran 8 of 16 inter-node channels without GPUDirect RDMA, through host memory"]


def test_a_log_without_nccl_info():
    assert transport_problems(parse_nccl_transport("# Avg bus bandwidth    : 9.52\n"), True, True) == [
        "the log has no 'NCCL INFO' line: run the all-reduce with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS unset or "
        "including INIT and NET) so that NCCL says which transport it chose"]


def test_a_single_node_log_has_no_inter_node_channel():
    text = "\n".join(line for line in (FIXTURES / "ib_gdr_two_nodes.log").read_text().splitlines() if "NET/IB/" not in line)
    assert transport_problems(parse_nccl_transport(text), True, True) == [
        "the log has no inter-node channel line ('Channel NN/N : ... via NET/...'): the run did not span two nodes, or "
        "NCCL_DEBUG_SUBSYS left the lines out; run across at least two nodes with NCCL_DEBUG=INFO"]
