# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU monitoring collector: nvidia-smi, sysfs and the kernel log as Prometheus metrics (issue 35).

A systemd timer of the gpu_monitoring role runs it on every node; it writes node_exporter's textfile collector file
atomically. It reads with the parser the facts module uses (nvidia_smi) and never blocks: a hung nvidia-smi (a GPU
off the bus) is killed after its timeout and shows as nvidia_smi_up 0, the other series still written.

Xid counts: from /dev/kmsg, each record counted once by its sequence number, which a small state file keeps per boot;
so the counts are since boot even after the kernel's ring buffer wraps. A regular file given as the kernel log (a
recorded dmesg, for tests and the lab) is read whole on every run instead.

Staging: with a staging index (written by the shard_staging role), each dataset's dlinfra_staging_* series from the
engine's files in its dest; see staging_metrics.

Stdlib only, Python 3.6 and later: the role copies this file, nvidia_smi.py, nvidia_generations.py,
prometheus_text.py, staging_metrics.py and the staging engine modules it reads with to the node under their collection
path and runs main().
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import kernel_module_flavor
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_smi import (
    NvidiaSmiParseError,
    parse_kernel_module_version,
    parse_nvidia_smi_xml,
    parse_xid_events,
    scan_pci_devices,
)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.prometheus_text import (
    MetricFamily,
    render,
    write_atomically,
)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.staging_metrics import (
    DEFAULT_INDEX as DEFAULT_STAGING_INDEX,
    collect_staging,
    staging_families,
)

DEFAULT_COMMAND = "nvidia-smi -q -x"
DEFAULT_TIMEOUT = 10.0
DEFAULT_OUTPUT = "nvidia_gpu.prom"
DEFAULT_KERNEL_LOG = "/dev/kmsg"
DEFAULT_STATE_FILE = "/var/lib/dlinfra-gpu-monitoring/xid-state.json"
MIB = 1024 * 1024
# After the kill, how long to wait for the pipes to close: a process stuck in the kernel (D state) cannot die
# until the kernel call returns, and the collector must not wait for that.
KILL_GRACE_S = 1.0


def run_command(argv, timeout):
    """(stdout, None) when argv exited 0 within timeout seconds, else (None, why). Never waits past timeout plus
    KILL_GRACE_S: on timeout the whole process group is killed and left behind if it does not die."""
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=dict(os.environ, LC_ALL="C"), start_new_session=True)
    except OSError as error:
        return None, "could not run %s (%s)" % (argv[0], error.strerror or error)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            process.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        return None, "%s did not finish within %g s (killed); a GPU that has fallen off the bus hangs it" % (
            " ".join(argv), timeout)
    if process.returncode != 0:
        output = (stderr or stdout).decode("utf-8", errors="replace").strip() or "(no output)"
        return None, "%s exited with %d: %s" % (" ".join(argv), process.returncode, output.splitlines()[0])
    return stdout.decode("utf-8", errors="replace"), None


def normalize_bus_id(address):
    """The PCI address as nvidia-smi writes it ('00000000:07:00.0'), from sysfs' '0000:07:00.0' or an Xid's
    '0000:07:00' (no function: function 0)."""
    function = "0"
    if "." in address:
        address, function = address.rsplit(".", 1)
    parts = address.split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    domain, bus, device = (int(part, 16) for part in parts)
    return "%08X:%02X:%02X.%s" % (domain, bus, device, function.upper())


def _read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def read_kmsg(path):
    """(sequence number, message) of each record in a /dev/kmsg-like device, oldest first. One read returns one
    record; EPIPE says the record was overwritten while reading (the next read goes on with the oldest still held)."""
    records = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno == errno.EPIPE:
                    continue
                raise
            if not chunk:
                break
            header, _separator, rest = chunk.partition(b";")
            try:
                sequence = int(header.split(b",")[1])
            except (IndexError, ValueError):
                continue
            records.append((sequence, rest.split(b"\n", 1)[0].decode("utf-8", errors="replace")))
    finally:
        os.close(fd)
    return records


