# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's driver checks: gpu.driver_version and gpu.driver_consistency (the user-space driver), and gpu.driver_flavor
(the loaded kernel module's flavour and branch against the node's GPUs and its plan).

The GPUs' needs come from their PCI ids (nvidia_generations, through nvidia_driver_choice); the plan from the file the
nvidia_driver role writes on the node (its branch and flavour), where there is one.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import describe
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.choice import DriverChoiceError, node_choice
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.result import (
    check, consistency, ran, version_matches, versions_in_names)

CHECK_ID = "gpu.driver_flavor"


def installed_driver(raw):
    """The user-space driver's version: nvidia-smi's when the driver answers, else libnvidia-ml.so.VERSION's."""
    gpu = raw.get("gpu") or {}
    if gpu.get("driver_state") == "ok" and gpu.get("driver_version"):
        return gpu["driver_version"]
    versions = versions_in_names(raw.get("nvml_libs") or [])
    return versions[-1] if versions else None


def driver_checks(host, raw, cluster_versions):
    expected = raw["expected"]["driver_version"]
    measured = installed_driver(raw)
    if measured is None:
        version = (check("gpu.driver_version", "skip", "no NVIDIA driver installed and no version expected")
                   if not expected else
                   check("gpu.driver_version", "fail", "no NVIDIA user-space driver (libnvidia-ml.so.*) found on %s; "
                         "run site.yml (nvidia_driver)" % host, expected, None))
    elif not expected:
        version = check("gpu.driver_version", "skip", "driver %s installed; set validate_expected_driver_version (or "
                        "nvidia_driver_version / nvidia_driver_branch) to check it" % measured, None, measured)
    elif version_matches(expected, measured):
        version = check("gpu.driver_version", "pass", "driver %s as expected" % measured, expected, measured)
    else:
        version = check("gpu.driver_version", "fail", "driver %s installed, %s expected: run site.yml, or correct "
                        "validate_expected_driver_version for %s's group" % (measured, expected, host), expected, measured)
    gpu = raw.get("gpu") if ran(raw.get("gpu")) else {}
    return [version, consistency("gpu.driver_consistency", "driver", host, measured, cluster_versions),
            driver_flavor_check(host, gpu, raw.get("driver_plan"))]


def driver_flavor_check(host, facts, plan):
    """facts: nvidia_gpu_facts' result ({} when it did not run); plan: {"flavor", "branch"} the nvidia_driver role
    planned for the node, or None."""
    facts = facts or {}
    pci_gpus = facts.get("pci_gpus") or []
    loaded, version = facts.get("kernel_module_flavor"), facts.get("kernel_module_version")
    if not pci_gpus:
        return check(CHECK_ID, "skip", "no NVIDIA GPU on PCI")
    if not loaded or not version:
        return check(CHECK_ID, "skip", "no NVIDIA kernel module is loaded (gpu.driver_state says why)")
    measured = "%s %s" % (loaded, version)
    branch = str(version).split(".", 1)[0]
    expected = "%s %s" % (plan.get("flavor"), plan.get("branch")) if plan else None
    try:
        choice = node_choice(host, pci_gpus, loaded, branch)
    except DriverChoiceError as error:
        return check(CHECK_ID, "fail", "the loaded %s kernel module %s cannot drive this node's GPUs: %s; run site.yml "
                     "(nvidia_driver) to install the driver they need" % (loaded, version, error), expected, measured)
    if plan and (plan.get("flavor"), str(plan.get("branch"))) != (loaded, branch):
        return check(CHECK_ID, "fail", "the loaded kernel module is %s %s but nvidia_driver planned %s: the new module "
                     "waits for a reboot, or the node drifted; roll it through rolling_upgrade (drain, reboot, verify)"
                     % (loaded, version, expected), expected, measured)
    return check(CHECK_ID, "pass", "%s kernel module %s loaded%s; it drives %s" % (
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
