#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Report NVIDIA GPUs, NVSwitches and the state of the NVIDIA driver
version_added: 0.1.0
description:
  - Finds NVIDIA GPUs and NVSwitches on the PCI bus through sysfs, which works with or without a driver.
  - Runs C(nvidia-smi -q -x) when the binary exists and reads, per GPU, the name, UUID, memory, PCI bus id,
    persistence mode, MIG mode, performance state, PCIe link, ECC counters, retired pages, remapped rows and the
    active clock event reasons, plus the driver and CUDA versions.
  - Reads the kernel log with C(dmesg) and returns the NVIDIA driver's Xid error reports found there (O(kernel_log)).
  - Classifies the driver as V(ok), V(no_gpu), V(not_installed), V(not_loaded), V(version_mismatch) or V(error),
    with a message that says what to do and whether a reboot is needed.
  - Returns the result both at the top level and as the fact C(nvidia_gpu).
  - It only reads; nothing on the host changes.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes.read_only
  - ansible.builtin.action_common_attributes.facts
options:
  nvidia_smi_path:
    description:
      - Path of the C(nvidia-smi) binary.
      - When not set, C(nvidia-smi) is looked up on E(PATH) and in the sbin directories.
      - A path that does not exist means the driver is not installed (V(not_installed)), not a failure.
    type: path
  sysfs_root:
    description:
      - Where sysfs is mounted. PCI devices are read from C(<sysfs_root>/bus/pci/devices), the loaded kernel
        modules from C(<sysfs_root>/module).
    type: path
    default: /sys
  procfs_root:
    description:
      - Where procfs is mounted. The loaded kernel module's version is read from C(<procfs_root>/driver/nvidia/version).
    type: path
    default: /proc
  timeout:
    description:
      - Seconds to wait for C(nvidia-smi). A GPU that has fallen off the bus can make it hang; when it runs out of time
        the state is V(error).
    type: int
    default: 60
  kernel_log:
    description:
      - Read the kernel log with C(dmesg) (looked up on E(PATH) and in the sbin directories, run with C(LC_ALL=C) and
        O(timeout)) and return the driver's Xid reports in RV(xid_events).
      - When the log cannot be read, RV(kernel_log_error) says why and RV(xid_events) is null; the module does not fail.
        Reading it needs root or C(CAP_SYSLOG) where C(kernel.dmesg_restrict=1), which containers usually lack.
      - V(false) reads nothing; both return values are then null.
    type: bool
    default: false
attributes:
  facts:
    support: full
  platform:
    platforms: linux
    details: Reads Linux sysfs and procfs.
notes:
  - NVSwitches are counted from PCI, as NVIDIA devices (vendor V(0x10de)) of class V(0x0680) (other bridge), which is how
    the NVSwitch chips of DGX and HGX boards enumerate. Per GPU, RV(gpus[].fabric_state) adds what the driver says about
    the NVLink fabric where it reports one (Hopper and later); older GPUs report nothing there.
  - GPUs on PCI are NVIDIA devices of class V(0x0300) (VGA) or V(0x0302) (3D controller); the audio and USB functions of
    consumer boards are not counted.
  - A version mismatch is recognised from nvidia-smi's own error and by comparing the loaded kernel module's version with
    the user-space version nvidia-smi reports.
  - The kernel log holds the messages since boot only until its ring buffer wraps; on a busy host old Xid reports can be
    gone from it.
"""

EXAMPLES = r"""
- name: Read the GPU facts
  dlinfra.gpu_cluster.nvidia_gpu_facts:

- name: Stop when the driver needs a reboot
  ansible.builtin.assert:
    that: not ansible_facts['nvidia_gpu']['reboot_required']
    fail_msg: "{{ inventory_hostname }}: {{ ansible_facts['nvidia_gpu']['message'] }}"