def _load_state(path, boot_id):
    try:
        with open(path) as handle:
            state = json.load(handle)
        if state.get("boot_id") == boot_id and isinstance(state.get("counts"), dict):
            return {"boot_id": boot_id, "sequence": int(state.get("sequence", -1)),
                    "counts": {key: int(value) for key, value in state["counts"].items()}}
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return {"boot_id": boot_id, "sequence": -1, "counts": {}}


def _count(counts, events):
    for event in events:
        key = "%d|%s" % (event["xid"], normalize_bus_id(event["pci"]))
        counts[key] = counts.get(key, 0) + 1


def xid_counts(kernel_log, state_file, boot_id):
    """({'79|00000000:07:00.0': 1, ...}, None), or (the counts kept so far, why the log could not be read)."""
    if not kernel_log:
        return {}, "no kernel log configured"
    try:
        is_file = os.path.isfile(kernel_log)
        if is_file:
            counts = {}
            with open(kernel_log, errors="replace") as handle:
                _count(counts, parse_xid_events(handle.read()))
            return counts, None
        state = _load_state(state_file, boot_id) if state_file else {"boot_id": boot_id, "sequence": -1, "counts": {}}
        records = [(sequence, message) for sequence, message in read_kmsg(kernel_log) if sequence > state["sequence"]]
    except OSError as error:
        state = _load_state(state_file, boot_id) if state_file else {"counts": {}}
        return state["counts"], "could not read %s (%s)" % (kernel_log, error.strerror or error)
    _count(state["counts"], parse_xid_events("\n".join(message for _sequence, message in records)))
    if records:
        state["sequence"] = records[-1][0]
    if state_file:
        try:
            os.makedirs(os.path.dirname(state_file) or ".", exist_ok=True)
            write_atomically(state_file, json.dumps(state, sort_keys=True), mode=0o600)
        except OSError:
            pass  # counting goes on from the log alone; the next run tries again
    return state["counts"], None


