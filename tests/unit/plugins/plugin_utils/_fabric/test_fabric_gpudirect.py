"""gpudirect_problem on rdma_fabric_facts' results for the recorded trees (module_utils/fixtures/rdma_sysfs)."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.modules.rdma_fabric_facts import gather
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._fabric.gpudirect import gpudirect_problem

IB = ("pci_two_sockets_switches.txt", "ib_ndr_two_cx7.txt")


@pytest.fixture
def facts(rdma_tree):
    return lambda *listings: gather(*rdma_tree(*listings))


@pytest.mark.parametrize("driver, expected", [
    ("driver_open_580_kernel_6_8.txt", True), ("driver_open_580_kernel_6_8.txt", "dmabuf"),
    ("driver_proprietary_535_kernel_5_4_peermem.txt", True), ("driver_proprietary_535_kernel_5_4_peermem.txt", "peermem"),
    ("driver_proprietary_535_kernel_5_15.txt", False),
])
def test_available_or_not_expected(facts, driver, expected):
    assert gpudirect_problem("gpu01", facts(*IB + (driver,)), expected) == ""


def test_a_node_without_hcas_is_never_a_problem(facts):
    assert gpudirect_problem("gpu03", facts("pci_h200_vm.txt"), True) == ""


def test_expected_where_the_driver_and_kernel_cannot(facts):
    assert gpudirect_problem("gpu01", facts(*IB + ("driver_proprietary_535_kernel_5_15.txt",)), True) == (
        "gpu01: GPUDirect RDMA is expected (validate_fabric_gpudirect) but unavailable: DMA-BUF needs the open kernel "
        "module (this one is proprietary), and nvidia_peermem is not loaded: load it (modprobe nvidia-peermem, with the "
        "driver built against the installed RDMA stack) or move to the open kernel module on a newer kernel")


def test_expected_without_a_reason(facts):
    result = facts(*IB)
    result["gpudirect"] = {"method": None, "reason": None}
    assert gpudirect_problem("gpu01", result, True) == (
        "gpu01: GPUDirect RDMA is expected (validate_fabric_gpudirect) but unavailable: rdma_fabric_facts found no method")


def test_another_method_than_the_one_expected(facts):
    assert gpudirect_problem("gpu01", facts(*IB + ("driver_open_580_kernel_6_8.txt",)), "peermem") == (
        "gpu01: GPUDirect RDMA through peermem is expected (validate_fabric_gpudirect) but the host uses dmabuf (kernel "
        "6.8.0-90-generic, open kernel module); set validate_fabric_gpudirect: true to accept either method")


def test_an_expectation_that_is_not_one(facts):
    assert gpudirect_problem("gpu01", facts(*IB + ("driver_open_580_kernel_6_8.txt",)), "gdr") == (
        "gpu01: validate_fabric_gpudirect='gdr' is not true, false, dmabuf or peermem")
