import pathlib

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_smi import (
    NvidiaSmiParseError,
    classify_driver_state,
    parse_enabled,
    parse_kernel_module_version,
    parse_mib,
    parse_nvidia_smi_xml,
    parse_int,
    parse_nvml_library_version,
    parse_quantity,
    parse_xid_events,
    parse_yes_no,
    scan_pci_devices,
    versions_match,
)

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "nvidia_smi"


def fixture_text(name):
    return (FIXTURES / name).read_text()


def build_sysfs(root, pci_table):
    """A fake sysfs with one /bus/pci/devices/<address>/{vendor,device,class} per line of a pci_*.txt fixture."""
    for line in fixture_text(pci_table).splitlines():
        if line.startswith("#") or not line.strip():
            continue
        address, vendor, device, pci_class = line.split()
        device_dir = root / "bus" / "pci" / "devices" / address
        device_dir.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("device", device), ("class", pci_class)):
            (device_dir / name).write_text(value + "\n")
    return root


@pytest.mark.parametrize("text, expected", [
    ("81920 MiB", 81920),
    ("24576 MiB", 24576),
    ("0 MiB", 0),
    (None, None),
    ("N/A", None),
    ("81920 GiB", None),
])
def test_parse_mib(text, expected):
    assert parse_mib(text) == expected


@pytest.mark.parametrize("text, expected", [("Enabled", True), ("Disabled", False), (None, None), ("N/A", None)])
def test_parse_enabled(text, expected):
    assert parse_enabled(text) == expected


@pytest.mark.parametrize("fixture, driver, cuda, count, first", [
    ("dgx_a100_8x_a100_sxm4_80gb.xml", "535.54.03", "12.2", 8, {
        "index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-6f1c2b0e-3a2d-5c1e-8f4b-2d7a9e0c1b11",
        "pci_bus_id": "00000000:07:00.0", "memory_total_mib": 81920, "persistence_mode": True,
        "mig_mode_current": False, "mig_mode_pending": False, "mig_device_count": 0, "fabric_state": None, "fabric_status": None}),
    ("dgx1_8x_tesla_v100_sxm2_32gb.xml", "470.161.03", "11.4", 8, {
        "index": 0, "name": "Tesla V100-SXM2-32GB", "uuid": "GPU-5d1a8c3e-27f4-b9e0-6a1d-3c8f2e7b4a01",
        "pci_bus_id": "00000000:06:00.0", "memory_total_mib": 32510, "persistence_mode": False,
        "mig_mode_current": None, "mig_mode_pending": None, "mig_device_count": 0, "fabric_state": None, "fabric_status": None}),
    ("geforce_rtx_3090_single.xml", "525.147.05", "12.0", 1, {
        "index": 0, "name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-d2c5e8a1-4b7f-3e9c-a6d0-1f8b5c2e9a47",
        "pci_bus_id": "00000000:01:00.0", "memory_total_mib": 24576, "persistence_mode": True,
        "mig_mode_current": None, "mig_mode_pending": None, "mig_device_count": 0, "fabric_state": None, "fabric_status": None}),
    ("hgx_h100_2x_h100_80gb_hbm3_mig.xml", "535.129.03", "12.2", 2, {
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-3c8e1f4a-9b2d-6e7f-a1c3-5d4b8e2f0a19",
        "pci_bus_id": "00000000:18:00.0", "memory_total_mib": 81559, "persistence_mode": True,
        "mig_mode_current": True, "mig_mode_pending": True, "mig_device_count": 2, "fabric_state": "Completed", "fabric_status": "Success"}),
    ("h100_80gb_hbm3_single_580_capture.xml", "580.159.04", "13.0", 1, {
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000-1111-2222-3333-444444444444",
        "pci_bus_id": "00000000:00:06.0", "memory_total_mib": 81559, "persistence_mode": True,
        "mig_mode_current": False, "mig_mode_pending": False, "mig_device_count": 0, "fabric_state": None, "fabric_status": None}),
])
def test_parse_nvidia_smi_xml_reads_each_model(fixture, driver, cuda, count, first):
    report = parse_nvidia_smi_xml(fixture_text(fixture))
    assert report["driver_version"] == driver
    assert report["cuda_version"] == cuda
    assert len(report["gpus"]) == count
    assert {key: report["gpus"][0][key] for key in first} == first
    assert [gpu["index"] for gpu in report["gpus"]] == list(range(count))