def _families():
    specs = (
        ("nvidia_smi_up", "gauge", "1 when nvidia-smi -q -x answered within its timeout with a report that parses, else 0."),
        ("nvidia_smi_duration_seconds", "gauge", "Seconds nvidia-smi -q -x took (up to its timeout)."),
        ("nvidia_gpus_on_pci", "gauge", "NVIDIA GPUs on the PCI bus (sysfs: vendor 0x10de, class 0x0300 or 0x0302)."),
        ("nvidia_gpus_answering", "gauge", "GPUs in nvidia-smi's report; fewer than on PCI means GPUs are lost."),
        ("nvidia_driver_info", "gauge", "The NVIDIA driver: version, kernel module flavor (open or proprietary), CUDA version."),
        ("nvidia_kernel_log_up", "gauge", "1 when the kernel log could be read for Xid events, else 0."),
        ("nvidia_xid_events_total", "counter", "NVIDIA driver Xid reports in the kernel log since boot, by Xid code and GPU."),
        ("nvidia_gpu_temperature_celsius", "gauge", "GPU core temperature."),
        ("nvidia_gpu_memory_temperature_celsius", "gauge", "GPU memory (HBM) temperature."),
        ("nvidia_gpu_power_draw_watts", "gauge", "Power draw (average over the driver's last second where it reports one)."),
        ("nvidia_gpu_power_limit_watts", "gauge", "Power limit in force."),
        ("nvidia_gpu_sm_clock_hertz", "gauge", "Current SM clock."),
        ("nvidia_gpu_sm_clock_max_hertz", "gauge", "Maximum SM clock."),
        ("nvidia_gpu_memory_clock_hertz", "gauge", "Current memory clock."),
        ("nvidia_gpu_memory_clock_max_hertz", "gauge", "Maximum memory clock."),
        ("nvidia_gpu_utilization_ratio", "gauge", "Fraction of the last sample period a kernel ran on the GPU."),
        ("nvidia_gpu_memory_utilization_ratio", "gauge", "Fraction of the last sample period memory was read or written."),
        ("nvidia_gpu_memory_used_bytes", "gauge", "Frame buffer memory in use."),
        ("nvidia_gpu_memory_total_bytes", "gauge", "Frame buffer memory size."),
        ("nvidia_gpu_performance_state", "gauge", "Performance state: 0 for P0 (highest) to 15 for P15."),
        ("nvidia_gpu_ecc_enabled", "gauge", "1 when ECC is on."),
        ("nvidia_gpu_ecc_volatile_errors_total", "counter", "ECC errors since the driver loaded, by type."),
        ("nvidia_gpu_ecc_aggregate_errors_total", "counter", "ECC errors over the GPU's life, by type."),
        ("nvidia_gpu_retired_pages_total", "counter", "Retired memory pages (Volta, Turing), by cause."),
        ("nvidia_gpu_retired_pages_pending", "gauge", "1 when a page retirement waits for a GPU reset."),
        ("nvidia_gpu_remapped_rows_total", "counter", "Remapped memory rows (Ampere and later), by type of error."),
        ("nvidia_gpu_remapped_rows_pending", "gauge", "1 when a row remap waits for a GPU reset."),
        ("nvidia_gpu_remapped_rows_failed", "gauge", "1 when a row remap failed (no spare rows left): replace the GPU."),
        ("nvidia_gpu_pcie_link_generation", "gauge", "Current PCIe link generation (GPUs lower it when idle)."),
        ("nvidia_gpu_pcie_link_generation_max", "gauge", "Highest PCIe generation the link can reach in this slot."),
        ("nvidia_gpu_pcie_link_width", "gauge", "Current PCIe link width in lanes."),
        ("nvidia_gpu_pcie_link_width_max", "gauge", "Widest PCIe link the GPU supports, in lanes."),
        ("nvidia_gpu_clock_event_reason_active", "gauge", "1 while the clock event (throttle) reason holds the clocks down."),
        ("nvidia_gpu_persistence_mode_enabled", "gauge", "1 when persistence mode is on."),
        ("nvidia_gpu_mig_mode_enabled", "gauge", "1 when MIG is on now."),
        ("nvidia_gpu_mig_mode_pending_enabled", "gauge", "MIG mode after the next GPU reset."),
        ("nvidia_gpu_mig_devices", "gauge", "MIG devices on the GPU."),
        ("nvidia_gpu_mig_memory_used_bytes", "gauge", "Frame buffer memory in use on the MIG device."),
        ("nvidia_gpu_mig_memory_total_bytes", "gauge", "Frame buffer memory size of the MIG device."),
        ("nvidia_gpu_mig_multiprocessors", "gauge", "Streaming multiprocessors of the MIG device."),
        ("dlinfra_fabric_expected_rate_bytes_per_second", "gauge",
         "The rate every active RDMA port of this node should run at, as node exporter's "
         "node_infiniband_rate_bytes_per_second counts it (gpu_monitoring_fabric_expected_rate_gbps; absent: none)."),
    )
    return {name: MetricFamily(name, kind, text) for name, kind, text in specs}


def _scaled(value, factor):
    return None if value is None else value * factor


def _performance_state(text):
    if text and text.startswith("P") and text[1:].isdigit():
        return int(text[1:])
    return None


