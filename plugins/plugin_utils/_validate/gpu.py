# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU checks of the validate role's evaluator: nvidia_gpu_facts' result, dcgmi diag and nvbandwidth -> checks
(gpu_tool_output reads the two tools' output).

Each check is {"check", "status", "expected", "measured", "message"}, status pass, fail or skip. gpu_checks returns
every id of CHECK_IDS, in that order: one that cannot be evaluated is a skip that says why, never left out. A failure's
message says what is wrong and what to do. Pure Python (stdlib only), run on the controller.
"""

import re

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.tool_output import parse_dcgmi_diag_json, parse_nvbandwidth
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.result import check

CHECK_IDS = ("gpu.count_model", "gpu.driver_state", "gpu.persistence_mode", "gpu.ecc", "gpu.xid", "gpu.nvlink",
             "gpu.pcie_link", "gpu.throttle", "gpu.dcgm_diag", "gpu.host_device_bandwidth")

# Clock event reasons that mean heat or power holds the clocks down. The others are normal operation: an idle GPU,
# application clocks or a power cap someone set, sync boost, display clocks.
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")

NOT_MANAGED = ("the nvidia kernel module is not managed on this host (nvidia_driver_kernel_module: false) and is not "
               "loaded; GPU checks need a loaded driver")

_EXPECTED_GPUS = re.compile(r"^\s*(\d+)\s*[xX]\s*(\S.*?)\s*$")
_PCI_ADDRESS = re.compile(r"^([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)")


def _bare(name):
    name = " ".join(str(name).split()).lower()
    return name[len("nvidia "):] if name.startswith("nvidia ") else name


def model_matches(model, product_name):
    """Whether `model` names nvidia-smi's `product_name`: a case-insensitive part of it, a leading 'NVIDIA ' on either
    side left aside ('A100-SXM4-80GB' and 'NVIDIA A100-SXM4-80GB' both name 'NVIDIA A100-SXM4-80GB')."""
    return bool(model and product_name) and _bare(model) in _bare(product_name)


def parse_expected_gpus(text):
    """'8 x NVIDIA A100-SXM4-80GB' -> (8, 'NVIDIA A100-SXM4-80GB'); '' or None -> None; ValueError otherwise."""
    if text is None or not str(text).strip():
        return None
    match = _EXPECTED_GPUS.match(str(text))
    if not match:
        raise ValueError("validate_expected_gpus=%r is not 'COUNT x MODEL'; write it as for example '8 x NVIDIA A100-SXM4-80GB'"
                         % text)
    return int(match.group(1)), match.group(2)


def _best_key(model_name, keys):
    """The most specific key that names the model: 'H200 NVL' wins over 'H200' for an NVIDIA H200 NVL."""
    matching = [key for key in keys if model_matches(key, model_name)]
    return max(matching, key=lambda key: len(_bare(key))) if matching else None


def thresholds_for(model_name, table, overrides=None):
    """The thresholds for a GPU model: the table entry whose key names it, with the matching entry of overrides laid
    over it (both keyed by model, matched as model_matches does). {} for a model neither knows."""
    thresholds = {}
    for source in (table or {}, overrides or {}):
        key = _best_key(model_name, source) if model_name else None
        if key is not None:
            thresholds.update(source[key] or {})
    return thresholds


def _label(gpu):
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("pci_bus_id") or "bus id unknown")


def _pci_key(address):
    """'0000:07:00', '00000000:07:00.0' -> (0, 7, 0): the driver's and nvidia-smi's spellings of one address."""
    match = _PCI_ADDRESS.match(address or "")
    return tuple(int(part, 16) for part in match.groups()) if match else None


def _models(gpus):
    """'8 x NVIDIA A100-SXM4-80GB', or '4 x A, 4 x B' for a mixed node."""
    counts = {}
    for gpu in gpus:
        name = gpu.get("name") or "unknown model"
        counts[name] = counts.get(name, 0) + 1
    return ", ".join("%d x %s" % (count, name) for name, count in counts.items()) or "0 GPUs"


def unusable(facts):
    """Why checks that read the GPUs cannot run, or None when the driver answers for at least one GPU."""
    if not facts.get("driver_state"):
        return "the GPU facts could not be read on this node"
    if facts["driver_state"] == "no_gpu":
        return "no NVIDIA GPU on this node"
    if facts["driver_state"] != "ok":
        return "the driver does not answer (%s)" % facts["driver_state"]
    if not facts.get("gpus"):
        return "nvidia-smi reports no GPU"
    return None


# ---- inventory and driver ---------------------------------------------------------------------------------------

def _count_model(facts, expected_gpus, options):
    """Count and model against validate_expected_gpus. Without a driver that answers, only the PCI count is known: a
    node expected to have GPUs whose driver does not answer fails (it cannot run GPU work), except where the kernel
    module is deliberately not managed, which gpu.driver_state reports as a skip too."""
    cid = "gpu.count_model"
    try:
        expected = parse_expected_gpus(expected_gpus)
    except ValueError as error:
        return check(cid, "fail", str(error), expected_gpus, None)
    state = facts.get("driver_state")
    if not state:
        return check(cid, "fail" if expected else "skip", "the GPU facts could not be read on this node (see gpu.driver_state)",
                     "%d x %s" % expected if expected else None, None)
    gpus = (facts.get("gpus") or []) if state == "ok" else []
    pci_count = len(facts.get("pci_gpus") or [])
    if state == "ok":
        measured = _models(gpus)
    elif pci_count:
        measured = "%d on PCI, model unread (driver %s)" % (pci_count, state)
    else:
        measured = "0 GPUs"
    if expected is None:
        if (state == "ok" and gpus) or (state != "ok" and pci_count):
            return check(cid, "skip", "found %s; set validate_expected_gpus (as 'COUNT x MODEL') to check the count and "
                         "model" % measured, None, measured)
        return check(cid, "skip", "no NVIDIA GPU on this node and validate_expected_gpus is not set", None, measured)
    count, model = expected
    wanted = "%d x %s" % (count, model)
    if state == "ok":
        wrong = [gpu for gpu in gpus if not model_matches(model, gpu.get("name"))]
        if len(gpus) == count and not wrong:
            return check(cid, "pass", "%s as expected" % measured, wanted, measured)
        problems = ["%d GPU(s) where %d are expected" % (len(gpus), count)] if len(gpus) != count else []
        problems += ["%s is %s, not %s" % (_label(gpu), gpu.get("name"), model) for gpu in wrong]
        return check(cid, "fail", "%s; correct validate_expected_gpus for this node's group if the inventory is wrong, "
                     "otherwise look at the node: a GPU missing from nvidia-smi has often fallen off the bus (gpu.xid) "
                     "or is bound to another driver (lspci -k)" % "; ".join(problems), wanted, measured)
    if pci_count != count:
        return check(cid, "fail", "%d NVIDIA GPU(s) on PCI where %d are expected, and the model cannot be read (driver %s); "
                     "check the inventory's validate_expected_gpus and the hardware (lspci -d 10de:)"
                     % (pci_count, count, state), wanted, measured)
    if state == "not_loaded" and options.get("kernel_module_managed") is False:
        return check(cid, "skip", "%d GPU(s) on PCI as expected; the model cannot be read because %s"
                     % (pci_count, NOT_MANAGED), wanted, measured)
    return check(cid, "fail", "%d GPU(s) on PCI as expected, but the model cannot be read because the driver does not "
                 "answer (%s): %s" % (pci_count, state, facts.get("message") or facts.get("msg") or "no message"),
                 wanted, measured)


def _driver_state(facts, options):
    cid = "gpu.driver_state"
    state = facts.get("driver_state")
    if not state:
        return check(cid, "fail", "nvidia_gpu_facts did not report on this node: %s; run it by hand there "
                     "(ansible HOST -m dlinfra.gpu_cluster.nvidia_gpu_facts)" % (facts.get("msg") or "no result"), "ok", None)
    if state == "ok":
        return check(cid, "pass", "driver %s answers for %d GPU(s)" % (facts.get("driver_version"), len(facts.get("gpus") or [])),
                     "ok", state)
    if state == "no_gpu":
        return check(cid, "skip", "no NVIDIA GPU on this node", None, state)
    if state == "not_loaded" and options.get("kernel_module_managed") is False:
        return check(cid, "skip", NOT_MANAGED, None, state)
    return check(cid, "fail", facts.get("message") or "the NVIDIA driver is in state %s" % state, "ok", state)


# ---- what nvidia-smi reports per GPU ----------------------------------------------------------------------------

def _persistence(gpus):
    cid = "gpu.persistence_mode"
    known = [gpu for gpu in gpus if gpu.get("persistence_mode") is not None]
    if not known:
        return check(cid, "skip", "no GPU on this node reports persistence mode")
    off = [gpu for gpu in known if not gpu["persistence_mode"]]
    measured = "on for %d of %d GPU(s)" % (len(known) - len(off), len(gpus))
    if off:
        return check(cid, "fail", "persistence mode is off on %s; enable the nvidia-persistenced service (the nvidia_driver "
                     "role does) or run 'nvidia-smi -pm 1': without it the driver tears a GPU down whenever no process "
                     "holds it, and each CUDA start waits for it to come up again" % ", ".join(_label(gpu) for gpu in off),
                     "on for every GPU", measured)
    return check(cid, "pass", "persistence mode is on for every GPU", "on for every GPU", measured)


def _ecc_problems(gpu):
    """(reports anything, what is wrong) for one GPU."""
    ecc, pages, rows = gpu.get("ecc") or {}, gpu.get("retired_pages") or {}, gpu.get("remapped_rows") or {}
    seen = [ecc.get("mode_current"), ecc.get("volatile_uncorrectable"), pages.get("pending"), rows.get("pending"), rows.get("failure")]
    problems = []
    if ecc.get("mode_current") is False:
        problems.append("ECC is off")
    if ecc.get("volatile_uncorrectable"):
        problems.append("%d uncorrectable ECC error(s) since the driver loaded" % ecc["volatile_uncorrectable"])
    if pages.get("pending"):
        problems.append("a page retirement is pending")
    if rows.get("pending"):
        problems.append("a row remap is pending")
    if rows.get("failure"):
        problems.append("row remapping has failed")
    return any(value is not None for value in seen), problems


def _ecc(gpus):
    cid = "gpu.ecc"
    expected = "ECC on, no uncorrectable error since the driver loaded, no pending page retirement or row remap, no remap failure"
    reporting, findings = 0, []
    for gpu in gpus:
        reports, problems = _ecc_problems(gpu)
        reporting += reports
        if problems:
            findings.append("%s: %s" % (_label(gpu), ", ".join(problems)))
    if not reporting:
        return check(cid, "skip", "no GPU on this node reports ECC (GPUs without ECC, such as consumer boards, report none)")
    if findings:
        return check(cid, "fail", "%s; drain the node, then reset the GPU (nvidia-smi -r) or reboot so that pending "
                     "retirements and remaps take effect; a remap failure, or uncorrectable errors that come back, mean the "
                     "GPU needs replacing; ECC that is off is turned on with 'nvidia-smi -e 1' and a reset"
                     % "; ".join(findings), expected, "; ".join(findings))
    return check(cid, "pass", "no uncorrectable ECC error, pending retirement or remap on %d GPU(s)" % reporting,
                 expected, "clean on %d GPU(s)" % reporting)


def _xid(facts, gpus):
    """Evaluated whenever GPUs are on PCI, driver answering or not: an Xid is often why it stopped answering."""
    cid = "gpu.xid"
    if facts.get("driver_state") == "no_gpu":
        return check(cid, "skip", "no NVIDIA GPU on this node")
    if facts.get("kernel_log_error"):
        return check(cid, "skip", "the kernel log could not be read: %s" % facts["kernel_log_error"])
    events = facts.get("xid_events")
    if events is None:
        return check(cid, "skip", "the kernel log was not read (nvidia_gpu_facts ran with kernel_log: false, or did not run)")
    if not events:
        return check(cid, "pass", "no Xid error in the kernel log since boot", "no Xid since boot", "none")
    by_address = {_pci_key(gpu.get("pci_bus_id")): _label(gpu) for gpu in gpus}
    counts = {}
    for event in events:
        where = by_address.get(_pci_key(event.get("pci"))) or "PCI %s" % event.get("pci")
        counts[(event.get("xid"), where)] = counts.get((event.get("xid"), where), 0) + 1
    found = ", ".join("Xid %s on %s%s" % (xid, where, " (%d times)" % n if n > 1 else "") for (xid, where), n in counts.items())
    return check(cid, "fail", "%s since boot; Xid codes are the driver's error reports (NVIDIA's Xid catalogue says what "
                 "each means): read dmesg around them, drain the node, reset the GPU or reboot, and have the GPU checked "
                 "if they come back" % found, "no Xid since boot", found)


def _nvlink(facts, gpus):
    cid = "gpu.nvlink"
    reported = [gpu for gpu in gpus if gpu.get("fabric_state") not in (None, "Not Supported")]
    if not reported:
        if facts.get("nvswitch_count"):
            return check(cid, "skip", "%d NVSwitch(es) on PCI, but the driver reports no fabric state for these GPUs (it does "
                         "from Hopper on); check that nvidia-fabricmanager is active" % facts["nvswitch_count"])
        return check(cid, "skip", "no NVLink fabric reported")
    bad = [gpu for gpu in reported if gpu["fabric_state"] != "Completed" or gpu.get("fabric_status") not in (None, "Success")]
    expected = "fabric state Completed, status Success on every GPU"
    if bad:
        found = "; ".join("%s: state %s, status %s" % (_label(gpu), gpu["fabric_state"], gpu.get("fabric_status")) for gpu in bad)
        return check(cid, "fail", "%s; GPUs join the NVLink fabric once nvidia-fabricmanager has set up the NVSwitches, and "
                     "CUDA does not start on them before: check that the service is active (nvidia_driver_fabric_manager) and "
                     "read its log (journalctl -u nvidia-fabricmanager)" % found, expected, found)
    return check(cid, "pass", "every GPU has joined the NVLink fabric", expected,
                 "Completed/Success on %d of %d GPU(s)" % (len(reported), len(gpus)))


def _link_findings(gpu, min_gen, min_width):
    """(problems, note) for one GPU's link; note says why a lower generation was not held against it."""
    link = gpu.get("pcie") or {}
    gen, gen_max, width, width_max = (link.get(key) for key in ("gen_current", "gen_max", "width_current", "width_max"))
    problems, note = [], None
    if width is not None and width_max is not None and width < width_max:
        problems.append("runs x%d of x%d" % (width, width_max))
    if gen is not None and gen_max is not None and gen < gen_max:
        if gpu.get("performance_state") == "P0":
            problems.append("runs Gen%d of Gen%d in P0" % (gen, gen_max))
        else:
            note = "%s runs Gen%d of Gen%d in %s" % (_label(gpu), gen, gen_max, gpu.get("performance_state") or "an unknown state")
    if min_width and width_max is not None and width_max < min_width:
        problems.append("reaches x%d at most where x%d is expected of this model" % (width_max, min_width))
    if min_gen and gen_max is not None and gen_max < min_gen:
        problems.append("reaches Gen%d at most (the lower of the GPU's and the slot's maxima) where Gen%d is expected of this "
                        "model" % (gen_max, min_gen))
    return problems, note


def _pcie(gpus, thresholds):
    """A link narrower than its maximum fails. A generation below the maximum fails only in P0: an idle GPU lowers the
    link generation to save power and raises it again under load, so elsewhere it is normal."""
    cid = "gpu.pcie_link"
    min_gen, min_width = thresholds.get("pcie_gen"), thresholds.get("pcie_width")
    reporting = [gpu for gpu in gpus if any(value is not None for value in (gpu.get("pcie") or {}).values())]
    if not reporting:
        return check(cid, "skip", "no GPU on this node reports its PCIe link")
    expected = "width at its maximum, generation at its maximum in P0"
    if min_gen or min_width:
        expected += ", maxima of at least %s" % " ".join(
            part for part in ("Gen%s" % min_gen if min_gen else "", "x%s" % min_width if min_width else "") if part)
    findings, notes, measured = [], [], []
    for gpu in reporting:
        link = gpu["pcie"]
        measured.append("GPU %s Gen%s x%s of Gen%s x%s in %s" % (
            gpu.get("index"), link.get("gen_current"), link.get("width_current"), link.get("gen_max"), link.get("width_max"),
            gpu.get("performance_state")))
        problems, note = _link_findings(gpu, min_gen, min_width)
        if problems:
            findings.append("%s %s" % (_label(gpu), ", ".join(problems)))
        if note:
            notes.append(note)
    if findings:
        return check(cid, "fail", "%s; reseat the GPU (or its riser or cable), check the slot's link settings in the firmware "
                     "setup, and compare LnkCap with LnkSta in 'lspci -vv' for it: a slower link slows every copy between "
                     "host and GPU" % "; ".join(findings), expected, "; ".join(measured))
    message = "every GPU's link runs at its maximum width, and at its maximum generation where in P0"
    if notes:
        message += " (%s: idle GPUs lower the link generation to save power, so it is checked in P0 only)" % "; ".join(notes)
    return check(cid, "pass", message, expected, "; ".join(measured))


def _throttle(gpus):
    cid = "gpu.throttle"
    reporting = [gpu for gpu in gpus if gpu.get("clock_event_reasons_active") is not None]
    if not reporting:
        return check(cid, "skip", "no GPU on this node reports clock event reasons")
    expected = "none of %s active" % ", ".join(SLOWDOWN_REASONS)
    findings = ["%s: %s" % (_label(gpu), ", ".join(reason for reason in gpu["clock_event_reasons_active"] if reason in SLOWDOWN_REASONS))
                for gpu in reporting if set(gpu["clock_event_reasons_active"]) & set(SLOWDOWN_REASONS)]
    if findings:
        return check(cid, "fail", "%s; heat or power is holding the clocks down: check the cooling (inlet temperature, fans, "
                     "airflow; nvidia-smi -q -d TEMPERATURE), the power supply and the BMC's power brake; nvidia-smi -q -d "
                     "PERFORMANCE shows the reasons" % "; ".join(findings), expected, "; ".join(findings))
    active = sorted({reason for gpu in reporting for reason in gpu["clock_event_reasons_active"]})
    return check(cid, "pass", "no GPU is slowed down by heat or power", expected,
                 "active: %s" % ", ".join(active) if active else "no reason active")


# ---- dcgmi diag and nvbandwidth ---------------------------------------------------------------------------------

def _command(value):
    """(output, exit code) of a registered command result, or of plain text."""
    if isinstance(value, dict):
        return value.get("stdout") or value.get("stderr") or value.get("msg") or "", value.get("rc")
    return str(value), None


def _dcgm(options):
    cid = "gpu.dcgm_diag"
    if options.get("dcgm") is None:
        return check(cid, "skip", options.get("dcgm_reason") or "dcgmi diag did not run on this node")
    text, rc = _command(options["dcgm"])
    expected = "every DCGM diagnostic test passes"
    try:
        diag = parse_dcgmi_diag_json(text)
    except ValueError as error:
        return check(cid, "fail", "dcgmi diag gave no result (exit code %s): %s; check that the DCGM host engine runs "
                     "(systemctl status nvidia-dcgm, or nv-hostengine) and run 'dcgmi diag -r 1' there" % (rc, error), expected)
    if diag["runtime_error"] or not diag["results"]:
        return check(cid, "fail", "dcgmi diag ran no test: %s; run 'dcgmi diag -r 1' on the node and read its error"
                     % (diag["runtime_error"] or "its result lists none"), expected, "no test ran")
    counts = {}
    for entry in diag["results"]:
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    measured = ", ".join("%d %s" % (n, status) for status, n in sorted(counts.items()))
    bad = [entry for entry in diag["results"] if entry["status"] not in ("pass", "warn", "skip", "not_run")]
    warned = [entry for entry in diag["results"] if entry["status"] == "warn"]
    if not bad and not counts.get("pass") and not warned:
        why = "; ".join(sorted({message for entry in diag["results"] for message in entry["messages"]})) or "no reason given"
        return check(cid, "skip", "dcgmi diag skipped every test (%s), so it verified nothing" % why, expected, measured)

    def describe(entry):
        return "%s on GPU %s%s" % (entry["test"], entry["gpu"], ": " + " ".join(entry["messages"]) if entry["messages"] else "")

    if bad:
        return check(cid, "fail", "%s; drain the node, rerun that level of dcgmi diag to confirm, and have the GPU checked "
                     "(DCGM's message names the fault)" % "; ".join(
                         describe(entry) if entry["status"] == "fail" else "%s (status %s)" % (describe(entry), entry["status"])
                         for entry in bad), expected, measured)
    message = "every DCGM diagnostic test passed%s" % (" (DCGM %s)" % diag["version"] if diag["version"] else "")
    if warned:
        message += "; warnings: %s" % "; ".join(describe(entry) for entry in warned)
    return check(cid, "pass", message, expected, measured)


def _bandwidth(options, gpus, thresholds):
    cid = "gpu.host_device_bandwidth"
    if options.get("bandwidth") is None:
        return check(cid, "skip", options.get("bandwidth_reason") or "nvbandwidth did not run on this node")
    text, rc = _command(options["bandwidth"])
    floor = thresholds.get("host_device_gbps")
    expected = None if floor is None else ">= %s GB/s per GPU" % floor
    try:
        figures = parse_nvbandwidth(text)["gbps"]
    except ValueError as error:
        return check(cid, "fail", "%s (exit code %s); run 'nvbandwidth -t host_to_device_memcpy_ce' on the node and read "
                     "its error" % (error, rc), expected)

    def name(index):
        return _label(gpus[index]) if index < len(gpus) else "GPU %d" % index

    measured = ", ".join("GPU %d %.2f GB/s" % (index, value) for index, value in sorted(figures.items()))
    if floor is None:
        return check(cid, "skip", "measured %s, but there is no host_device_gbps threshold for this GPU model; set one in "
                     "validate_gpu_thresholds" % measured, None, measured)
    # nvbandwidth numbers GPUs as CUDA does; on a node of one model that is nvidia-smi's PCI order.
    problems = ["%s: expected >= %s GB/s, measured %.2f GB/s" % (name(index), floor, value)
                for index, value in sorted(figures.items()) if value < floor]
    problems += ["%s: expected >= %s GB/s, not measured" % (name(index), floor) for index in range(len(gpus)) if index not in figures]
    if problems:
        return check(cid, "fail", "%s; check that GPU's PCIe link (gpu.pcie_link), run nvbandwidth bound to the CPU socket "
                     "nearest to it (numactl --cpunodebind), and look at the IOMMU setting (iommu=pt)" % "; ".join(problems),
                     expected, measured)
    lowest = min(figures, key=figures.get)
    return check(cid, "pass", "every GPU copies from host memory at >= %s GB/s (lowest: %s, %.2f GB/s)"
                 % (floor, name(lowest), figures[lowest]), expected, measured)


def gpu_checks(facts, expected_gpus, thresholds, options):
    """Every GPU check of one node, in the order of CHECK_IDS.

    facts: what nvidia_gpu_facts returned (its registered result), {} when it did not run. expected_gpus:
    validate_expected_gpus ('8 x NVIDIA A100-SXM4-80GB', '' when not set). thresholds: thresholds_for() of the node's
    model, possibly {}. options: kernel_module_managed (bool, default true); dcgm and bandwidth, the registered results
    (or the stdout) of `dcgmi diag -r N -j` and `nvbandwidth -t host_to_device_memcpy_ce`, or None when they did not run,
    with dcgm_reason and bandwidth_reason saying why.
    """
    facts, thresholds, options = facts or {}, thresholds or {}, options or {}
    reason = unusable(facts)
    gpus = [] if reason else facts["gpus"]

    def per_gpu(check_id, evaluate):
        return check(check_id, "skip", reason) if reason else evaluate()

    return [
        _count_model(facts, expected_gpus, options),
        _driver_state(facts, options),
        per_gpu("gpu.persistence_mode", lambda: _persistence(gpus)),
        per_gpu("gpu.ecc", lambda: _ecc(gpus)),
        _xid(facts, gpus),
        per_gpu("gpu.nvlink", lambda: _nvlink(facts, gpus)),
        per_gpu("gpu.pcie_link", lambda: _pcie(gpus, thresholds)),
        per_gpu("gpu.throttle", lambda: _throttle(gpus)),
        _dcgm(options),
        _bandwidth(options, gpus, thresholds),
    ]