NOT_REPORTED = {
    "pcie": {"gen_current": None, "gen_max": None, "width_current": None, "width_max": None},
    "retired_pages": {"single_bit": None, "double_bit": None, "pending": None},
    "remapped_rows": {"correctable": None, "uncorrectable": None, "pending": None, "failure": None},
}
ECC_ZERO = {"mode_current": True, "volatile_uncorrectable": 0, "aggregate_uncorrectable": 0,
            "volatile_correctable": 0, "aggregate_correctable": 0}
ECC_UNCOUNTED = {"mode_current": True, "volatile_uncorrectable": None, "aggregate_uncorrectable": None,
                 "volatile_correctable": None, "aggregate_correctable": None}


@pytest.mark.parametrize("fixture, health", [
    ("h100_80gb_hbm3_single_580_capture.xml", {
        "performance_state": "P0", "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16},
        "ecc": ECC_ZERO, "retired_pages": NOT_REPORTED["retired_pages"],
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "clock_event_reasons_active": ["gpu_idle"]}),
    ("h100_80gb_hbm3_degraded_pcie_link.xml", {
        "performance_state": "P0", "pcie": {"gen_current": 3, "gen_max": 5, "width_current": 8, "width_max": 16},
        "ecc": ECC_ZERO, "retired_pages": NOT_REPORTED["retired_pages"],
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "clock_event_reasons_active": ["gpu_idle"]}),
    # Volta: single/double-bit ECC counters; the trimmed report has no link, retirement or clock reasons.
    ("dgx1_8x_tesla_v100_sxm2_32gb.xml", dict(NOT_REPORTED, performance_state="P0", ecc=ECC_ZERO, clock_event_reasons_active=None)),
    # An idle consumer board: Gen1 of Gen4, no ECC at all.
    ("geforce_rtx_3090_single.xml", dict(
        NOT_REPORTED, performance_state="P8", pcie={"gen_current": 1, "gen_max": 4, "width_current": 16, "width_max": 16},
        ecc={"mode_current": None, "volatile_uncorrectable": None, "aggregate_uncorrectable": None,
             "volatile_correctable": None, "aggregate_correctable": None}, clock_event_reasons_active=None)),
    ("dgx_a100_8x_a100_sxm4_80gb.xml", dict(NOT_REPORTED, performance_state="P0", ecc=ECC_UNCOUNTED, clock_event_reasons_active=None)),
])
def test_parse_nvidia_smi_xml_reads_health(fixture, health):
    gpu = parse_nvidia_smi_xml(fixture_text(fixture))["gpus"][0]
    assert {key: gpu[key] for key in health} == health


def _capture_with(*edits):
    text = fixture_text("h100_80gb_hbm3_single_580_capture.xml")
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    return parse_nvidia_smi_xml(text)["gpus"][0]


def test_parse_nvidia_smi_xml_sums_every_uncorrectable_counter():
    gpu = _capture_with(
        ("<volatile>\n\t\t\t\t<sram_correctable>0</sram_correctable>\n\t\t\t\t<sram_uncorrectable_parity>0",
         "<volatile>\n\t\t\t\t<sram_correctable>7</sram_correctable>\n\t\t\t\t<sram_uncorrectable_parity>1"),
        ("<sram_uncorrectable_secded>0</sram_uncorrectable_secded>\n\t\t\t\t<dram_correctable>0</dram_correctable>\n"
         "\t\t\t\t<dram_uncorrectable>0</dram_uncorrectable>\n\t\t\t</volatile>",
         "<sram_uncorrectable_secded>2</sram_uncorrectable_secded>\n\t\t\t\t<dram_correctable>5</dram_correctable>\n"
         "\t\t\t\t<dram_uncorrectable>4</dram_uncorrectable>\n\t\t\t</volatile>"))
    assert gpu["ecc"] == {"mode_current": True, "volatile_uncorrectable": 7, "aggregate_uncorrectable": 0,
                          "volatile_correctable": 12, "aggregate_correctable": 0}


