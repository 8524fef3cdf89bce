"""The GPU checks of the validate evaluator, on recorded nvidia-smi reports, a kernel log and dcgmi/nvbandwidth outputs."""

import copy
import pathlib

import pytest
import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_smi import parse_nvidia_smi_xml, parse_xid_events
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.tool_output import parse_dcgmi_diag_json, parse_nvbandwidth
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.gpu import (
    CHECK_IDS,
    NOT_MANAGED,
    gpu_checks,
    model_matches,
    parse_expected_gpus,
    thresholds_for,
)

ROOT = pathlib.Path(__file__).resolve().parents[5]
NVIDIA_SMI = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "nvidia_smi"
FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "validate_gpu"
GPU_MODELS = yaml.safe_load((ROOT / "roles" / "validate" / "vars" / "gpu_models.yml").read_text())["__validate_gpu_models"]
H100 = "NVIDIA H100 80GB HBM3"


def facts_from(report, dmesg=None, nvswitch_count=0):
    """What nvidia_gpu_facts returns on a host whose nvidia-smi prints `report` and whose dmesg prints `dmesg`."""
    parsed = parse_nvidia_smi_xml((NVIDIA_SMI / report).read_text())
    gpus = parsed["gpus"]
    return {
        "driver_state": "ok", "message": None, "reboot_required": False, "gpu_count": len(gpus), "gpus": gpus,
        "driver_version": parsed["driver_version"], "cuda_version": parsed["cuda_version"],
        "pci_gpus": [{"address": gpu["pci_bus_id"][4:].lower(), "device_id": None, "class": "0x030200"} for gpu in gpus],
        "nvswitch_count": nvswitch_count,
        "xid_events": parse_xid_events((NVIDIA_SMI / dmesg).read_text()) if dmesg else [], "kernel_log_error": None,
    }


def not_answering(state, message, pci_count=1):
    return {"driver_state": state, "message": message, "gpu_count": pci_count, "gpus": [], "driver_version": None,
            "pci_gpus": [{"address": "0000:00:06.0", "device_id": "0x2330", "class": "0x030200"}] * pci_count,
            "nvswitch_count": 0, "xid_events": [], "kernel_log_error": None}


def by_id(checks):
    assert [check["check"] for check in checks] == list(CHECK_IDS)
    return {check["check"]: check for check in checks}


def statuses(checks):
    return {check["check"]: check["status"] for check in checks}


def run(facts, expected="", thresholds=None, **options):
    options.setdefault("kernel_module_managed", True)
    options.setdefault("dcgm", None)
    options.setdefault("dcgm_reason", "dcgmi is not installed")
    options.setdefault("bandwidth", None)
    options.setdefault("bandwidth_reason", "nvbandwidth is not installed")
    return gpu_checks(facts, expected, thresholds if thresholds is not None else {}, options)


def only_failures(checks):
    return sorted(check["check"] for check in checks if check["status"] == "fail")


NOT_LOADED_MESSAGE = ("the nvidia kernel module is not loaded; run 'modprobe nvidia' and read dmesg if it fails (Secure Boot "
                      "signing and a missing DKMS build for the running kernel are the usual causes)")


@pytest.mark.parametrize("facts, expected", [
    (facts_from("h100_80gb_hbm3_single_580_capture.xml"), "1 x " + H100),
    (facts_from("dgx_a100_8x_a100_sxm4_80gb.xml"), ""),
    (not_answering("not_loaded", NOT_LOADED_MESSAGE), "1 x H100"),
    (not_answering("no_gpu", "no NVIDIA GPU", 0), ""),
    ({}, "8 x A100"),
    ({"failed": True, "msg": "sysfs_root=/x is not a directory"}, ""),
    (facts_from("h100_80gb_hbm3_single_580_capture.xml"), "eight H100s"),
])
def test_every_check_is_present_and_well_formed(facts, expected):
    checks = run(facts, expected)
    assert [check["check"] for check in checks] == list(CHECK_IDS)
    for check in checks:
        assert set(check) == {"check", "status", "expected", "measured", "message"}
        assert check["status"] in ("pass", "fail", "skip")
        assert isinstance(check["message"], str) and check["message"]
        assert check["expected"] is None or isinstance(check["expected"], str)
        assert check["measured"] is None or isinstance(check["measured"], str)


