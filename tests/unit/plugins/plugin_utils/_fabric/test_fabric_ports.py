"""port_problems on rdma_fabric_facts' results for the recorded trees (module_utils/fixtures/rdma_sysfs)."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.modules.rdma_fabric_facts import gather
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._fabric.ports import expected_rate, port_problems

IB = ("pci_two_sockets_switches.txt", "ib_ndr_two_cx7.txt")
ROCE = ("pci_h200_vm.txt", "roce_vf_h200_vm.txt")


@pytest.fixture
def facts(rdma_tree):
    return lambda *listings: gather(*rdma_tree(*listings))


@pytest.mark.parametrize("value, expected", [(400, 400.0), ("400", 400.0), (" 200.5 ", 200.5), ("", None), (None, None)])
def test_expected_rate(value, expected):
    assert expected_rate(value) == expected


@pytest.mark.parametrize("value", ["NDR", "400 Gb/s", 0, -100, True, [400]])
def test_expected_rate_refuses_what_is_not_a_rate(value):
    with pytest.raises((TypeError, ValueError)):
        expected_rate(value)


@pytest.mark.parametrize("expected_ports", ["all", ["mlx5_0", "mlx5_1"], ["mlx5_0:1", "mlx5_1:1"], ["mlx5_0:1", "mlx5_0", "mlx5_1"]])
def test_two_active_ndr_hcas_pass(facts, expected_ports):
    assert port_problems("gpu01", facts(*IB), expected_ports, 400, "InfiniBand") == []


def test_a_port_down_and_polling(facts):
    assert port_problems("gpu01", facts(*IB + ("ib_mlx5_1_down_polling.txt",)), "all", 400) == [
        "gpu01: mlx5_1 port 1 is DOWN, physical state Polling: nothing answers at the other end of the link; reseat or "
        "replace the cable (and its transceivers) and check that the switch port is up"]


def test_a_port_disabled(facts):
    assert port_problems("gpu01", facts(*IB + ("ib_mlx5_1_disabled.txt",)), ["mlx5_1:1"], 400) == [
        "gpu01: mlx5_1 port 1 is DOWN, physical state Disabled: the port is switched off; enable the switch port (and for "
        "RoCE bring the interface up with ip link set DEV up)"]


def test_a_port_down_in_another_physical_state(facts):
    result = facts(*IB)
    result["hcas"][1]["ports"][0].update(state="DOWN", phys_state="LinkErrorRecovery")
    assert port_problems("gpu01", result) == [
        "gpu01: mlx5_1 port 1 is DOWN, physical state LinkErrorRecovery: the link does not come up; reseat or replace "
        "the cable and read the switch port's state and log"]


def test_a_port_without_a_subnet_manager(facts):
    assert port_problems("gpu01", facts(*IB + ("ib_mlx5_0_init.txt",)), "all", 400) == [
        "gpu01: mlx5_0 port 1 is INIT, physical state LinkUp: the link is up but no subnet manager has activated the "
        "port; check that a subnet manager (opensm, UFM or a managed switch's) runs on this fabric and sees the port"]


def test_another_state(facts):
    result = facts(*IB)
    result["hcas"][0]["ports"][0].update(state="ACTIVE_DEFER")
    assert port_problems("gpu01", result) == [
        "gpu01: mlx5_0 port 1 is ACTIVE_DEFER, physical state LinkUp, not ACTIVE; check the cable, the switch port and "
        "the subnet manager"]


def test_a_degraded_rate(facts):
    assert port_problems("gpu01", facts(*IB + ("ib_mlx5_1_hdr_200.txt",)), "all", "400") == [
        "gpu01: mlx5_1 port 1 runs at 200 Gb/s (200 Gb/sec (4X HDR)), below the expected 400 Gb/s: a cable, transceiver "
        "or switch port of a slower generation, or a link that trained down (read its error counters); check them, or "
        "set validate_fabric_expected_rate_gbps if 200 Gb/s is this cluster's rate"]
    assert port_problems("gpu01", facts(*IB + ("ib_mlx5_1_hdr_200.txt",)), "all", 200) == []
    assert port_problems("gpu01", facts(*IB + ("ib_mlx5_1_hdr_200.txt",)), "all", "") == []


def test_a_port_without_a_rate(facts):
    result = facts(*IB)
    result["hcas"][0]["ports"][0].update(rate_gbps=None, rate=None)
    assert port_problems("gpu01", result, ["mlx5_0"], 400) == [
        "gpu01: mlx5_0 port 1 reports no rate (None); read the port with ibstat or ethtool"]


def test_the_wrong_link_layer(facts):
    assert port_problems("gpu01", facts(*ROCE), "all", 200, "InfiniBand") == [
        "gpu01: mlx5_0 port 1 runs Ethernet, expected InfiniBand: set the port's type with mlxconfig (LINK_TYPE_P1) and "
        "reboot, or set validate_fabric_expected_link_layer"]


def test_roce_passes_with_a_routable_roce_v2_gid(facts):
    assert port_problems("gpu01", facts(*ROCE), "all", 200, "Ethernet") == []


def test_roce_without_a_routable_roce_v2_gid(facts):
    assert port_problems("gpu01", facts(*ROCE + ("roce_vf_no_ipv4.txt",)), "all", 200, "Ethernet") == [
        "gpu01: mlx5_0 port 1 (RoCE) has no RoCE v2 GID outside link-local: give eth1 an IP address, which adds the "
        "RoCE v2 GID NCCL uses (NCCL_IB_GID_INDEX selects it)"]
    result = facts(*ROCE)
    result["hcas"][0]["ports"][0]["gids"] = []
    assert port_problems("gpu01", result)[0].startswith(
        "gpu01: mlx5_0 port 1 (RoCE) has no RoCE v2 GID outside link-local: give its network interface an IP address")


def test_an_expected_hca_that_is_absent(facts):
    assert port_problems("gpu01", facts(*IB), ["mlx5_0", "mlx5_3:1"], 400) == [
        "gpu01: mlx5_3 is expected (validate_fabric_expected_ports) but the host has no such HCA (it has: mlx5_0, "
        "mlx5_1); check that the card is seated and its driver loaded (mlx5_core and mlx5_ib; rdma link show lists what "
        "the kernel sees), or take it out of validate_fabric_expected_ports"]


def test_expected_hcas_on_a_node_without_any(facts):
    assert port_problems("gpu03", facts("pci_h200_vm.txt"), ["mlx5_0"]) == [
        "gpu03: mlx5_0 is expected (validate_fabric_expected_ports) but the host has no such HCA (it has: none); check "
        "that the card is seated and its driver loaded (mlx5_core and mlx5_ib; rdma link show lists what the kernel "
        "sees), or take it out of validate_fabric_expected_ports"]


def test_all_on_a_node_without_hcas_has_nothing_to_check(facts):
    assert port_problems("gpu03", facts("pci_h200_vm.txt"), "all", 400, "InfiniBand") == []


def test_an_expected_port_that_is_absent(facts):
    assert port_problems("gpu01", facts(*IB), ["mlx5_0:2"]) == [
        "gpu01: mlx5_0 port 2 is expected (validate_fabric_expected_ports) but mlx5_0 has no such port (its ports: 1)"]


@pytest.mark.parametrize("rate", ["NDR", "400 Gb/s", -1, True])
def test_a_rate_that_is_not_a_rate(facts, rate):
    assert port_problems("gpu01", facts(*IB), "all", rate) == [
        "gpu01: validate_fabric_expected_rate_gbps=%r is not a rate; give Gb/s as a number (400 for NDR, 200 for HDR, "
        "100 for EDR)" % (rate,)]


def test_a_link_layer_that_does_not_exist(facts):
    assert port_problems("gpu01", facts(*IB), "all", 400, "RoCE") == [
        "gpu01: validate_fabric_expected_link_layer='RoCE' is not a link layer; use InfiniBand or Ethernet (RoCE)"]


@pytest.mark.parametrize("expected_ports, problem", [
    ("mlx5_0", "validate_fabric_expected_ports='mlx5_0' is neither 'all' nor a list of HCA or HCA:PORT (for example "
               "[mlx5_0, 'mlx5_1:1'])"),
    (None, "validate_fabric_expected_ports=None is neither 'all' nor a list of HCA or HCA:PORT (for example "
           "[mlx5_0, 'mlx5_1:1'])"),
    (["mlx5_0:x"], "validate_fabric_expected_ports has 'mlx5_0:x', which is not HCA or HCA:PORT (for example mlx5_0 or "
                   "mlx5_0:1)"),
    ([":1"], "validate_fabric_expected_ports has ':1', which is not HCA or HCA:PORT (for example mlx5_0 or mlx5_0:1)"),
    ([1], "validate_fabric_expected_ports has 1, which is not HCA or HCA:PORT (for example mlx5_0 or mlx5_0:1)"),
])
def test_a_port_list_that_is_not_one(facts, expected_ports, problem):
    assert port_problems("gpu01", facts(*IB), expected_ports) == ["gpu01: " + problem]


def test_every_problem_of_a_host_at_once(facts):
    problems = port_problems("gpu01", facts(*IB + ("ib_mlx5_1_down_polling.txt", "ib_mlx5_0_init.txt")),
                             ["mlx5_0", "mlx5_1", "mlx5_2"], "fast")
    starts = ["gpu01: validate_fabric_expected_rate_gbps='fast' is not a rate", "gpu01: mlx5_2 is expected",
              "gpu01: mlx5_0 port 1 is INIT", "gpu01: mlx5_1 port 1 is DOWN, physical state Polling"]
    assert len(problems) == len(starts)
    assert all(problem.startswith(start) for problem, start in zip(problems, starts))