# The layout of drivers 470 to 575 on Ampere and Turing: one sram_uncorrectable counter; retired pages with counts.
AMPERE_ECC = """<nvidia_smi_log><gpu id="00000000:01:00.0">
<ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
<ecc_errors>
<volatile><sram_correctable>3</sram_correctable><sram_uncorrectable>1</sram_uncorrectable>
<dram_correctable>2</dram_correctable><dram_uncorrectable>N/A</dram_uncorrectable></volatile>
<aggregate><sram_correctable>9</sram_correctable><sram_uncorrectable>1</sram_uncorrectable>
<dram_correctable>4</dram_correctable><dram_uncorrectable>6</dram_uncorrectable></aggregate>
</ecc_errors>
<retired_pages>
<multiple_single_bit_retirement><retired_count>2</retired_count><retired_pagelist></retired_pagelist></multiple_single_bit_retirement>
<double_bit_retirement><retired_count>1</retired_count><retired_pagelist></retired_pagelist></double_bit_retirement>
<pending_blacklist>No</pending_blacklist><pending_retirement>Yes</pending_retirement>
</retired_pages>
<remapped_rows>N/A</remapped_rows>
</gpu></nvidia_smi_log>"""


def test_parse_nvidia_smi_xml_single_sram_counter_retired_pages_and_unreported_rows():
    gpu = parse_nvidia_smi_xml(AMPERE_ECC)["gpus"][0]
    assert gpu["ecc"] == {"mode_current": True, "volatile_uncorrectable": 1, "aggregate_uncorrectable": 7,
                          "volatile_correctable": 5, "aggregate_correctable": 13}
    assert gpu["retired_pages"] == {"single_bit": 2, "double_bit": 1, "pending": True}
    assert gpu["remapped_rows"] == NOT_REPORTED["remapped_rows"]


def test_parse_nvidia_smi_xml_volta_double_bit_is_uncorrectable():
    text = fixture_text("dgx1_8x_tesla_v100_sxm2_32gb.xml")
    # The first GPU's volatile double-bit block: device memory 2, register file 1, total 3.
    start = text.index("<double_bit>")
    block = text[start:text.index("</double_bit>", start)]
    edited = block.replace("<device_memory>0</device_memory>", "<device_memory>2</device_memory>", 1) \
        .replace("<register_file>0</register_file>", "<register_file>1</register_file>", 1) \
        .replace("<total>0</total>", "<total>3</total>", 1)
    gpus = parse_nvidia_smi_xml(text[:start] + edited + text[start + len(block):])["gpus"]
    assert gpus[0]["ecc"]["volatile_uncorrectable"] == 3
    assert gpus[0]["ecc"]["aggregate_uncorrectable"] == 0
    assert gpus[1]["ecc"]["volatile_uncorrectable"] == 0


def test_parse_nvidia_smi_xml_row_remapping_pending_and_failed():
    gpu = _capture_with(("<remapped_row_unc>0</remapped_row_unc>", "<remapped_row_unc>3</remapped_row_unc>"),
                        ("<remapped_row_pending>No</remapped_row_pending>", "<remapped_row_pending>Yes</remapped_row_pending>"),
                        ("<remapped_row_failure>No</remapped_row_failure>", "<remapped_row_failure>Yes</remapped_row_failure>"))
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 3, "pending": True, "failure": True}


@pytest.mark.parametrize("name", ["clocks_event_reason", "clocks_throttle_reason"])
def test_parse_nvidia_smi_xml_active_clock_reasons_under_either_name(name):
    edits = [("<clocks_event_reason_hw_thermal_slowdown>Not Active", "<clocks_event_reason_hw_thermal_slowdown>Active"),
             ("<clocks_event_reason_sw_power_cap>Not Active", "<clocks_event_reason_sw_power_cap>Active")]
    if name == "clocks_throttle_reason":  # drivers before 535 name the block and its children so
        edits.append(("clocks_event_reason", "clocks_throttle_reason"))
    gpu = _capture_with(*edits)
    assert gpu["clock_event_reasons_active"] == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]


@pytest.mark.parametrize("device, host, link, expected", [
    ("5", "4", "5", 4),       # a Gen5 GPU in a Gen4 slot
    ("5", "N/A", "5", 5),     # a VM hides the slot's maximum
    ("N/A", "N/A", "4", 4),   # drivers that print only max_link_gen
])
def test_parse_nvidia_smi_xml_link_maximum_is_the_lowest_reported_cap(device, host, link, expected):
    gpu = _capture_with(("<max_device_link_gen>5<", "<max_device_link_gen>%s<" % device),
                        ("<max_host_link_gen>N/A<", "<max_host_link_gen>%s<" % host),
                        ("<max_link_gen>5<", "<max_link_gen>%s<" % link))
    assert gpu["pcie"]["gen_max"] == expected