def test_healthy_h100_passes_every_applicable_check():
    checks = by_id(run(
        facts_from("h100_80gb_hbm3_single_580_capture.xml"), "1 x " + H100, thresholds_for(H100, GPU_MODELS, {}),
        dcgm=(FIXTURES / "dcgmi_diag_r1_1x_h100_dcgm3.json").read_text(),
        bandwidth={"rc": 0, "stdout": (FIXTURES / "nvbandwidth_h2d_1x_h100.txt").read_text(), "stderr": ""}))
    assert {cid: check["status"] for cid, check in checks.items()} == dict(
        {cid: "pass" for cid in CHECK_IDS}, **{"gpu.nvlink": "skip"})
    assert checks["gpu.nvlink"]["message"] == "no NVLink fabric reported"
    assert checks["gpu.count_model"]["measured"] == "1 x " + H100
    assert checks["gpu.pcie_link"]["measured"] == "GPU 0 Gen5 x16 of Gen5 x16 in P0"
    assert checks["gpu.throttle"]["measured"] == "active: gpu_idle"
    assert checks["gpu.host_device_bandwidth"]["expected"] == ">= 52 GB/s per GPU"
    assert checks["gpu.host_device_bandwidth"]["measured"] == "GPU 0 55.21 GB/s"


def test_degraded_link_fails_only_the_pcie_check():
    checks = run(facts_from("h100_80gb_hbm3_degraded_pcie_link.xml"), "1 x " + H100, thresholds_for(H100, GPU_MODELS, {}))
    assert only_failures(checks) == ["gpu.pcie_link"]
    link = by_id(checks)["gpu.pcie_link"]
    assert link["message"].startswith("GPU 0 (00000000:00:06.0) runs x8 of x16, runs Gen3 of Gen5 in P0; reseat the GPU")
    assert link["measured"] == "GPU 0 Gen3 x8 of Gen5 x16 in P0"
    assert link["expected"] == "width at its maximum, generation at its maximum in P0, maxima of at least Gen5 x16"


@pytest.mark.parametrize("state, width, status", [
    ("P0", 16, "fail"),   # busy and slower than it can be
    ("P8", 16, "pass"),   # idle: the GPU lowered the generation itself
    ("P8", 8, "fail"),    # a narrower link is never a power-saving state
])
def test_link_generation_counts_only_in_p0(state, width, status):
    facts = facts_from("h100_80gb_hbm3_degraded_pcie_link.xml")
    facts["gpus"][0]["performance_state"] = state
    facts["gpus"][0]["pcie"]["width_current"] = width
    link = by_id(run(facts))["gpu.pcie_link"]
    assert link["status"] == status
    if status == "pass":
        assert "GPU 0 (00000000:00:06.0) runs Gen3 of Gen5 in P8: idle GPUs lower the link generation to save power" in link["message"]


def test_link_below_the_model_minimum_fails():
    facts = facts_from("h100_80gb_hbm3_single_580_capture.xml")
    facts["gpus"][0]["pcie"].update(gen_current=4, gen_max=4)  # a Gen5 GPU in a Gen4 slot
    link = by_id(run(facts, thresholds={"pcie_gen": 5, "pcie_width": 16}))["gpu.pcie_link"]
    assert link["status"] == "fail"
    assert "reaches Gen4 at most (the lower of the GPU's and the slot's maxima) where Gen5 is expected of this model" in link["message"]
    assert by_id(run(facts))["gpu.pcie_link"]["status"] == "pass"


def test_xid_in_the_kernel_log_fails_only_the_xid_check():
    checks = run(facts_from("h100_80gb_hbm3_single_580_capture.xml", dmesg="dmesg_xid_79.txt"), "1 x " + H100)
    assert only_failures(checks) == ["gpu.xid"]
    xid = by_id(checks)["gpu.xid"]
    assert xid["measured"] == "Xid 79 on GPU 0 (00000000:00:06.0), Xid 154 on GPU 0 (00000000:00:06.0)"
    assert xid["message"].startswith("Xid 79 on GPU 0 (00000000:00:06.0), Xid 154 on GPU 0 (00000000:00:06.0) since boot; ")