- name: Read the facts with a driver installed outside PATH
  dlinfra.gpu_cluster.nvidia_gpu_facts:
    nvidia_smi_path: /usr/local/nvidia/bin/nvidia-smi
    timeout: 30
  register: __gpu

- name: Every GPU has persistence mode on
  ansible.builtin.assert:
    that: __gpu.gpus | rejectattr('persistence_mode') | list | length == 0
  when: __gpu.driver_state == 'ok'

- name: Read the facts and the kernel log's Xid reports
  dlinfra.gpu_cluster.nvidia_gpu_facts:
    kernel_log: true
  register: __gpu

- name: No Xid error since boot
  ansible.builtin.assert:
    that: __gpu.xid_events | length == 0
    fail_msg: "Xid {{ __gpu.xid_events | map(attribute='xid') | join(', ') }}: read dmesg"
  when: __gpu.kernel_log_error is none
"""

RETURN = r"""
ansible_facts:
  description: The same data as the top-level keys, under one fact.
  returned: always
  type: dict
  contains:
    nvidia_gpu:
      description: Everything this module returns at the top level, except C(changed).
      returned: always
      type: dict
      sample: {driver_state: ok, gpu_count: 1, reboot_required: false}
driver_state:
  description:
    - V(ok) nvidia-smi answered.
    - V(no_gpu) no NVIDIA GPU on PCI.
    - V(not_installed) a GPU is present but nvidia-smi is not.
    - V(not_loaded) nvidia-smi is installed but the kernel module is not loaded.
    - V(version_mismatch) the loaded kernel module and the installed user-space driver differ, so a reboot is due.
    - V(error) nvidia-smi failed in another way, timed out, or printed output that could not be parsed.
  returned: always
  type: str
  sample: ok
message:
  description: What the state means and how to fix it; null when the state is V(ok).
  returned: always
  type: str
  sample: the nvidia kernel module is not loaded; run 'modprobe nvidia' and read dmesg if it fails
raw_message:
  description: What nvidia-smi printed when it failed; null when it succeeded or did not run.
  returned: always
  type: str
  sample: "Failed to initialize NVML: Driver/library version mismatch"
reboot_required:
  description: Whether a reboot is needed before the driver works (version mismatch, or nouveau holding the GPU).
  returned: always
  type: bool
  sample: false
gpu_count:
  description: GPUs that nvidia-smi reports when the state is V(ok), otherwise GPUs seen on PCI.
  returned: always
  type: int
  sample: 8