@pytest.mark.parametrize("text, expected", [("16x", 16), ("8x", 8), ("5", 5), (None, None), ("N/A", None), ("x", None)])
def test_parse_int(text, expected):
    assert parse_int(text) == expected


@pytest.mark.parametrize("text, expected", [("Yes", True), ("No", False), (None, None), ("N/A", None)])
def test_parse_yes_no(text, expected):
    assert parse_yes_no(text) is expected


def test_parse_xid_events_from_dmesg():
    assert parse_xid_events(fixture_text("dmesg_xid_79.txt")) == [
        {"pci": "0000:00:06", "xid": 79, "text": "pid=48211, name=python3, GPU has fallen off the bus."},
        {"pci": "0000:00:06", "xid": 154, "text": "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"},
    ]


@pytest.mark.parametrize("line, expected", [
    # journalctl -k, an old driver without pid and name
    ("Dec  6 17:49:03 host kernel: [ 8659.726062] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
     {"pci": "0000:01:00", "xid": 79, "text": "GPU has fallen off the bus."}),
    ("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception",
     {"pci": "0000:cb:00", "xid": 13, "text": "pid='<unknown>', name=<unknown>, Graphics SM Warp Exception"}),
    ("NVRM: Xid (0000:03:00): 31, Ch 00000010", {"pci": "0000:03:00", "xid": 31, "text": "Ch 00000010"}),
])
def test_parse_xid_events_line_layouts(line, expected):
    assert parse_xid_events(line) == [expected]


@pytest.mark.parametrize("text", [None, "", "NVRM: GPU 0000:00:06.0: GPU has fallen off the bus.",
                                  "NVRM: Xid (PCI:0000:66:00): abc, pid=2280636"])
def test_parse_xid_events_without_xid(text):
    assert parse_xid_events(text) == []


def test_parse_nvidia_smi_xml_keeps_nvidia_smi_order_and_bus_ids():
    gpus = parse_nvidia_smi_xml(fixture_text("dgx_a100_8x_a100_sxm4_80gb.xml"))["gpus"]
    assert [gpu["pci_bus_id"] for gpu in gpus] == [
        "00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0",
        "00000000:87:00.0", "00000000:90:00.0", "00000000:B7:00.0", "00000000:BD:00.0"]
    assert len({gpu["uuid"] for gpu in gpus}) == 8


def test_parse_nvidia_smi_xml_mig_pending_differs_from_current():
    second = parse_nvidia_smi_xml(fixture_text("hgx_h100_2x_h100_80gb_hbm3_mig.xml"))["gpus"][1]
    assert (second["mig_mode_current"], second["mig_mode_pending"], second["mig_device_count"]) == (False, True, 0)


def test_parse_nvidia_smi_xml_without_cuda_version_element():
    report = parse_nvidia_smi_xml("<nvidia_smi_log><driver_version>390.157</driver_version><attached_gpus>0</attached_gpus></nvidia_smi_log>")
    assert report == {"driver_version": "390.157", "cuda_version": None, "gpus": []}


def test_parse_nvidia_smi_xml_falls_back_to_gpu_id_attribute():
    report = parse_nvidia_smi_xml('<nvidia_smi_log><gpu id="00000000:3B:00.0"><product_name>X</product_name></gpu></nvidia_smi_log>')
    assert report["gpus"][0]["pci_bus_id"] == "00000000:3B:00.0"
    assert report["gpus"][0]["memory_total_mib"] is None


@pytest.mark.parametrize("text, message", [
    (fixture_text("nvidia_smi_truncated.xml"), "not well-formed XML"),
    (fixture_text("nvidia_smi_driver_not_loaded.txt"), "not well-formed XML"),
    ("", "not well-formed XML"),
    ("<?xml version='1.0'?><html><body/></html>", "root element is <html>, expected <nvidia_smi_log>"),
])
def test_parse_nvidia_smi_xml_rejects_what_is_not_a_report(text, message):
    with pytest.raises(NvidiaSmiParseError, match=message):
        parse_nvidia_smi_xml(text)