def test_xid_on_a_gpu_the_driver_lost_names_its_address():
    facts = not_answering("error", "nvidia-smi -q -x did not finish within 60 s; the driver may be hung")
    facts["xid_events"] = [{"pci": "0000:00:06", "xid": 79, "text": "GPU has fallen off the bus."}] * 2
    xid = by_id(run(facts))["gpu.xid"]
    assert (xid["status"], xid["measured"]) == ("fail", "Xid 79 on PCI 0000:00:06 (2 times)")


@pytest.mark.parametrize("change, message", [
    ({"kernel_log_error": "/usr/bin/dmesg exited with 1: dmesg: read kernel buffer failed: Operation not permitted"},
     "the kernel log could not be read: /usr/bin/dmesg exited with 1: dmesg: read kernel buffer failed: Operation not permitted"),
    ({"xid_events": None}, "the kernel log was not read (nvidia_gpu_facts ran with kernel_log: false, or did not run)"),
])
def test_xid_skips_without_a_kernel_log(change, message):
    facts = dict(facts_from("h100_80gb_hbm3_single_580_capture.xml"), **change)
    xid = by_id(run(facts))["gpu.xid"]
    assert (xid["status"], xid["message"]) == ("skip", message)


def test_driver_not_loaded_where_the_module_is_not_managed_skips_with_the_reason():
    checks = by_id(run(not_answering("not_loaded", NOT_LOADED_MESSAGE), "1 x H100", kernel_module_managed=False))
    assert checks["gpu.driver_state"]["status"] == "skip"
    assert checks["gpu.driver_state"]["message"] == NOT_MANAGED
    assert checks["gpu.count_model"]["status"] == "skip"
    assert checks["gpu.count_model"]["message"] == "1 GPU(s) on PCI as expected; the model cannot be read because " + NOT_MANAGED
    for cid in ("gpu.persistence_mode", "gpu.ecc", "gpu.nvlink", "gpu.pcie_link", "gpu.throttle"):
        assert (checks[cid]["status"], checks[cid]["message"]) == ("skip", "the driver does not answer (not_loaded)")
    assert checks["gpu.xid"]["status"] == "pass"
    assert checks["gpu.dcgm_diag"]["message"] == "dcgmi is not installed"


def test_driver_not_loaded_where_the_module_is_managed_fails():
    checks = by_id(run(not_answering("not_loaded", NOT_LOADED_MESSAGE), "1 x H100"))
    assert (checks["gpu.driver_state"]["status"], checks["gpu.driver_state"]["message"]) == ("fail", NOT_LOADED_MESSAGE)
    assert checks["gpu.driver_state"]["measured"] == "not_loaded"
    count = checks["gpu.count_model"]
    assert count["status"] == "fail"
    assert count["message"] == ("1 GPU(s) on PCI as expected, but the model cannot be read because the driver does not answer "
                                "(not_loaded): " + NOT_LOADED_MESSAGE)
    assert count["measured"] == "1 on PCI, model unread (driver not_loaded)"


def test_driver_not_answering_with_gpus_missing_from_pci():
    count = by_id(run(not_answering("version_mismatch", "reboot", pci_count=7), "8 x A100"))["gpu.count_model"]
    assert count["status"] == "fail"
    assert count["message"].startswith("7 NVIDIA GPU(s) on PCI where 8 are expected, and the model cannot be read (driver version_mismatch)")


def test_wrong_expected_model_names_expected_and_measured():
    count = by_id(run(facts_from("h100_80gb_hbm3_single_580_capture.xml"), "1 x NVIDIA A100-SXM4-80GB"))["gpu.count_model"]
    assert count["status"] == "fail"
    assert (count["expected"], count["measured"]) == ("1 x NVIDIA A100-SXM4-80GB", "1 x " + H100)
    assert count["message"].startswith("GPU 0 (00000000:00:06.0) is NVIDIA H100 80GB HBM3, not NVIDIA A100-SXM4-80GB; "
                                       "correct validate_expected_gpus")


