"""validate's gpu.sharing on the real H200's facts (driver 580, MIG disabled, ../shared/gpu-samples/h200-580), and on
copies of them with MIG turned on, pending, or eight GPUs."""
import copy
import json
import pathlib

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_smi import parse_nvidia_smi_xml
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.sharing import (
    declared_layout, declared_resources, layout_text, sharing_check)

H200 = json.loads((pathlib.Path(__file__).parent / "fixtures" / "nvidia_gpu_facts_h200_580.json").read_text())


def facts(gpus=1, **mig):
    """The H200's facts with `gpus` GPUs (copies of its one, indexed 0..), each with the MIG fields given."""
    result = copy.deepcopy(H200)
    result["gpus"] = [dict(copy.deepcopy(H200["gpus"][0]), index=index, **mig) for index in range(gpus)]
    result["gpu_count"] = gpus
    return result


def test_whole_gpus_with_mig_off_pass_without_a_declaration():
    found = sharing_check("gpu1", H200, None, None)
    assert found["status"] == "pass"
    assert (found["expected"], found["measured"]) == ("GPU 0 whole", "GPU 0 MIG off")


def test_time_slicing_is_declared_with_its_replicas_and_needs_mig_off():
    found = sharing_check("gpu1", facts(8), [{"mode": "time_slicing", "replicas": 4}], None)
    assert found["status"] == "pass"
    assert found["message"] == "shared as declared: GPUs 0-7 time-sliced x4 (GPUs 0-7 MIG off)"


def test_mig_on_where_the_gpu_is_declared_whole_fails_naming_the_gpu_and_both_fixes():
    found = sharing_check("gpu1", facts(mig_mode_current=True, mig_mode_pending=True, mig_device_count=2), [], None)
    assert found["status"] == "fail"
    assert found["measured"] == "GPU 0 MIG on, 2 MIG device(s)"
    assert "GPU 0 (NVIDIA H200) is declared whole but has MIG on, 2 MIG device(s)" in found["message"]
    assert "nvidia-smi -i 0 -mig 0" in found["message"] and "validate_gpu_sharing_layout" in found["message"]


def test_mig_pending_after_the_next_reset_is_not_the_declared_whole_gpu():
    found = sharing_check("gpu1", facts(mig_mode_current=False, mig_mode_pending=True), [], None)
    assert found["status"] == "fail"
    assert found["measured"] == "GPU 0 MIG off (on after the next GPU reset)"


@pytest.mark.parametrize("mig, status, says", [
    ({"mig_mode_current": True, "mig_mode_pending": True, "mig_device_count": 2}, "pass",
     "shared as declared: GPU 0 MIG 2x3g.71gb (GPU 0 MIG on, 2 MIG device(s))"),
    ({"mig_mode_current": True, "mig_mode_pending": True, "mig_device_count": 1}, "fail",
     "GPU 0 (NVIDIA H200) has 1 MIG device(s) where its layout MIG 2x3g.71gb has 2"),
    ({"mig_mode_current": False, "mig_mode_pending": False, "mig_device_count": 0}, "fail",
     "GPU 0 (NVIDIA H200) is declared MIG 2x3g.71gb but has MIG off; set MIG mode on (nvidia-smi -i 0 -mig 1"),
    ({"mig_mode_current": True, "mig_mode_pending": False, "mig_device_count": 2}, "fail",
     "but has MIG on, 2 MIG device(s) (off after the next GPU reset)"),
])
def test_a_mig_layout_needs_mig_on_now_and_after_a_reset_with_one_device_per_instance(mig, status, says):
    found = sharing_check("gpu1", facts(**mig), [{"mode": "mig", "layout": {"3g.71gb": 2}}], None)
    assert found["status"] == status and says in found["message"]
    assert found["expected"] == "GPU 0 MIG 2x3g.71gb"


def test_a_wrong_declaration_fails_with_the_resolvers_message_naming_host_and_variable():
    found = sharing_check("gpu1", H200, [{"mode": "time_slicing", "replicas": 1000}], None)
    assert found["status"] == "fail" and found["expected"] == "validate_gpu_sharing_layout"
    assert found["message"].startswith("gpu1: validate_gpu_sharing_layout[0]")
    assert declared_layout("gpu1", H200, [{"mode": "time_slicing", "replicas": 1000}]) is None