@pytest.mark.parametrize("fixture, expected", [
    ("proc_driver_nvidia_version_proprietary.txt", "535.54.03"),
    ("proc_driver_nvidia_version_open.txt", "535.129.03"),
])
def test_parse_kernel_module_version(fixture, expected):
    assert parse_kernel_module_version(fixture_text(fixture)) == expected


@pytest.mark.parametrize("text", [None, "", "GCC version:  gcc version 12.2.0\n"])
def test_parse_kernel_module_version_without_a_version(text):
    assert parse_kernel_module_version(text) is None


@pytest.mark.parametrize("fixture, expected", [
    ("nvidia_smi_version_mismatch.txt", "535.183"),
    ("nvidia_smi_version_mismatch_no_library_line.txt", None),
    ("nvidia_smi_driver_not_loaded.txt", None),
])
def test_parse_nvml_library_version(fixture, expected):
    assert parse_nvml_library_version(fixture_text(fixture)) == expected


@pytest.mark.parametrize("first, second, expected", [
    ("535.183", "535.183.01", True),
    ("535.54.03", "535.54.03", True),
    ("535.183", "535.161.08", False),
    ("550.163.01", "535.261.03", False),
])
def test_versions_match(first, second, expected):
    assert versions_match(first, second) is expected
    assert versions_match(first=second, second=first) is expected


@pytest.mark.parametrize("pci_table, gpu_addresses, gpu_device_ids, nvswitch_addresses", [
    ("pci_dgx_a100.txt",
     ["0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0", "0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"],
     {"0x20b2"}, ["0000:c1:00.0", "0000:c2:00.0", "0000:c3:00.0", "0000:c4:00.0", "0000:c5:00.0", "0000:c6:00.0"]),
    ("pci_dgx1_v100.txt",
     ["0000:06:00.0", "0000:07:00.0", "0000:0a:00.0", "0000:0b:00.0", "0000:85:00.0", "0000:86:00.0", "0000:89:00.0", "0000:8a:00.0"],
     {"0x1db5"}, []),
    ("pci_hgx_h100.txt", ["0000:18:00.0", "0000:2a:00.0"], {"0x2330"},
     ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]),
    ("pci_desktop_rtx_3090.txt", ["0000:01:00.0"], {"0x2204"}, []),
    ("pci_vm_without_nvidia.txt", [], set(), []),
])
def test_scan_pci_devices(tmp_path, pci_table, gpu_addresses, gpu_device_ids, nvswitch_addresses):
    gpus, nvswitches = scan_pci_devices(str(build_sysfs(tmp_path, pci_table)))
    assert [gpu["address"] for gpu in gpus] == gpu_addresses
    assert {gpu["device_id"] for gpu in gpus} == gpu_device_ids
    assert [switch["address"] for switch in nvswitches] == nvswitch_addresses
    assert all(switch["class"] == "0x068000" for switch in nvswitches)


def test_scan_pci_devices_reports_class_of_consumer_and_datacenter_gpus(tmp_path):
    gpus = scan_pci_devices(str(build_sysfs(tmp_path, "pci_desktop_rtx_3090.txt")))[0]
    assert gpus == [{"address": "0000:01:00.0", "device_id": "0x2204", "class": "0x030000"}]


def test_scan_pci_devices_without_pci_bus(tmp_path):
    assert scan_pci_devices(str(tmp_path)) == ([], [])


def test_scan_pci_devices_skips_unreadable_entries(tmp_path):
    build_sysfs(tmp_path, "pci_desktop_rtx_3090.txt")
    broken = tmp_path / "bus" / "pci" / "devices" / "0000:02:00.0"
    broken.mkdir()
    (broken / "vendor").write_text("0x10de\n")  # no class file: a device being removed
    gpus = scan_pci_devices(str(tmp_path))[0]
    assert [gpu["address"] for gpu in gpus] == ["0000:01:00.0"]


MISMATCH = fixture_text("nvidia_smi_version_mismatch.txt")
MISMATCH_OLD = fixture_text("nvidia_smi_version_mismatch_no_library_line.txt")
NOT_LOADED = fixture_text("nvidia_smi_driver_not_loaded.txt")
NO_DEVICES = fixture_text("nvidia_smi_no_devices.txt")