@pytest.mark.parametrize("expected, status, message", [
    ("8 x A100-SXM4-80GB", "pass", "8 x NVIDIA A100-SXM4-80GB as expected"),
    ("8 x nvidia a100-sxm4-80gb", "pass", "8 x NVIDIA A100-SXM4-80GB as expected"),
    ("4 x A100-SXM4-80GB", "fail", "8 GPU(s) where 4 are expected; correct validate_expected_gpus"),
    ("", "skip", "found 8 x NVIDIA A100-SXM4-80GB; set validate_expected_gpus (as 'COUNT x MODEL') to check the count and model"),
    ("8 A100", "fail", "validate_expected_gpus='8 A100' is not 'COUNT x MODEL'"),
])
def test_count_and_model(expected, status, message):
    count = by_id(run(facts_from("dgx_a100_8x_a100_sxm4_80gb.xml"), expected))["gpu.count_model"]
    assert count["status"] == status
    assert count["message"].startswith(message)


def test_no_gpu_and_nothing_expected():
    checks = by_id(run(not_answering("no_gpu", "no NVIDIA GPU (PCI vendor 0x10de, class 0x0300 or 0x0302) is present", 0)))
    assert checks["gpu.count_model"]["message"] == "no NVIDIA GPU on this node and validate_expected_gpus is not set"
    assert {check["status"] for check in checks.values()} == {"skip"}
    assert checks["gpu.xid"]["message"] == "no NVIDIA GPU on this node"


def test_no_gpu_where_gpus_are_expected_fails():
    count = by_id(run(not_answering("no_gpu", "none", 0), "8 x H100"))["gpu.count_model"]
    assert (count["status"], count["measured"]) == ("fail", "0 GPUs")


@pytest.mark.parametrize("facts, message", [
    ({}, "nvidia_gpu_facts did not report on this node: no result"),
    ({"failed": True, "msg": "sysfs_root=/x is not a directory; set it to where sysfs is mounted (normally /sys)"},
     "nvidia_gpu_facts did not report on this node: sysfs_root=/x is not a directory"),
])
def test_without_facts_the_driver_check_fails_and_the_rest_skip(facts, message):
    checks = by_id(run(facts))
    assert checks["gpu.driver_state"]["status"] == "fail"
    assert checks["gpu.driver_state"]["message"].startswith(message)
    assert checks["gpu.ecc"]["message"] == "the GPU facts could not be read on this node"
    assert checks["gpu.count_model"]["status"] == "skip"
    count = by_id(run(facts, "8 x A100"))["gpu.count_model"]
    assert (count["status"], count["expected"], count["measured"]) == ("fail", "8 x A100", None)


def test_persistence_mode_off_names_the_gpus():
    check = by_id(run(facts_from("dgx1_8x_tesla_v100_sxm2_32gb.xml")))["gpu.persistence_mode"]
    assert (check["status"], check["measured"]) == ("fail", "on for 0 of 8 GPU(s)")
    assert check["message"].startswith("persistence mode is off on GPU 0 (00000000:06:00.0), GPU 1 (00000000:07:00.0), ")


@pytest.mark.parametrize("edit, finding", [
    (lambda gpu: gpu["ecc"].update(volatile_uncorrectable=2), "2 uncorrectable ECC error(s) since the driver loaded"),
    (lambda gpu: gpu["remapped_rows"].update(pending=True), "a row remap is pending"),
    (lambda gpu: gpu["remapped_rows"].update(failure=True), "row remapping has failed"),
    (lambda gpu: gpu["retired_pages"].update(pending=True), "a page retirement is pending"),
    (lambda gpu: gpu["ecc"].update(mode_current=False), "ECC is off"),
])
def test_ecc_findings(edit, finding):
    facts = facts_from("h100_80gb_hbm3_single_580_capture.xml")
    edit(facts["gpus"][0])
    check = by_id(run(facts))["gpu.ecc"]
    assert check["status"] == "fail"
    assert check["message"].startswith("GPU 0 (00000000:00:06.0): %s; drain the node" % finding)


def test_ecc_corrected_errors_and_past_remaps_pass():
    facts = facts_from("h100_80gb_hbm3_single_580_capture.xml")
    facts["gpus"][0]["ecc"].update(volatile_correctable=40, aggregate_uncorrectable=1)
    facts["gpus"][0]["remapped_rows"].update(uncorrectable=1)
    assert by_id(run(facts))["gpu.ecc"]["status"] == "pass"


@pytest.mark.parametrize("report, status", [
    ("dgx1_8x_tesla_v100_sxm2_32gb.xml", "pass"),   # Volta's double-bit counters, all zero
    ("geforce_rtx_3090_single.xml", "skip"),        # no ECC on a consumer board
])
def test_ecc_per_generation(report, status):
    assert by_id(run(facts_from(report)))["gpu.ecc"]["status"] == status