gpus:
  description: One entry per GPU from nvidia-smi, in its order; empty unless the state is V(ok).
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: Position in nvidia-smi's report (the GPU index nvidia-smi and CUDA use by default).
      type: int
      sample: 0
    name:
      description: Product name.
      type: str
      sample: NVIDIA A100-SXM4-80GB
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-513536b6-7d19-9063-b049-1e69664bb298
    pci_bus_id:
      description: PCI bus id as nvidia-smi prints it (8-digit domain).
      type: str
      sample: "00000000:07:00.0"
    memory_total_mib:
      description: Frame buffer size in MiB.
      type: int
      sample: 81920
    persistence_mode:
      description: Whether persistence mode is on; null where the GPU does not support it.
      type: bool
      sample: true
    mig_mode_current:
      description: Whether MIG is on now; null on GPUs without MIG.
      type: bool
      sample: false
    mig_mode_pending:
      description: MIG mode after the next GPU reset; null on GPUs without MIG.
      type: bool
      sample: false
    mig_device_count:
      description: MIG devices that exist on this GPU.
      type: int
      sample: 0
    fabric_state:
      description: NVLink fabric state the driver reports (for example V(Completed)); null where not reported.
      type: str
      sample: Completed
    fabric_status:
      description: Result of the fabric registration (for example V(Success)); null where not reported.
      type: str
      sample: Success
    performance_state:
      description: Performance state, V(P0) (highest) to V(P12) (lowest).
      type: str
      sample: P0
    pcie:
      description:
        - The GPU's PCIe link; each value null where not reported (some VMs, older drivers).
        - RV(gpus[].pcie.gen_max) is the lowest of the maxima nvidia-smi reports (C(max_link_gen), the GPU's
          C(max_device_link_gen) and the slot's C(max_host_link_gen)), which is what the link can reach in this slot.
        - An idle GPU lowers the link generation to save power, so a current generation below the maximum means
          something only in V(P0).
      type: dict
      contains:
        gen_current:
          description: Current link generation.
          type: int
          sample: 5
        gen_max:
          description: Highest generation the link can reach.
          type: int
          sample: 5
        width_current:
          description: Current link width in lanes.
          type: int
          sample: 16
        width_max:
          description: Widest link the GPU supports, in lanes.
          type: int
          sample: 16
    ecc:
      description:
        - ECC mode and error counts; null where the GPU has no ECC (consumer boards) or does not report the counter.
        - Uncorrectable sums every uncorrectable counter the driver reports (on Ampere and later C(sram_uncorrectable),
          or its C(_parity) and C(_secded) halves, plus C(dram_uncorrectable); on Volta the double-bit total), correctable
          the correctable ones (single-bit on Volta). Volatile counts since the driver loaded, aggregate over the GPU's life.
      type: dict
      contains:
        mode_current:
          description: Whether ECC is on now.
          type: bool
          sample: true
        volatile_uncorrectable:
          description: Uncorrectable errors since the driver loaded.
          type: int
          sample: 0
        aggregate_uncorrectable:
          description: Uncorrectable errors over the GPU's life.
          type: int
          sample: 0
        volatile_correctable:
          description: Corrected errors since the driver loaded.
          type: int
          sample: 0
        aggregate_correctable:
          description: Corrected errors over the GPU's life.
          type: int
          sample: 0
    retired_pages:
      description: Page retirement of Volta and Turing GPUs; null values from Ampere on, which remap rows instead.
      type: dict
      contains:
        single_bit:
          description: Pages retired for repeated single-bit errors.
          type: int
          sample: 0
        double_bit:
          description: Pages retired for double-bit errors.
          type: int
          sample: 0
        pending:
          description: Whether a retirement waits for the next driver reload or GPU reset.
          type: bool
          sample: false
    remapped_rows:
      description: Row remapping of Ampere and later GPUs; null values on older GPUs and while MIG is on.
      type: dict
      contains:
        correctable:
          description: Rows remapped for correctable errors.
          type: int
          sample: 0
        uncorrectable:
          description: Rows remapped for uncorrectable errors.
          type: int
          sample: 0
        pending:
          description: Whether a remap waits for a GPU reset.
          type: bool
          sample: false
        failure:
          description: Whether a remap failed (the GPU has run out of spare rows).
          type: bool
          sample: false
    clock_event_reasons_active:
      description:
        - Why the clocks are below their maximum now, as the short names of the reasons reported V(Active)
          (V(gpu_idle), V(sw_power_cap), V(hw_slowdown), V(hw_thermal_slowdown), V(hw_power_brake_slowdown),
          V(sw_thermal_slowdown), ...); drivers before 535 call them throttle reasons.
        - Null where the report has none.
      type: list
      elements: str
      sample: [gpu_idle]
    clock_event_reasons:
      description: Every clock event reason the report lists, by short name, with whether it is active; null where none.
      type: dict
      sample: {gpu_idle: true, sw_power_cap: false, hw_thermal_slowdown: false}
    temperature:
      description: GPU core and memory temperature in degrees Celsius (C(gpu_celsius), C(memory_celsius)); null where not reported.
      type: dict
      sample: {gpu_celsius: 67.0, memory_celsius: 52.0}
    power:
      description:
        - Power draw and the limit in force, in watts (C(draw_watts), C(limit_watts)); null where not reported.
        - The draw is C(power_draw), or C(average_power_draw) on 580-series drivers; the limit C(current_power_limit),
          or C(enforced_power_limit) on older drivers.
      type: dict
      sample: {draw_watts: 692.53, limit_watts: 700.0}
    clocks:
      description: Current and maximum SM and memory clocks in MHz (C(sm_mhz), C(memory_mhz), C(sm_max_mhz), C(memory_max_mhz)).
      type: dict
      sample: {sm_mhz: 1425.0, memory_mhz: 3201.0, sm_max_mhz: 1980.0, memory_max_mhz: 3201.0}
    utilization:
      description: Percent of the last sample period the GPU computed (C(gpu_percent)) and its memory was read or written (C(memory_percent)).
      type: dict
      sample: {gpu_percent: 100.0, memory_percent: 23.0}
    memory_used_mib:
      description: Frame buffer in use, in MiB.
      type: int
      sample: 1011
    processes:
      description:
        - The processes using this GPU as nvidia-smi lists them (C(<processes>)); empty when none runs. The upgrade
          playbook waits for these to end before it drains a node.
      type: list
      elements: dict
      contains:
        pid:
          description: Process id (in the host's PID namespace).
          type: int
          sample: 23817
        name:
          description: Process name (the command nvidia-smi shows).
          type: str
          sample: python3
        type:
          description: V(C) compute, V(G) graphics, V(C+G) both.
          type: str
          sample: C
        used_memory_mib:
          description: GPU memory the process holds, in MiB; null where not reported.
          type: int
          sample: 40536
driver_version:
  description: Driver version nvidia-smi reports; null unless the state is V(ok).
  type: str
  returned: always
  sample: 535.54.03
cuda_version:
  description: Highest CUDA version the driver supports; null unless the state is V(ok) or the driver is too old to say.
  type: str
  returned: always
  sample: "12.2"
kernel_module_version:
  description: Version of the loaded nvidia kernel module; null when it is not loaded.
  type: str
  returned: always
  sample: 535.54.03
kernel_module_flavor:
  description: Flavour of the loaded nvidia kernel module (V(open) or V(proprietary)); null when it is not loaded.
  type: str
  returned: always
  sample: open
library_version:
  description: Version of the user-space driver where it is known (from nvidia-smi's report or its mismatch error).
  type: str
  returned: always
  sample: "535.183"
nvidia_smi_path:
  description: The nvidia-smi binary that was run; null when none was found.
  type: str
  returned: always
  sample: /usr/bin/nvidia-smi
nouveau_loaded:
  description: Whether the nouveau kernel module is loaded.
  type: bool
  returned: always
  sample: false
pci_gpus:
  description: NVIDIA GPUs on PCI, sorted by address.
  type: list
  elements: dict
  returned: always
  contains:
    address:
      description: PCI address as sysfs names it.
      type: str
      sample: "0000:07:00.0"
    device_id:
      description: PCI device id.
      type: str
      sample: "0x20b2"
    name:
      description: The product the device id names; null for an id the collection does not know.
      type: str
      sample: NVIDIA A100-SXM4-80GB
    architecture:
      description: The GPU's architecture (Kepler to Blackwell); null for an id the collection does not know.
      type: str
      sample: Ampere
    compute_capability:
      description: CUDA compute capability; null for an id the collection does not know.
      type: str
      sample: "8.0"
    class:
      description: PCI class code.
      type: str
      sample: "0x030200"
pci_nvswitches:
  description: NVSwitch chips on PCI (NVIDIA, class 0x0680), each with its C(address), C(device_id) and C(class).
  type: list
  elements: dict
  returned: always
  sample: [{address: "0000:c1:00.0", device_id: "0x1af1", class: "0x068000"}]
nvswitch_count:
  description: Number of entries in RV(pci_nvswitches).
  type: int
  returned: always
  sample: 6
xid_events:
  description:
    - The NVIDIA driver's Xid error reports in the kernel log (C(NVRM Xid) lines), oldest first; empty when there are none.
    - Null when O(kernel_log=false) or the log could not be read (RV(kernel_log_error)).
  type: list
  elements: dict
  returned: always
  contains:
    pci:
      description: The GPU's PCI address as the driver prints it (domain:bus:device).
      type: str
      sample: "0000:07:00"
    xid:
      description: The Xid code (NVIDIA's catalogue of Xid errors says what each means).
      type: int
      sample: 79
    text:
      description: The rest of the line (process id and name where given, and the description).
      type: str
      sample: pid=1234, name=python, GPU has fallen off the bus.
kernel_log_error:
  description: Why the kernel log could not be read (dmesg missing, not permitted, timed out); null when it was read or not asked for.
  type: str
  returned: always
  sample: "/usr/bin/dmesg exited with 1: dmesg: read kernel buffer failed: Operation not permitted; ..."
"""

import os
import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import describe, kernel_module_flavor
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_smi import (
    NvidiaSmiParseError,
    classify_driver_state,
    parse_kernel_module_version,
    parse_nvidia_smi_xml,
    parse_xid_events,
    scan_pci_devices,
)


def _read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _find_nvidia_smi(module):
    configured = module.params["nvidia_smi_path"]
    if not configured:
        return module.get_bin_path("nvidia-smi")
    if not os.path.exists(configured):
        return None
    if not os.path.isfile(configured) or not os.access(configured, os.X_OK):
        module.fail_json(msg="nvidia_smi_path=%s is not an executable file; point it at the nvidia-smi binary or leave it unset "
                             "to look nvidia-smi up on PATH" % configured)
    return configured


def _run_nvidia_smi(module, path):
    """(rc, stdout + stderr), or (None, why) when it did not finish in time."""
    # subprocess rather than module.run_command: run_command cannot time out, and a GPU that has fallen
    # off the bus can make nvidia-smi hang for minutes.
    try:
        completed = subprocess.run([path, "-q", "-x"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=module.params["timeout"],
                                   env=dict(os.environ, LC_ALL="C"), check=False)
    except subprocess.TimeoutExpired:
        return None, "%s -q -x did not finish within %d s" % (path, module.params["timeout"])
    except OSError as error:
        module.fail_json(msg="could not run %s (%s); set nvidia_smi_path to a working nvidia-smi binary" % (path, error))
    stdout = completed.stdout.decode("utf-8", errors="replace")
    stderr = completed.stderr.decode("utf-8", errors="replace")
    return completed.returncode, stdout if completed.returncode == 0 else (stdout + "\n" + stderr).strip()


def _read_kernel_log(module):
    """(Xid events, None), or (None, why the log could not be read)."""
    dmesg = module.get_bin_path("dmesg")
    if not dmesg:
        return None, "dmesg was not found (util-linux); install it to read the driver's Xid reports"
    timeout = module.params["timeout"]
    try:
        completed = subprocess.run([dmesg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                                   env=dict(os.environ, LC_ALL="C"), check=False)
    except subprocess.TimeoutExpired:
        return None, "%s did not finish within %d s" % (dmesg, timeout)
    except OSError as error:
        return None, "could not run %s (%s)" % (dmesg, error)
    if completed.returncode != 0:
        output = (completed.stderr + completed.stdout).decode("utf-8", errors="replace").strip() or "(no output)"
        hint = ""
        if "Operation not permitted" in output:
            hint = ("; reading the kernel log needs root (become) or CAP_SYSLOG where kernel.dmesg_restrict=1, and containers "
                    "usually lack CAP_SYSLOG: read it on the host")
        return None, "%s exited with %d: %s%s" % (dmesg, completed.returncode, output, hint)
    return parse_xid_events(completed.stdout.decode("utf-8", errors="replace")), None


_MOUNTS = {"sysfs_root": ("sysfs", "/sys"), "procfs_root": ("procfs", "/proc")}


def _check_directory(module, option):
    filesystem, usual = _MOUNTS[option]
    if not os.path.isdir(module.params[option]):
        module.fail_json(msg="%s=%s is not a directory; set it to where %s is mounted (normally %s)"
                             % (option, module.params[option], filesystem, usual))


def gather(module):
    sysfs_root, procfs_root = module.params["sysfs_root"], module.params["procfs_root"]
    pci_gpus, pci_nvswitches = scan_pci_devices(sysfs_root)
    nouveau_loaded = os.path.isdir(os.path.join(sysfs_root, "module", "nouveau"))
    nvidia_smi_path = _find_nvidia_smi(module)

    rc, output, report = None, "", None
    if nvidia_smi_path:
        rc, output = _run_nvidia_smi(module, nvidia_smi_path)
    # Read after nvidia-smi ran: it may have loaded the module itself through nvidia-modprobe.
    proc_version = _read_text(os.path.join(procfs_root, "driver", "nvidia", "version"))
    kernel_module_version = parse_kernel_module_version(proc_version)
    for gpu in pci_gpus:
        if gpu["device_id"]:
            known = describe(gpu["device_id"])
            gpu.update(name=known["name"], architecture=known["architecture"], compute_capability=known["compute_capability"])

    parse_problem = None
    if rc == 0:
        try:
            report = parse_nvidia_smi_xml(output)
        except NvidiaSmiParseError as error:
            parse_problem = "%s -q -x printed output that is not its XML report: %s" % (nvidia_smi_path, error)

    if rc is None and nvidia_smi_path:
        state = {"driver_state": "error", "message": output + "; the driver may be hung: look for Xid errors in dmesg",
                 "reboot_required": False, "library_version": None}
    elif parse_problem:
        state = {"driver_state": "error", "message": parse_problem, "reboot_required": False, "library_version": None}
    else:
        state = classify_driver_state(
            pci_gpu_count=len(pci_gpus), nvidia_smi_found=bool(nvidia_smi_path), nvidia_smi_rc=rc, nvidia_smi_output=output,
            kernel_module_version=kernel_module_version, nouveau_loaded=nouveau_loaded,
            reported_driver_version=report["driver_version"] if report else None)

    usable = state["driver_state"] == "ok" and report is not None
    gpus = report["gpus"] if usable else []
    xid_events, kernel_log_error = _read_kernel_log(module) if module.params["kernel_log"] else (None, None)
    return {
        "driver_state": state["driver_state"],
        "message": state["message"],
        "raw_message": (output.strip() or None) if rc not in (0, None) else None,
        "reboot_required": state["reboot_required"],
        "gpu_count": len(gpus) if usable else len(pci_gpus),
        "gpus": gpus,
        "driver_version": report["driver_version"] if usable else None,
        "cuda_version": report["cuda_version"] if usable else None,
        "kernel_module_version": kernel_module_version,
        "kernel_module_flavor": kernel_module_flavor(proc_version),
        "library_version": state["library_version"],
        "nvidia_smi_path": nvidia_smi_path,
        "nouveau_loaded": nouveau_loaded,
        "pci_gpus": pci_gpus,
        "pci_nvswitches": pci_nvswitches,
        "nvswitch_count": len(pci_nvswitches),
        "xid_events": xid_events,
        "kernel_log_error": kernel_log_error,
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type="path"),
            sysfs_root=dict(type="path", default="/sys"),
            procfs_root=dict(type="path", default="/proc"),
            timeout=dict(type="int", default=60),
            kernel_log=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    if module.params["timeout"] <= 0:
        module.fail_json(msg="timeout=%d must be a positive number of seconds" % module.params["timeout"])
    for option in _MOUNTS:
        _check_directory(module, option)

    facts = gather(module)
    module.exit_json(changed=False, ansible_facts={"nvidia_gpu": facts}, **facts)


if __name__ == "__main__":
    main()