@pytest.mark.parametrize("observed, state, reboot, library_version", [
    # nvidia-smi answered: ok, even where sysfs shows no GPU (a container without the host's /sys).
    (dict(pci_gpu_count=8, nvidia_smi_found=True, nvidia_smi_rc=0, kernel_module_version="535.54.03",
          reported_driver_version="535.54.03"), "ok", False, "535.54.03"),
    (dict(pci_gpu_count=0, nvidia_smi_found=True, nvidia_smi_rc=0, reported_driver_version="535.54.03"), "ok", False, "535.54.03"),
    # nvidia-smi answered with a driver version other than the loaded module's.
    (dict(pci_gpu_count=8, nvidia_smi_found=True, nvidia_smi_rc=0, kernel_module_version="535.129.03",
          reported_driver_version="535.54.03"), "version_mismatch", True, "535.54.03"),
    (dict(pci_gpu_count=0, nvidia_smi_found=False), "no_gpu", False, None),
    # The driver packages in a container on a host without a GPU: no GPU wins over the driver's complaint.
    (dict(pci_gpu_count=0, nvidia_smi_found=True, nvidia_smi_rc=9, nvidia_smi_output=NOT_LOADED), "no_gpu", False, None),
    (dict(pci_gpu_count=1, nvidia_smi_found=False), "not_installed", False, None),
    (dict(pci_gpu_count=1, nvidia_smi_found=False, kernel_module_version="535.54.03"), "not_installed", False, None),
    (dict(pci_gpu_count=1, nvidia_smi_found=True, nvidia_smi_rc=9, nvidia_smi_output=NOT_LOADED), "not_loaded", False, None),
    (dict(pci_gpu_count=1, nvidia_smi_found=True, nvidia_smi_rc=9, nvidia_smi_output=NOT_LOADED, nouveau_loaded=True),
     "not_loaded", True, None),
    # Exit code alone, output lost.
    (dict(pci_gpu_count=1, nvidia_smi_found=True, nvidia_smi_rc=9, nvidia_smi_output="", kernel_module_version=None), "not_loaded", False, None),
    (dict(pci_gpu_count=8, nvidia_smi_found=True, nvidia_smi_rc=18, nvidia_smi_output=MISMATCH, kernel_module_version="535.161.08"),
     "version_mismatch", True, "535.183"),
    (dict(pci_gpu_count=8, nvidia_smi_found=True, nvidia_smi_rc=18, nvidia_smi_output=MISMATCH_OLD, kernel_module_version="535.161.08"),
     "version_mismatch", True, None),
    (dict(pci_gpu_count=8, nvidia_smi_found=True, nvidia_smi_rc=18, nvidia_smi_output=""), "version_mismatch", True, None),
    (dict(pci_gpu_count=1, nvidia_smi_found=True, nvidia_smi_rc=6, nvidia_smi_output=NO_DEVICES, kernel_module_version="535.54.03"),
     "error", False, None),
    # Module not loaded and an error nvidia-smi does not explain: the missing module is the cause to fix first.
    (dict(pci_gpu_count=1, nvidia_smi_found=True, nvidia_smi_rc=6, nvidia_smi_output=NO_DEVICES), "not_loaded", False, None),
])
def test_classify_driver_state(observed, state, reboot, library_version):
    result = classify_driver_state(**observed)
    assert result["driver_state"] == state
    assert result["reboot_required"] is reboot
    assert result["library_version"] == library_version
    assert (result["message"] is None) == (state == "ok")


def test_classify_version_mismatch_message_names_both_versions():
    result = classify_driver_state(pci_gpu_count=8, nvidia_smi_found=True, nvidia_smi_rc=18, nvidia_smi_output=MISMATCH,
                                   kernel_module_version="535.161.08")
    assert result["message"] == ("the loaded kernel module and the installed user-space driver differ "
                                 "(kernel module 535.161.08, user-space library 535.183); reboot to load the installed driver")


def test_classify_not_installed_message_counts_gpus_and_names_loaded_module():
    result = classify_driver_state(pci_gpu_count=8, nvidia_smi_found=False, kernel_module_version="535.54.03")
    assert result["message"] == ("8 NVIDIA GPU(s) on PCI but no nvidia-smi binary (kernel module 535.54.03 is loaded: install the "
                                 "nvidia-smi package of that version); install the NVIDIA driver")


