"""The nccl role's GPUDirect RDMA plan: which way each kind of node goes, what nccl.conf gets, and each message."""
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.gpudirect import gpudirect_plan


@pytest.mark.parametrize("flavor, kernel, method", [
    ("open", "6.12.48+deb13-amd64", "dmabuf"),
    ("open", "5.12.0", "dmabuf"),
    ("open", "5.10.0-33-amd64", "peermem"),  # Debian 11's kernel: no DMA-BUF for RDMA
    ("proprietary", "6.12.48+deb13-amd64", "peermem"),
])
def test_dmabuf_with_the_open_module_on_5_12_or_later_else_nvidia_peermem_loaded_at_boot(flavor, kernel, method):
    plan = gpudirect_plan("auto", True, flavor, kernel)
    assert (plan["method"], plan["load_peermem"], plan["problems"]) == (method, method == "peermem", [])
    assert plan["conf"] == {}


def test_the_note_says_why():
    assert gpudirect_plan("auto", True, "proprietary", "6.1.0-28-amd64")["note"] == (
        "GPUDirect RDMA through nvidia-peermem (the proprietary kernel module has no DMA-BUF for it), loaded at boot")
    assert gpudirect_plan("auto", True, "open", "5.10.0-33-amd64")["note"] == (
        "GPUDirect RDMA through nvidia-peermem (Linux 5.10.0-33-amd64, older than 5.12, has no DMA-BUF for it), loaded at boot")
    assert gpudirect_plan("auto", True, "open", "6.1.0")["note"] == (
        "GPUDirect RDMA through DMA-BUF (the open kernel module on Linux 6.1.0): nothing to load")


def test_without_a_planned_driver_auto_waits_and_true_stops_naming_host_variable_and_fix():
    auto = gpudirect_plan("auto", True, None, "6.12.48+deb13-amd64")
    assert (auto["method"], auto["load_peermem"], auto["problems"]) == (None, False, [])
    assert auto["note"] == "no GPUDirect RDMA yet: the nvidia_driver role planned no driver for this node"
    (problem,) = gpudirect_plan(True, True, None, "6.12.48+deb13-amd64")["problems"]
    assert problem.startswith("nccl_gpudirect is true but the nvidia_driver role planned no driver")
    assert "run the nvidia_driver role first" in problem


def test_a_node_without_an_hca_gets_nothing_and_loses_the_network_gdr_settings():
    plan = gpudirect_plan("auto", False, "open", "6.12.0", {"NCCL_NET_GDR_LEVEL": "PHB", "NCCL_IB_GID_INDEX": 3})
    assert (plan["method"], plan["load_peermem"], plan["conf"]) == (None, False, {"NCCL_NET_GDR_LEVEL": None})
    assert plan["note"] == "no GPUDirect RDMA: the node has no RDMA device (NCCL_NET_GDR_LEVEL left out of nccl.conf)"
    (problem,) = gpudirect_plan("true", False, "open", "6.12.0")["problems"]
    assert problem.startswith("nccl_gpudirect is true but the node has no RDMA device (HCA)")


@pytest.mark.parametrize("setting", [False, "false", "False"])
def test_false_keeps_nccl_from_gpudirect_and_loads_nothing(setting):
    plan = gpudirect_plan(setting, True, "proprietary", "6.1.0")
    assert (plan["method"], plan["load_peermem"], plan["conf"], plan["problems"]) == (
        None, False, {"NCCL_NET_GDR_LEVEL": "LOC"}, [])


def test_false_beside_a_gdr_level_that_asks_for_it_is_a_problem():
    (problem,) = gpudirect_plan(False, True, "open", "6.1.0", {"NCCL_NET_GDR_LEVEL": "PHB"})["problems"]
    assert problem == ("nccl_gpudirect is false but nccl_conf_extra sets NCCL_NET_GDR_LEVEL=PHB, which asks NCCL to "
                       "use it; remove that key, or set nccl_gpudirect: auto")
    assert gpudirect_plan(False, True, "open", "6.1.0", {"NCCL_NET_GDR_LEVEL": "loc"})["problems"] == []


def test_an_unknown_setting_is_refused():
    (problem,) = gpudirect_plan("required", True, "open", "6.1.0")["problems"]
    assert problem.startswith("nccl_gpudirect='required' is none of auto, true and false")