def test_nvlink_fabric():
    facts = facts_from("hgx_h100_2x_h100_80gb_hbm3_mig.xml", nvswitch_count=4)
    assert by_id(run(facts))["gpu.nvlink"]["status"] == "pass"
    facts["gpus"][1].update(fabric_state="In Progress", fabric_status="N/A")
    check = by_id(run(facts))["gpu.nvlink"]
    assert check["status"] == "fail"
    assert check["message"].startswith("GPU 1 (00000000:2A:00.0): state In Progress, status N/A; ")


def test_nvlink_with_nvswitches_but_no_fabric_state_skips():
    check = by_id(run(facts_from("dgx_a100_8x_a100_sxm4_80gb.xml", nvswitch_count=6)))["gpu.nvlink"]
    assert check["status"] == "skip"
    assert "check that nvidia-fabricmanager is active" in check["message"]


@pytest.mark.parametrize("active, status", [
    (["gpu_idle"], "pass"),
    (["sw_power_cap", "applications_clocks_setting", "sync_boost", "display_clocks_setting"], "pass"),
    (["hw_slowdown", "hw_thermal_slowdown"], "fail"),
    (["hw_power_brake_slowdown"], "fail"),
    (["sw_thermal_slowdown"], "fail"),
])
def test_throttle(active, status):
    facts = facts_from("h100_80gb_hbm3_single_580_capture.xml")
    facts["gpus"][0]["clock_event_reasons_active"] = active
    check = by_id(run(facts))["gpu.throttle"]
    assert check["status"] == status
    if status == "fail":
        assert check["message"].startswith("GPU 0 (00000000:00:06.0): %s; heat or power" % ", ".join(active))


def test_throttle_on_an_older_driver_report_without_reasons_skips():
    assert by_id(run(facts_from("dgx_a100_8x_a100_sxm4_80gb.xml")))["gpu.throttle"]["status"] == "skip"


# ---- dcgmi diag -------------------------------------------------------------------------------------------------

def test_parse_dcgmi_diag_dcgm3():
    diag = parse_dcgmi_diag_json((FIXTURES / "dcgmi_diag_r1_1x_h100_dcgm3.json").read_text())
    assert (diag["version"], diag["runtime_error"], len(diag["results"])) == ("3.3.9", None, 9)
    assert diag["results"][0] == {"category": "Deployment", "test": "Denylist", "gpu": "0", "status": "pass", "messages": []}
    assert diag["results"][-1]["status"] == "skip"


def test_parse_dcgmi_diag_dcgm4():
    diag = parse_dcgmi_diag_json((FIXTURES / "dcgmi_diag_r2_8x_a100_dcgm4_memory_fail.json").read_text())
    assert (diag["version"], len(diag["results"])) == ("4.1.1", 24)
    failed = [entry for entry in diag["results"] if entry["status"] == "fail"]
    assert [(entry["test"], entry["gpu"]) for entry in failed] == [("memory", "3")]
    assert failed[0]["messages"][0].startswith("Pending page retirements together with a DBE were detected on GPU 3.")


@pytest.mark.parametrize("text", ["", "Error: unable to establish a connection to the specified host: localhost", "[1, 2]"])
def test_parse_dcgmi_diag_rejects_what_is_no_result(text):
    with pytest.raises(ValueError):
        parse_dcgmi_diag_json(text)


def test_dcgm_failure_names_test_gpu_and_dcgm_message():
    check = by_id(run(facts_from("dgx_a100_8x_a100_sxm4_80gb.xml"), dcgm={
        "rc": 226, "stdout": (FIXTURES / "dcgmi_diag_r2_8x_a100_dcgm4_memory_fail.json").read_text(), "stderr": ""}))["gpu.dcgm_diag"]
    assert (check["status"], check["measured"]) == ("fail", "1 fail, 23 pass")
    assert check["message"].startswith("memory on GPU 3: Pending page retirements together with a DBE were detected on GPU 3.")