def _add_gpu(families, gpu):
    labels = (("gpu", str(gpu["index"])), ("uuid", gpu["uuid"] or ""), ("model", gpu["name"] or ""),
              ("pci_bus_id", gpu["pci_bus_id"] or ""))

    def add(name, value, *extra):
        families[name].add(labels + extra, value)

    add("nvidia_gpu_temperature_celsius", gpu["temperature"]["gpu_celsius"])
    add("nvidia_gpu_memory_temperature_celsius", gpu["temperature"]["memory_celsius"])
    add("nvidia_gpu_power_draw_watts", gpu["power"]["draw_watts"])
    add("nvidia_gpu_power_limit_watts", gpu["power"]["limit_watts"])
    add("nvidia_gpu_sm_clock_hertz", _scaled(gpu["clocks"]["sm_mhz"], 1e6))
    add("nvidia_gpu_sm_clock_max_hertz", _scaled(gpu["clocks"]["sm_max_mhz"], 1e6))
    add("nvidia_gpu_memory_clock_hertz", _scaled(gpu["clocks"]["memory_mhz"], 1e6))
    add("nvidia_gpu_memory_clock_max_hertz", _scaled(gpu["clocks"]["memory_max_mhz"], 1e6))
    add("nvidia_gpu_utilization_ratio", _scaled(gpu["utilization"]["gpu_percent"], 0.01))
    add("nvidia_gpu_memory_utilization_ratio", _scaled(gpu["utilization"]["memory_percent"], 0.01))
    add("nvidia_gpu_memory_used_bytes", _scaled(gpu["memory_used_mib"], MIB))
    add("nvidia_gpu_memory_total_bytes", _scaled(gpu["memory_total_mib"], MIB))
    add("nvidia_gpu_performance_state", _performance_state(gpu["performance_state"]))
    ecc = gpu["ecc"]
    add("nvidia_gpu_ecc_enabled", ecc["mode_current"])
    for kind in ("uncorrectable", "correctable"):
        add("nvidia_gpu_ecc_volatile_errors_total", ecc["volatile_" + kind], ("type", kind))
        add("nvidia_gpu_ecc_aggregate_errors_total", ecc["aggregate_" + kind], ("type", kind))
    add("nvidia_gpu_retired_pages_total", gpu["retired_pages"]["single_bit"], ("cause", "multiple_single_bit"))
    add("nvidia_gpu_retired_pages_total", gpu["retired_pages"]["double_bit"], ("cause", "double_bit"))
    add("nvidia_gpu_retired_pages_pending", gpu["retired_pages"]["pending"])
    add("nvidia_gpu_remapped_rows_total", gpu["remapped_rows"]["uncorrectable"], ("type", "uncorrectable"))
    add("nvidia_gpu_remapped_rows_total", gpu["remapped_rows"]["correctable"], ("type", "correctable"))
    add("nvidia_gpu_remapped_rows_pending", gpu["remapped_rows"]["pending"])
    add("nvidia_gpu_remapped_rows_failed", gpu["remapped_rows"]["failure"])
    add("nvidia_gpu_pcie_link_generation", gpu["pcie"]["gen_current"])
    add("nvidia_gpu_pcie_link_generation_max", gpu["pcie"]["gen_max"])
    add("nvidia_gpu_pcie_link_width", gpu["pcie"]["width_current"])
    add("nvidia_gpu_pcie_link_width_max", gpu["pcie"]["width_max"])
    for reason, active in sorted((gpu["clock_event_reasons"] or {}).items()):
        add("nvidia_gpu_clock_event_reason_active", active, ("reason", reason))
    add("nvidia_gpu_persistence_mode_enabled", gpu["persistence_mode"])
    add("nvidia_gpu_mig_mode_enabled", gpu["mig_mode_current"])
    add("nvidia_gpu_mig_mode_pending_enabled", gpu["mig_mode_pending"])
    add("nvidia_gpu_mig_devices", gpu["mig_device_count"] if gpu["mig_mode_current"] is not None else None)
    for device in gpu.get("mig_devices") or []:
        # The MIG device as the device plugin and DCGM name it: its GPU instance and compute instance on this GPU.
        instance = (("mig_device", str(device["index"])), ("gpu_instance_id", str(device["gpu_instance_id"])),
                    ("compute_instance_id", str(device["compute_instance_id"])))
        add("nvidia_gpu_mig_memory_used_bytes", _scaled(device["memory_used_mib"], MIB), *instance)
        add("nvidia_gpu_mig_memory_total_bytes", _scaled(device["memory_total_mib"], MIB), *instance)
        add("nvidia_gpu_mig_multiprocessors", device["multiprocessor_count"], *instance)