def test_gpus_the_driver_cannot_read_are_skipped_with_the_reason_and_the_layout_still_declared():
    unread = dict(copy.deepcopy(H200), driver_state="not_loaded", gpus=[])
    found = sharing_check("gpu1", unread, [{"mode": "time_slicing", "replicas": 2}], "the driver does not answer (not_loaded)")
    assert (found["status"], found["message"]) == ("skip", "the driver does not answer (not_loaded)")
    assert found["expected"] == "GPU 0 time-sliced x2"  # the GPU on PCI, named from its device id


def test_a_node_without_gpus_is_skipped():
    none = {"driver_state": "no_gpu", "gpus": [], "pci_gpus": []}
    found = sharing_check("cpu1", none, None, "no NVIDIA GPU on this node")
    assert (found["status"], found["message"]) == ("skip", "no NVIDIA GPU on this node")
    assert declared_layout("cpu1", none, None) is None


def test_the_layout_text_groups_gpus_with_the_same_setting_in_index_order():
    rules = [{"indexes": [6, 7], "mode": "mig", "layout": {"1g.18gb": 7}}]
    assert declared_layout("gpu1", facts(8), rules) == "GPUs 0-5 whole; GPUs 6-7 MIG 7x1g.18gb"
    settings = [{"index": index, "mode": "whole" if index in (0, 2, 5) else "time_slicing", "replicas": 2}
                for index in range(6)]
    assert layout_text(settings) == "GPUs 0, 2, 5 whole; GPUs 1, 3, 4 time-sliced x2"


def test_an_hgx_h100_report_with_mig_on_one_gpu_and_pending_on_the_other():
    """GPU 0: MIG on, two MIG devices; GPU 1: MIG on only after its next reset (the fixture's README)."""
    xml = (pathlib.Path(__file__).parents[2] / "module_utils" / "fixtures" / "nvidia_smi" /
           "hgx_h100_2x_h100_80gb_hbm3_mig.xml").read_text()
    hgx = dict(parse_nvidia_smi_xml(xml), driver_state="ok", pci_gpus=[])
    rules = [{"indexes": [0], "mode": "mig", "layout": {"3g.40gb": 2}}]
    found = sharing_check("hgx1", hgx, rules, None)
    assert found["status"] == "fail"
    assert found["expected"] == "GPU 0 MIG 2x3g.40gb; GPU 1 whole"
    assert found["measured"] == "GPU 0 MIG on, 2 MIG device(s); GPU 1 MIG off (on after the next GPU reset)"
    assert found["message"].startswith("GPU 1 (NVIDIA H100 80GB HBM3) is declared whole but has MIG off (on after")
    assert "GPU 0" not in found["message"]
    both = sharing_check("hgx1", hgx, [{"mode": "mig", "layout": {"3g.40gb": 2}}], None)
    assert both["status"] == "fail" and both["message"].startswith("GPU 1 (NVIDIA H100 80GB HBM3) is declared MIG 2x3g.40gb")


def test_the_declared_resources_are_the_device_plugins_for_the_layout():
    xml = (pathlib.Path(__file__).parents[2] / "module_utils" / "fixtures" / "nvidia_smi" /
           "hgx_h100_2x_h100_80gb_hbm3_mig.xml").read_text()
    hgx = dict(parse_nvidia_smi_xml(xml), driver_state="ok", pci_gpus=[])
    assert declared_resources("hgx1", hgx, [{"indexes": [0], "mode": "mig", "layout": {"3g.40gb": 2}}]) == (
        {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 2}, "mig")
    assert declared_resources("hgx1", hgx, [{"mode": "time_slicing", "replicas": 3}]) == ({"nvidia.com/gpu": 6}, "time-sliced")
    assert declared_resources("hgx1", hgx, []) is None  # nothing declared: the node's labels say
    assert declared_resources("hgx1", hgx, [{"mode": "time_slicing", "replicas": 0}]) is None  # gpu.sharing says why