@pytest.mark.parametrize("result, status, message", [
    ({"rc": 255, "stdout": "Error: unable to establish a connection to the specified host: localhost\n", "stderr": ""}, "fail",
     "dcgmi diag gave no result (exit code 255): no JSON document in the output: Error: unable to establish a connection"),
    ('{"DCGM GPU Diagnostic": {"runtime_error": "No GPUs found", "version": "3.3.9"}}', "fail",
     "dcgmi diag ran no test: No GPUs found"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "Inforom", "results": '
     '[{"gpu_ids": "0", "status": "Skip", "warnings": ["not supported"]}]}]}]}}', "skip",
     "dcgmi diag skipped every test (not supported), so it verified nothing"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "Diagnostic", "results": '
     '[{"gpu_ids": "0", "status": "Inconclusive"}]}]}]}}', "fail", "Diagnostic on GPU 0 (status Inconclusive)"),
    (None, "skip", "dcgmi is not installed"),
])
def test_dcgm_outcomes(result, status, message):
    check = by_id(run(facts_from("h100_80gb_hbm3_single_580_capture.xml"), dcgm=result))["gpu.dcgm_diag"]
    assert check["status"] == status
    assert check["message"].startswith(message)


# ---- nvbandwidth ------------------------------------------------------------------------------------------------

def test_parse_nvbandwidth():
    parsed = parse_nvbandwidth((FIXTURES / "nvbandwidth_h2d_8x_a100_one_slow.txt").read_text())
    assert parsed["gbps"] == {0: 24.61, 1: 24.62, 2: 24.60, 3: 12.31, 4: 24.63, 5: 24.61, 6: 24.62, 7: 24.60}
    assert (parsed["testcase"], parsed["sum"]) == ("host_to_device_memcpy_ce", 184.60)


def test_parse_nvbandwidth_readme_layout_and_na_cells():
    # The README's example (no SUM line, older versions), and a row with a cell nvbandwidth could not measure.
    text = ("Running host_to_device_memcpy_ce.\nmemcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)\n"
            "          0         1\n0      6.20     12.36\n1     11.90       N/A\n")
    assert parse_nvbandwidth(text) == {"testcase": "host_to_device_memcpy_ce", "gbps": {0: 11.90, 1: 12.36}, "sum": None}