def collect(command=DEFAULT_COMMAND, timeout=DEFAULT_TIMEOUT, sysfs_root="/sys", procfs_root="/proc",
            kernel_log=DEFAULT_KERNEL_LOG, state_file=DEFAULT_STATE_FILE, staging_index=None,
            fabric_expected_rate_gbps=None):
    """(metrics text, [problems]) for one run; staging_index: the shard_staging role's index of datasets (None or
    '': no staging series); fabric_expected_rate_gbps: the RDMA ports' expected rate in Gb/s (None: no series)."""
    families, problems = _families(), []
    if fabric_expected_rate_gbps:
        # sysfs' "400 Gb/sec (4X NDR)", as node exporter reports it: bytes a second
        families["dlinfra_fabric_expected_rate_bytes_per_second"].add((), fabric_expected_rate_gbps * 1e9 / 8)
    families.update(staging_families())
    pci_gpus = scan_pci_devices(sysfs_root)[0]
    families["nvidia_gpus_on_pci"].add((), len(pci_gpus))

    started = time.monotonic()
    output, problem = run_command(shlex.split(command), timeout)
    families["nvidia_smi_duration_seconds"].add((), round(time.monotonic() - started, 6))
    report = None
    if output is not None:
        try:
            report = parse_nvidia_smi_xml(output)
        except NvidiaSmiParseError as error:
            problem = "%s printed something that is not its XML report: %s" % (command, error)
    if problem:
        problems.append(problem)
    families["nvidia_smi_up"].add((), report is not None)
    families["nvidia_gpus_answering"].add((), len(report["gpus"]) if report else 0)
    for gpu in report["gpus"] if report else ():
        _add_gpu(families, gpu)

    proc_version = _read_text(os.path.join(procfs_root, "driver", "nvidia", "version"))
    version = (report or {}).get("driver_version") or parse_kernel_module_version(proc_version)
    if version:
        families["nvidia_driver_info"].add(
            (("version", version), ("flavor", kernel_module_flavor(proc_version) or ""),
             ("cuda_version", (report or {}).get("cuda_version") or "")), 1)

    boot_id = (_read_text(os.path.join(procfs_root, "sys", "kernel", "random", "boot_id")) or "").strip()
    counts, log_problem = xid_counts(kernel_log, state_file, boot_id)
    if log_problem and kernel_log:
        problems.append(log_problem)
    families["nvidia_kernel_log_up"].add((), log_problem is None)
    for key, count in sorted(counts.items(), key=lambda item: (int(item[0].split("|")[0]), item[0])):
        xid, bus_id = key.split("|", 1)
        families["nvidia_xid_events_total"].add((("xid", xid), ("pci_bus_id", bus_id)), count)
    problems.extend(collect_staging(families, staging_index, procfs_root))
    return render(families.values()), problems


def _rate(text):
    """A rate in Gb/s from the command line: '' is none, else a positive number."""
    if not text.strip():
        return None
    rate = float(text)
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(text)
    return rate


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Write NVIDIA GPU metrics for node_exporter's textfile collector (dlinfra.gpu_cluster.gpu_monitoring).")
    parser.add_argument("--command", default=DEFAULT_COMMAND,
                        help="the nvidia-smi command, split like a shell would (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds nvidia-smi may take (default: %(default)s)")
    parser.add_argument("--textfile-directory", help="node_exporter's textfile directory; '-' or unset: print to stdout")
    parser.add_argument("--output-name", default=DEFAULT_OUTPUT, help="file name in that directory (default: %(default)s)")
    parser.add_argument("--kernel-log", default=DEFAULT_KERNEL_LOG,
                        help="where Xid reports are read: /dev/kmsg, or a file holding dmesg text; '' reads none")
    parser.add_argument("--state-file", default=DEFAULT_STATE_FILE, help="Xid counts kept per boot (default: %(default)s)")
    parser.add_argument("--staging-index", default=DEFAULT_STAGING_INDEX,
                        help="shard_staging's index of the node's datasets; '' reads none (default: %(default)s)")
    parser.add_argument("--fabric-expected-rate-gbps", type=_rate, default=None,
                        help="the rate in Gb/s every active RDMA port should run at; '' for none (default)")
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--procfs-root", default="/proc")
    options = parser.parse_args(argv)
    if options.timeout <= 0:
        parser.error("--timeout must be a positive number of seconds")

    text, problems = collect(options.command, options.timeout, options.sysfs_root, options.procfs_root,
                             options.kernel_log, options.state_file, options.staging_index,
                             options.fabric_expected_rate_gbps)
    for problem in problems:
        sys.stderr.write(problem + "\n")
    if not options.textfile_directory or options.textfile_directory == "-":
        sys.stdout.write(text)
        return 0
    try:
        write_atomically(os.path.join(options.textfile_directory, options.output_name), text)
    except OSError as error:
        sys.stderr.write("could not write %s (%s)\n" % (os.path.join(options.textfile_directory, options.output_name), error))
        return 1
    return 0
