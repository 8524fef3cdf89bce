# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's gpu.driver_flavor: the loaded kernel module's flavour and branch against the node's GPUs and its plan.

The GPUs' needs come from their PCI ids (nvidia_generations, through nvidia_driver_choice); the plan from the file the
nvidia_driver role writes on the node (its branch and flavour), where there is one.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import describe
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils.nvidia_driver_choice import DriverChoiceError, node_choice

CHECK_ID = "gpu.driver_flavor"


def _check(status, message, expected=None, measured=None):
    return {"check": CHECK_ID, "status": status, "expected": expected, "measured": measured, "message": message}


def driver_flavor_check(host, facts, plan):
    """facts: nvidia_gpu_facts' result ({} when it did not run); plan: {"flavor", "branch"} the nvidia_driver role
    planned for the node, or None."""
    facts = facts or {}
    pci_gpus = facts.get("pci_gpus") or []
    loaded, version = facts.get("kernel_module_flavor"), facts.get("kernel_module_version")
    if not pci_gpus:
        return _check("skip", "no NVIDIA GPU on PCI")
    if not loaded or not version:
        return _check("skip", "no NVIDIA kernel module is loaded (gpu.driver_state says why)")
    measured = "%s %s" % (loaded, version)
    branch = str(version).split(".", 1)[0]
    expected = "%s %s" % (plan.get("flavor"), plan.get("branch")) if plan else None
    try:
        choice = node_choice(host, pci_gpus, loaded, branch)
    except DriverChoiceError as error:
        return _check("fail", "the loaded %s kernel module %s cannot drive this node's GPUs: %s; run site.yml (nvidia_driver) "
                      "to install the driver they need" % (loaded, version, error), expected, measured)
    if plan and (plan.get("flavor"), str(plan.get("branch"))) != (loaded, branch):
        return _check("fail", "the loaded kernel module is %s %s but nvidia_driver planned %s: the new module waits for a "
                      "reboot, or the node drifted; roll it through rolling_upgrade (drain, reboot, verify)"
                      % (loaded, version, expected), expected, measured)
    return _check("pass", "%s kernel module %s loaded%s; it drives %s" % (
        loaded, version, ", as planned" if plan else "", ", ".join(choice["architectures"]) or "its GPUs"), expected, measured)


def node_driver(facts):
    """What the report's node table shows of a GPU node's driver: {"architectures" (from the PCI ids), "branch" and
    "flavor" (of the loaded kernel module, None where none is loaded)}; None without GPUs on PCI."""
    pci_gpus = (facts or {}).get("pci_gpus") or []
    if not pci_gpus:
        return None
    version = facts.get("kernel_module_version")
    return {"architectures": sorted({describe(gpu["device_id"])["architecture"] or "unknown" for gpu in pci_gpus}),
            "branch": str(version).split(".", 1)[0] if version else None, "flavor": facts.get("kernel_module_flavor")}
