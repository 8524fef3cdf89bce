# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers that read NVIDIA GPU state: nvidia-smi XML, sysfs PCI entries, the driver's version files and the
kernel log's Xid lines.

Nothing here runs a command or needs Ansible, so modules, filters and tests can share it.
"""

from __future__ import annotations

import os
import re
from xml.etree import ElementTree

NVIDIA_PCI_VENDOR = 0x10DE
# PCI base class + subclass (the upper 16 bits of the 24-bit class code in sysfs).
GPU_PCI_CLASSES = (0x0300, 0x0302)  # VGA compatible controller, 3D controller
NVSWITCH_PCI_CLASS = 0x0680  # "other bridge": how NVSwitch chips enumerate on DGX/HGX boards

DRIVER_STATES = ("ok", "no_gpu", "not_installed", "not_loaded", "version_mismatch", "error")

NOT_LOADED_TEXT = "couldn't communicate with the NVIDIA driver"
VERSION_MISMATCH_TEXT = "Driver/library version mismatch"
# nvidia-smi exits with the NVML error code that stopped it.
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

_NOT_AVAILABLE = ("", "N/A", "None", "Unknown Error", "[N/A]")
_MIB_VALUE = re.compile(r"^\s*(\d+)\s*MiB\s*$")
_KERNEL_MODULE_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")
_NVML_LIBRARY_VERSION = re.compile(r"NVML library version:\s*(\d+(?:\.\d+)+)")
_INTEGER = re.compile(r"^\s*(\d+)\s*x?\s*$")  # '5', '16x'
# '67 C', '692.53 W', '1425 MHz', '100 %': a number and the unit nvidia-smi prints after it.
_QUANTITY = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(C|W|MHz|%)\s*$")
# 'NVRM: Xid (PCI:0000:07:00): 79, pid=1234, name=python, GPU has fallen off the bus.'; older drivers leave out
# pid and name, some print the address without 'PCI:' or with a function number.
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+(?:\.[0-9A-Fa-f]+)?)\): (\d+),?\s*(.*)$")
# The clock event reasons; drivers before 535 call them clocks_throttle_reasons/clocks_throttle_reason_*.
_CLOCK_REASON_BLOCKS = (("clocks_event_reasons", "clocks_event_reason_"), ("clocks_throttle_reasons", "clocks_throttle_reason_"))


class NvidiaSmiParseError(ValueError):
    """nvidia-smi printed something that is not the XML report it documents."""


def text_value(element, path):
    """Stripped text at `path` below `element`, or None when missing or reported as N/A."""
    found = element.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return None if text in _NOT_AVAILABLE else text


def parse_mib(text):
    """'81920 MiB' -> 81920; None for N/A or anything that is not a MiB amount."""
    if text is None:
        return None
    match = _MIB_VALUE.match(text)
    return int(match.group(1)) if match else None


def parse_enabled(text):
    """'Enabled' -> True, 'Disabled' -> False, None for N/A (the GPU does not support the feature)."""
    if text == "Enabled":
        return True
    if text == "Disabled":
        return False
    return None


def parse_int(text):
    """'5' -> 5, '16x' -> 16; None for N/A or anything that is not a count."""
    match = _INTEGER.match(text) if text is not None else None
    return int(match.group(1)) if match else None


def parse_quantity(text, unit):
    """'692.53 W' with unit 'W' -> 692.53, '67 C' with 'C' -> 67.0; None for N/A or another unit."""
    match = _QUANTITY.match(text) if text is not None else None
    return float(match.group(1)) if match and match.group(2) == unit else None


def parse_yes_no(text):
    """'Yes' -> True, 'No' -> False, None for N/A."""
    return {"Yes": True, "No": False}.get(text)


def _sum(values):
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _parse_pcie(gpu):
    """Link generation and width, current and achievable maximum.

    The maximum generation is the lowest of what is reported: max_link_gen (NVML's "possible with this device and
    system"), max_device_link_gen (the GPU's own) and max_host_link_gen (the slot's, often N/A in VMs). Each one caps
    the link, so the lowest is what the link can reach; a Gen5 GPU in a Gen4 slot has a Gen4 maximum.
    """
    link = gpu.find("pci/pci_gpu_link_info")
    if link is None:
        return {"gen_current": None, "gen_max": None, "width_current": None, "width_max": None}
    caps = [parse_int(text_value(link, "pcie_gen/" + name)) for name in ("max_link_gen", "max_device_link_gen", "max_host_link_gen")]
    caps = [cap for cap in caps if cap is not None]
    current = parse_int(text_value(link, "pcie_gen/current_link_gen"))
    return {
        "gen_current": current if current is not None else parse_int(text_value(link, "pcie_gen/device_current_link_gen")),
        "gen_max": min(caps) if caps else None,
        "width_current": parse_int(text_value(link, "link_widths/current_link_width")),
        "width_max": parse_int(text_value(link, "link_widths/max_link_width")),
    }


def _bit_counter(block):
    """Volta and older: <single_bit>/<double_bit> with one counter per memory and a <total>."""
    if block is None:
        return None
    total = parse_int(text_value(block, "total"))
    return total if total is not None else _sum(parse_int(text_value(block, child.tag)) for child in block)


def _ecc_counts(block):
    """(uncorrectable, correctable) of an ecc_errors/volatile or /aggregate block.

    Ampere and later count sram_* and dram_* errors; 580-series drivers split sram_uncorrectable into _parity and
    _secded. Every *uncorrectable* child is a distinct counter, so they are summed; Volta's double_bit errors are the
    uncorrectable ones, single_bit the corrected ones.
    """
    if block is None:
        return None, None
    if block.find("double_bit") is not None or block.find("single_bit") is not None:
        return _bit_counter(block.find("double_bit")), _bit_counter(block.find("single_bit"))
    uncorrectable = [parse_int(text_value(block, child.tag)) for child in block if "uncorrectable" in child.tag]
    correctable = [parse_int(text_value(block, child.tag)) for child in block
                   if child.tag.endswith("correctable") and "uncorrectable" not in child.tag]
    return _sum(uncorrectable), _sum(correctable)


def _parse_ecc(gpu):
    volatile_uncorrectable, volatile_correctable = _ecc_counts(gpu.find("ecc_errors/volatile"))
    aggregate_uncorrectable, aggregate_correctable = _ecc_counts(gpu.find("ecc_errors/aggregate"))
    return {
        "mode_current": parse_enabled(text_value(gpu, "ecc_mode/current_ecc")),
        "volatile_uncorrectable": volatile_uncorrectable,
        "aggregate_uncorrectable": aggregate_uncorrectable,
        "volatile_correctable": volatile_correctable,
        "aggregate_correctable": aggregate_correctable,
    }


def _parse_retired_pages(gpu):
    """Page retirement (Volta and Turing; N/A from Ampere on, which remaps rows instead)."""
    # Drivers print pending_retirement, older ones pending_blacklist, current ones both.
    pending = [parse_yes_no(text_value(gpu, "retired_pages/" + name)) for name in ("pending_retirement", "pending_blacklist")]
    known = [value for value in pending if value is not None]
    return {
        "single_bit": parse_int(text_value(gpu, "retired_pages/multiple_single_bit_retirement/retired_count")),
        "double_bit": parse_int(text_value(gpu, "retired_pages/double_bit_retirement/retired_count")),
        "pending": any(known) if known else None,
    }


def _parse_remapped_rows(gpu):
    """Row remapping (Ampere and later); the whole element reads N/A on older GPUs and with MIG on."""
    return {
        "correctable": parse_int(text_value(gpu, "remapped_rows/remapped_row_corr")),
        "uncorrectable": parse_int(text_value(gpu, "remapped_rows/remapped_row_unc")),
        "pending": parse_yes_no(text_value(gpu, "remapped_rows/remapped_row_pending")),
        "failure": parse_yes_no(text_value(gpu, "remapped_rows/remapped_row_failure")),
    }


def _clock_reasons(gpu):
    """Every clock event reason the report lists, short name -> whether it is active ({'gpu_idle': True, ...});
    None where the report has none."""
    for block_name, prefix in _CLOCK_REASON_BLOCKS:
        block = gpu.find(block_name)
        if block is not None:
            return {child.tag[len(prefix):]: (child.text or "").strip() == "Active"
                    for child in block if child.tag.startswith(prefix)}
    return None


def _active_clock_reasons(gpu):
    """Short names of the clock event reasons reported 'Active' (['gpu_idle']); None where none are reported."""
    reasons = _clock_reasons(gpu)
    return None if reasons is None else [name for name, active in reasons.items() if active]


def _first_quantity(gpu, paths, unit):
    """The first of `paths` that holds a value in `unit`: elements were renamed across driver schemas."""
    for path in paths:
        value = parse_quantity(text_value(gpu, path), unit)
        if value is not None:
            return value
    return None


# Power: 580-series drivers print average_power_draw and instant_power_draw, 535 power_draw under gpu_power_readings,
# 470 (schema v11) power_draw and power_limit under power_readings; the limit in force is current_power_limit (535 on)
# or enforced_power_limit (before), power_limit being the one requested.
_POWER_DRAW = tuple(block + "/" + name for block in ("gpu_power_readings", "power_readings")
                    for name in ("power_draw", "average_power_draw", "instant_power_draw"))
_POWER_LIMIT = tuple(block + "/" + name for block in ("gpu_power_readings", "power_readings")
                     for name in ("current_power_limit", "enforced_power_limit", "power_limit"))


def _parse_telemetry(gpu):
    """What changes from second to second: temperatures, power, clocks, utilisation, memory in use."""
    return {
        "temperature": {"gpu_celsius": parse_quantity(text_value(gpu, "temperature/gpu_temp"), "C"),
                        "memory_celsius": parse_quantity(text_value(gpu, "temperature/memory_temp"), "C")},
        "power": {"draw_watts": _first_quantity(gpu, _POWER_DRAW, "W"),
                  "limit_watts": _first_quantity(gpu, _POWER_LIMIT, "W")},
        "clocks": {"sm_mhz": parse_quantity(text_value(gpu, "clocks/sm_clock"), "MHz"),
                   "memory_mhz": parse_quantity(text_value(gpu, "clocks/mem_clock"), "MHz"),
                   "sm_max_mhz": parse_quantity(text_value(gpu, "max_clocks/sm_clock"), "MHz"),
                   "memory_max_mhz": parse_quantity(text_value(gpu, "max_clocks/mem_clock"), "MHz")},
        "utilization": {"gpu_percent": parse_quantity(text_value(gpu, "utilization/gpu_util"), "%"),
                        "memory_percent": parse_quantity(text_value(gpu, "utilization/memory_util"), "%")},
        "memory_used_mib": parse_mib(text_value(gpu, "fb_memory_usage/used")),
        "clock_event_reasons": _clock_reasons(gpu),
    }


def _parse_processes(gpu):
    """The processes using the GPU (<processes><process_info>: pid, type C/G/C+G, process_name, used_memory)."""
    block = gpu.find("processes")
    if block is None:
        return []
    return [{"pid": parse_int(text_value(info, "pid")), "name": text_value(info, "process_name"),
             "type": text_value(info, "type"), "used_memory_mib": parse_mib(text_value(info, "used_memory"))}
            for info in block.findall("process_info")]


def _parse_mig_devices(gpu):
    """The GPU's MIG devices (<mig_devices><mig_device>: index, gpu_instance_id, compute_instance_id, its own frame
    buffer and multiprocessor count); [] without MIG."""
    block = gpu.find("mig_devices")
    if block is None:
        return []
    return [{"index": parse_int(text_value(device, "index")),
             "gpu_instance_id": parse_int(text_value(device, "gpu_instance_id")),
             "compute_instance_id": parse_int(text_value(device, "compute_instance_id")),
             "multiprocessor_count": parse_int(text_value(device, "device_attributes/shared/multiprocessor_count")),
             "memory_total_mib": parse_mib(text_value(device, "fb_memory_usage/total")),
             "memory_used_mib": parse_mib(text_value(device, "fb_memory_usage/used"))}
            for device in block.findall("mig_device")]


def _parse_gpu(index, gpu):
    mig_devices = gpu.find("mig_devices")
    parsed = {
        "index": index,
        "name": text_value(gpu, "product_name"),
        "uuid": text_value(gpu, "uuid"),
        "pci_bus_id": text_value(gpu, "pci/pci_bus_id") or gpu.get("id"),
        "memory_total_mib": parse_mib(text_value(gpu, "fb_memory_usage/total")),
        "persistence_mode": parse_enabled(text_value(gpu, "persistence_mode")),
        "mig_mode_current": parse_enabled(text_value(gpu, "mig_mode/current_mig")),
        "mig_mode_pending": parse_enabled(text_value(gpu, "mig_mode/pending_mig")),
        "mig_device_count": 0 if mig_devices is None else len(mig_devices.findall("mig_device")),
        "mig_devices": _parse_mig_devices(gpu),
        "fabric_state": text_value(gpu, "fabric/state"),
        "fabric_status": text_value(gpu, "fabric/status"),
        "performance_state": text_value(gpu, "performance_state"),
        "pcie": _parse_pcie(gpu),
        "ecc": _parse_ecc(gpu),
        "retired_pages": _parse_retired_pages(gpu),
        "remapped_rows": _parse_remapped_rows(gpu),
        "clock_event_reasons_active": _active_clock_reasons(gpu),
        "processes": _parse_processes(gpu),
    }
    parsed.update(_parse_telemetry(gpu))
    return parsed


def parse_nvidia_smi_xml(xml_text):
    """Driver version, CUDA version and one dict per GPU from the output of `nvidia-smi -q -x`."""
    # The report names a DTD file that is not shipped next to it; ElementTree never fetches it.
    try:
        root = ElementTree.fromstring(xml_text)
    except ElementTree.ParseError as error:
        raise NvidiaSmiParseError("not well-formed XML (%s)" % error) from None
    if root.tag != "nvidia_smi_log":
        raise NvidiaSmiParseError("root element is <%s>, expected <nvidia_smi_log>" % root.tag)
    gpus = [_parse_gpu(index, gpu) for index, gpu in enumerate(root.findall("gpu"))]
    return {
        "driver_version": text_value(root, "driver_version"),
        "cuda_version": text_value(root, "cuda_version"),
        "gpus": gpus,
    }


def parse_xid_events(kernel_log):
    """Xid reports of the NVIDIA driver in kernel log text (dmesg or journalctl -k), in log order.

    Each is {pci, xid, text}: the address as the driver prints it ('0000:07:00'), the Xid code, and the rest of the
    line (pid, process name and description, as far as the driver gives them).
    """
    events = []
    for line in (kernel_log or "").splitlines():
        match = _XID.search(line)
        if match:
            events.append({"pci": match.group(1), "xid": int(match.group(2)), "text": match.group(3).strip()})
    return events


def parse_kernel_module_version(proc_version_text):
    """Version of the loaded kernel module from /proc/driver/nvidia/version (proprietary or open flavour)."""
    match = _KERNEL_MODULE_VERSION.search(proc_version_text or "")
    return match.group(1) if match else None


def parse_nvml_library_version(nvidia_smi_output):
    """The user-space library version newer drivers print under a version mismatch error, else None."""
    match = _NVML_LIBRARY_VERSION.search(nvidia_smi_output or "")
    return match.group(1) if match else None


def versions_match(first, second):
    """Compare dotted versions on the components both carry: '535.183' matches '535.183.01'."""
    first_parts, second_parts = first.split("."), second.split(".")
    shared = min(len(first_parts), len(second_parts))
    return first_parts[:shared] == second_parts[:shared]


def _read_hex(path):
    try:
        with open(path) as handle:
            return int(handle.read().strip(), 16)
    except (OSError, ValueError):
        return None


def scan_pci_devices(sysfs_root):
    """NVIDIA GPUs and NVSwitches from <sysfs_root>/bus/pci/devices, as two lists sorted by PCI address.

    Other NVIDIA functions (the HDMI audio and USB-C controllers of consumer boards, Grace root ports)
    have other classes and are left out.
    """
    devices_dir = os.path.join(sysfs_root, "bus", "pci", "devices")
    gpus, nvswitches = [], []
    try:
        addresses = sorted(os.listdir(devices_dir))
    except OSError:
        return gpus, nvswitches
    for address in addresses:
        device_dir = os.path.join(devices_dir, address)
        if _read_hex(os.path.join(device_dir, "vendor")) != NVIDIA_PCI_VENDOR:
            continue
        pci_class = _read_hex(os.path.join(device_dir, "class"))
        if pci_class is None:
            continue
        device_id = _read_hex(os.path.join(device_dir, "device"))
        entry = {
            "address": address,
            "device_id": None if device_id is None else "0x%04x" % device_id,
            "class": "0x%06x" % pci_class,
        }
        if pci_class >> 8 in GPU_PCI_CLASSES:
            gpus.append(entry)
        elif pci_class >> 8 == NVSWITCH_PCI_CLASS:
            nvswitches.append(entry)
    return gpus, nvswitches


def classify_driver_state(pci_gpu_count, nvidia_smi_found, nvidia_smi_rc=None, nvidia_smi_output="",
                          kernel_module_version=None, nouveau_loaded=False, reported_driver_version=None):
    """Decide the driver state from what was observed.

    pci_gpu_count: NVIDIA GPUs seen on PCI. nvidia_smi_found: whether the binary exists; when it does,
    nvidia_smi_rc/nvidia_smi_output are from `nvidia-smi -q -x`. kernel_module_version: from
    /proc/driver/nvidia/version (None when the module is not loaded). reported_driver_version: the
    driver version in nvidia-smi's XML when it succeeded.

    Returns a dict with driver_state, message (what it means and what to do; None when ok),
    reboot_required and library_version (the user-space version, where it is known).
    """
    output = (nvidia_smi_output or "").strip()
    if nvidia_smi_found and nvidia_smi_rc == 0:
        library_version = reported_driver_version
        if kernel_module_version and library_version and not versions_match(kernel_module_version, library_version):
            return _state("version_mismatch", True, library_version,
                          "the loaded kernel module is %s but nvidia-smi reports driver %s; reboot to load the installed driver"
                          % (kernel_module_version, library_version))
        return _state("ok", False, library_version, None)

    if pci_gpu_count == 0:
        return _state("no_gpu", False, None, "no NVIDIA GPU (PCI vendor 0x10de, class 0x0300 or 0x0302) is present on this host")

    if not nvidia_smi_found:
        loaded = " (kernel module %s is loaded: install the nvidia-smi package of that version)" % kernel_module_version \
            if kernel_module_version else ""
        return _state("not_installed", False, None,
                      "%d NVIDIA GPU(s) on PCI but no nvidia-smi binary%s; install the NVIDIA driver" % (pci_gpu_count, loaded))

    library_version = parse_nvml_library_version(output)
    mismatch_reported = VERSION_MISMATCH_TEXT in output or nvidia_smi_rc == NVML_ERROR_LIB_RM_VERSION_MISMATCH
    mismatch_seen = bool(kernel_module_version and library_version and not versions_match(kernel_module_version, library_version))
    if mismatch_reported or mismatch_seen:
        versions = ""
        if kernel_module_version or library_version:
            versions = " (kernel module %s, user-space library %s)" % (kernel_module_version or "unknown", library_version or "unknown")
        return _state("version_mismatch", True, library_version,
                      "the loaded kernel module and the installed user-space driver differ%s; reboot to load the installed driver"
                      % versions)

    if NOT_LOADED_TEXT in output or nvidia_smi_rc == NVML_ERROR_DRIVER_NOT_LOADED or not kernel_module_version:
        if nouveau_loaded:
            return _state("not_loaded", True, None,
                          "the nvidia kernel module is not loaded and nouveau holds the GPU; blacklist nouveau, rebuild the "
                          "initramfs and reboot")
        return _state("not_loaded", False, None,
                      "the nvidia kernel module is not loaded; run 'modprobe nvidia' and read dmesg if it fails "
                      "(Secure Boot signing and a missing DKMS build for the running kernel are the usual causes)")

    return _state("error", False, None, "nvidia-smi exited with %s: %s" % (nvidia_smi_rc, output or "(no output)"))


def _state(driver_state, reboot_required, library_version, message):
    return {
        "driver_state": driver_state,
        "message": message,
        "reboot_required": reboot_required,
        "library_version": library_version,
    }
