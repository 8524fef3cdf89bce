"""Which GPUDirect RDMA method a node can use, from recorded sysfs/procfs trees."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.gpudirect import gpudirect_state, kernel_version


@pytest.mark.parametrize("release, expected", [
    ("6.8.0-90-generic", (6, 8)), ("5.12.0", (5, 12)), ("5.4.0-182-generic", (5, 4)), ("4.18.0-553.el8_10.x86_64", (4, 18)),
    ("", None), (None, None), ("unknown", None),
])
def test_kernel_version(release, expected):
    assert kernel_version(release) == expected


@pytest.mark.parametrize("listing, method, dmabuf, peermem, flavor, release", [
    ("driver_open_580_kernel_6_8.txt", "dmabuf", True, False, "open", "6.8.0-90-generic"),
    ("driver_proprietary_535_kernel_5_4_peermem.txt", "peermem", False, True, "proprietary", "5.4.0-182-generic"),
])
def test_the_method(rdma_tree, listing, method, dmabuf, peermem, flavor, release):
    sysfs, procfs = rdma_tree("pci_h200_vm.txt", listing)
    assert gpudirect_state(sysfs, procfs) == {
        "method": method, "reason": None, "dmabuf_possible": dmabuf, "peermem_loaded": peermem, "nvidia_loaded": True,
        "kernel_module_flavor": flavor, "kernel_release": release}


@pytest.mark.parametrize("listing, reason", [
    ("driver_proprietary_535_kernel_5_15.txt",
     "DMA-BUF needs the open kernel module (this one is proprietary), and nvidia_peermem is not loaded: load it "
     "(modprobe nvidia-peermem, with the driver built against the installed RDMA stack) or move to the open kernel module "
     "on a newer kernel"),
    ("driver_open_kernel_5_10.txt",
     "DMA-BUF needs Linux 5.12 or later (this is 5.10.0-32-amd64), and nvidia_peermem is not loaded: load it "
     "(modprobe nvidia-peermem, with the driver built against the installed RDMA stack) or move to the open kernel module "
     "on a newer kernel"),
])
def test_no_method_says_why(rdma_tree, listing, reason):
    sysfs, procfs = rdma_tree("pci_h200_vm.txt", listing)
    state = gpudirect_state(sysfs, procfs)
    assert (state["method"], state["dmabuf_possible"], state["reason"]) == (None, False, reason)


def test_without_the_nvidia_module(rdma_tree):
    sysfs, procfs = rdma_tree("pci_h200_vm.txt")
    assert gpudirect_state(sysfs, procfs) == {
        "method": None, "dmabuf_possible": False, "peermem_loaded": False, "nvidia_loaded": False,
        "kernel_module_flavor": None, "kernel_release": None,
        "reason": "the nvidia kernel module is not loaded, so GPU memory cannot be registered with an HCA"}


def test_both_missing_are_named_together(rdma_tree, tmp_path):
    sysfs, procfs = rdma_tree("pci_h200_vm.txt", "driver_proprietary_535_kernel_5_15.txt")
    (tmp_path / "host" / "proc" / "sys" / "kernel" / "osrelease").write_text("5.4.0-182-generic\n")
    assert gpudirect_state(sysfs, procfs)["reason"].startswith(
        "DMA-BUF needs the open kernel module (this one is proprietary) and Linux 5.12 or later (this is 5.4.0-182-generic), "
        "and nvidia_peermem is not loaded")