@pytest.mark.parametrize("text, message", [
    ("", "nvbandwidth printed no host_to_device_memcpy_ce result: (no output)"),
    ("Running device_to_host_memcpy_ce.\n0 1\n0 5.0 5.0\n", "nvbandwidth printed no host_to_device_memcpy_ce result"),
    ("Running host_to_device_memcpy_ce.\nWaived: the testcase needs at least one GPU\n",
     "nvbandwidth measured nothing for host_to_device_memcpy_ce: Waived: the testcase needs at least one GPU"),
])
def test_parse_nvbandwidth_without_a_matrix(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_nvbandwidth(text)


def test_bandwidth_below_the_floor_names_the_gpu():
    a100 = "NVIDIA A100-SXM4-80GB"
    check = by_id(run(facts_from("dgx_a100_8x_a100_sxm4_80gb.xml"), thresholds=thresholds_for(a100, GPU_MODELS, {}),
                      bandwidth={"rc": 0, "stdout": (FIXTURES / "nvbandwidth_h2d_8x_a100_one_slow.txt").read_text()}))
    check = check["gpu.host_device_bandwidth"]
    assert (check["status"], check["expected"]) == ("fail", ">= 24 GB/s per GPU")
    assert check["message"].startswith("GPU 3 (00000000:4E:00.0): expected >= 24 GB/s, measured 12.31 GB/s; check that GPU's PCIe link")


def test_bandwidth_of_a_gpu_not_measured_fails():
    facts = facts_from("dgx_a100_8x_a100_sxm4_80gb.xml")
    check = by_id(run(facts, thresholds={"host_device_gbps": 10}, bandwidth=(FIXTURES / "nvbandwidth_h2d_1x_h100.txt").read_text()))
    assert check["gpu.host_device_bandwidth"]["status"] == "fail"
    assert "GPU 7 (00000000:BD:00.0): expected >= 10 GB/s, not measured" in check["gpu.host_device_bandwidth"]["message"]


def test_bandwidth_without_a_threshold_skips_and_says_what_it_measured():
    check = by_id(run(facts_from("h100_80gb_hbm3_single_580_capture.xml"),
                      bandwidth=(FIXTURES / "nvbandwidth_h2d_1x_h100.txt").read_text()))["gpu.host_device_bandwidth"]
    assert (check["status"], check["measured"]) == ("skip", "GPU 0 55.21 GB/s")
    assert "no host_device_gbps threshold for this GPU model; set one in validate_gpu_thresholds" in check["message"]


def test_bandwidth_run_that_failed():
    check = by_id(run(facts_from("h100_80gb_hbm3_single_580_capture.xml"), thresholds={"host_device_gbps": 50}, bandwidth={
        "rc": 1, "stdout": "", "stderr": "[CUDA_ERROR_NO_DEVICE] no CUDA-capable device is detected"}))["gpu.host_device_bandwidth"]
    assert check["status"] == "fail"
    assert check["message"].startswith("nvbandwidth printed no host_to_device_memcpy_ce result: [CUDA_ERROR_NO_DEVICE]")
    assert "(exit code 1)" in check["message"]


# ---- model names and thresholds ---------------------------------------------------------------------------------

@pytest.mark.parametrize("model, product, matches", [
    ("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", True),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", True),
    ("nvidia a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB", True),
    ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", True),
    ("A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", False),
    ("H100", "NVIDIA H100 80GB HBM3", True),
    ("V100-SXM2", "Tesla V100-SXM2-32GB", True),
    ("", "NVIDIA H100 80GB HBM3", False),
    ("H100", None, False),
])
def test_model_matches(model, product, matches):
    assert model_matches(model, product) is matches


@pytest.mark.parametrize("text, expected", [
    ("8 x NVIDIA A100-SXM4-80GB", (8, "NVIDIA A100-SXM4-80GB")),
    ("1x H100 NVL", (1, "H100 NVL")),
    (" 4 X L40S ", (4, "L40S")),
    ("", None),
    (None, None),
])
def test_parse_expected_gpus(text, expected):
    assert parse_expected_gpus(text) == expected


@pytest.mark.parametrize("product, gen, host_device_gbps, allreduce", [
    ("Tesla V100-SXM2-32GB", 3, 10, None),
    ("NVIDIA A100-SXM4-40GB", 4, 24, 228),
    ("NVIDIA A100-SXM4-80GB", 4, 24, 228),
    ("NVIDIA A100-PCIE-40GB", 4, None, None),
    ("NVIDIA A100 80GB PCIe", 4, 23, None),
    ("NVIDIA H100 80GB HBM3", 5, 52, 460),
    ("NVIDIA H100 PCIe", 5, None, None),
    ("NVIDIA H100 NVL", 5, 52, None),
    ("NVIDIA H200", 5, 48, 431),
    ("NVIDIA H200 NVL", 5, None, None),
    ("NVIDIA L40S", 4, None, None),
    ("NVIDIA A10G", 4, None, None),
])
def test_the_table_knows_each_model_by_its_nvidia_smi_name(product, gen, host_device_gbps, allreduce):
    thresholds = thresholds_for(product, GPU_MODELS, {})
    assert (thresholds["pcie_gen"], thresholds["pcie_width"]) == (gen, 16)
    assert thresholds.get("host_device_gbps") == host_device_gbps
    assert thresholds.get("allreduce_busbw_gbps") == allreduce


def test_thresholds_overrides_lie_over_the_table():
    overrides = {"A100-SXM4-80GB": {"host_device_gbps": 20}, "L40S": {"pcie_gen": 3}}
    assert thresholds_for("NVIDIA A100-SXM4-80GB", GPU_MODELS, overrides) == {
        "pcie_gen": 4, "pcie_width": 16, "host_device_gbps": 20, "allreduce_busbw_gbps": 228}
    assert thresholds_for("NVIDIA B200", GPU_MODELS, {"B200": {"pcie_gen": 5}}) == {"pcie_gen": 5}
    assert thresholds_for("NVIDIA GeForce RTX 3090", GPU_MODELS, overrides) == {}
    assert thresholds_for(None, GPU_MODELS, overrides) == {}
    assert GPU_MODELS["A100-SXM4-80GB"]["host_device_gbps"] == 24  # the table itself is left alone


def test_gpu_checks_leaves_its_inputs_alone():
    facts = facts_from("h100_80gb_hbm3_single_580_capture.xml", dmesg="dmesg_xid_79.txt")
    before = copy.deepcopy(facts)
    run(facts, "1 x H100", {"pcie_gen": 5})
    assert facts == before