def test_classify_error_carries_nvidia_smi_output():
    result = classify_driver_state(pci_gpu_count=1, nvidia_smi_found=True, nvidia_smi_rc=6, nvidia_smi_output=NO_DEVICES,
                                   kernel_module_version="535.54.03")
    assert result["message"] == "nvidia-smi exited with 6: No devices were found"


def test_parse_nvidia_smi_xml_lists_the_processes_on_each_gpu():
    idle = parse_nvidia_smi_xml((FIXTURES / "h100_80gb_hbm3_single_580_capture.xml").read_text())
    busy = parse_nvidia_smi_xml((FIXTURES / "h100_80gb_hbm3_single_busy.xml").read_text())
    assert idle["gpus"][0]["processes"] == []
    assert busy["gpus"][0]["processes"] == [{"pid": 23817, "name": "python3", "type": "C", "used_memory_mib": 40536}]


IDLE_H100_TELEMETRY = {
    "temperature": {"gpu_celsius": 35.0, "memory_celsius": 37.0},
    "power": {"draw_watts": 71.61, "limit_watts": 700.0},
    "clocks": {"sm_mhz": 345.0, "memory_mhz": 2619.0, "sm_max_mhz": 1980.0, "memory_max_mhz": 2619.0},
    "utilization": {"gpu_percent": 0.0, "memory_percent": 0.0},
    "memory_used_mib": 0,
}
UNREPORTED_TELEMETRY = {
    "temperature": {"gpu_celsius": None, "memory_celsius": None},
    "clocks": {"sm_mhz": None, "memory_mhz": None, "sm_max_mhz": None, "memory_max_mhz": None},
    "utilization": {"gpu_percent": None, "memory_percent": None},
}


@pytest.mark.parametrize("fixture, telemetry", [
    ("h100_80gb_hbm3_single_580_capture.xml", IDLE_H100_TELEMETRY),
    # 580: average_power_draw (692.53) rather than instant_power_draw (651.70); current_power_limit.
    ("h200_580_busy_capture.xml", {
        "temperature": {"gpu_celsius": 67.0, "memory_celsius": 52.0},
        "power": {"draw_watts": 692.53, "limit_watts": 700.0},
        "clocks": {"sm_mhz": 1425.0, "memory_mhz": 3201.0, "sm_max_mhz": 1980.0, "memory_max_mhz": 3201.0},
        "utilization": {"gpu_percent": 100.0, "memory_percent": 23.0},
        "memory_used_mib": 1011}),
    # 470 (schema v11): power_draw and enforced_power_limit under power_readings.
    ("dgx1_8x_tesla_v100_sxm2_32gb.xml", dict(UNREPORTED_TELEMETRY, power={"draw_watts": 42.17, "limit_watts": 300.0},
                                              memory_used_mib=0)),
    # 535 with the draw trimmed: the limit alone.
    ("dgx_a100_8x_a100_sxm4_80gb.xml", dict(UNREPORTED_TELEMETRY, power={"draw_watts": None, "limit_watts": 400.0},
                                            memory_used_mib=5)),
])
def test_parse_nvidia_smi_xml_reads_telemetry(fixture, telemetry):
    gpu = parse_nvidia_smi_xml(fixture_text(fixture))["gpus"][0]
    assert {key: gpu[key] for key in telemetry} == telemetry


def test_parse_nvidia_smi_xml_lists_every_clock_reason_with_its_state():
    gpu = parse_nvidia_smi_xml(fixture_text("h200_580_busy_capture.xml"))["gpus"][0]
    assert gpu["clock_event_reasons"] == {
        "gpu_idle": False, "applications_clocks_setting": False, "sw_power_cap": True, "hw_slowdown": False,
        "hw_thermal_slowdown": False, "hw_power_brake_slowdown": False, "sync_boost": False,
        "sw_thermal_slowdown": False, "display_clocks_setting": False}
    assert gpu["clock_event_reasons_active"] == ["sw_power_cap"]


@pytest.mark.parametrize("text, unit, expected", [
    ("67 C", "C", 67.0), ("-8 C", "C", -8.0), ("692.53 W", "W", 692.53), ("1425 MHz", "MHz", 1425.0),
    ("100 %", "%", 100.0), ("N/A", "W", None), (None, "W", None), ("692.53 W", "C", None), ("Unknown Error", "C", None),
])
def test_parse_quantity(text, unit, expected):
    assert parse_quantity(text, unit) == expected
