# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_driver role's plan of each node's driver, its preflight problems and Ubuntu's precompiled modules: a thin
wrapper over plugin_utils/nvidia_driver_choice, nvidia_driver_preflight, nvidia_driver_ubuntu_modules and
nvidia_driver_swap."""

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.choice import (
    DriverChoiceError, cuda_driver_problem, driver_plans, node_flavor)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.preflight import preflight_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.swap import (
    other_kernel_packages, swap_out, swap_problem)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.ubuntu_modules import precompiled_modules
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.versions import package_version


def nvidia_driver_plans(nodes, groups, settings):
    """{host: plan} for the hosts of ``nodes`` ({host: what the role noted about its GPUs and asks; none for a host
    the role does not manage}), see driver_plans."""
    pattern = re.compile(settings.get("cluster_group_pattern") or r"(?!)")
    cluster_of = {}
    for group in sorted(groups):
        if pattern.search(group):
            for host in groups[group]:
                cluster_of.setdefault(host, group)
    plans = {}
    for host, node in (nodes or {}).items():
        if node:
            plans[host] = dict(node, cluster=cluster_of.get(host, ""), fixed_branch=boolean(node.get("fixed_branch", False)),
                               branch=str(node.get("branch") or ""), platform_branch=str(node.get("platform_branch") or ""),
                               offered_branches=[str(b) for b in node.get("offered_branches") or []])
    return driver_plans(plans, settings.get("consistency", "branch"))


def nvidia_driver_cuda_problem(cuda_version, branch, host, what):
    """'' where driver ``branch`` runs builds for ``cuda_version``, else the problem (see cuda_driver_problem)."""
    return cuda_driver_problem(host, what, cuda_version or "", branch or "")


def nvidia_driver_node_flavor(pci_gpus, host, flavor, branches):
    """The kernel module flavour ``host``'s GPUs get for ``flavor`` on the first set branch of ``branches`` (see
    node_flavor)."""
    try:
        return node_flavor(host, pci_gpus, flavor, branches)
    except DriverChoiceError as error:
        raise AnsibleFilterError(str(error))


def nvidia_driver_problems(settings, found):
    """One line per problem, the plan's first; empty when all is well (see plugin_utils/nvidia_driver_preflight)."""
    try:
        return preflight_problems(settings, found)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("nvidia_driver_problems: %s" % error) from error


def nvidia_driver_ubuntu_modules(installed_lines, available, kernel, module_flavour, pinned_version=""):
    """Canonical's precompiled modules that follow ``kernel``, or none for DKMS (see plugin_utils/nvidia_driver_ubuntu_modules)."""
    return precompiled_modules([str(line) for line in installed_lines or []], [str(name) for name in available or []],
                               str(kernel or ""), str(module_flavour or ""), str(pinned_version or ""))


def nvidia_driver_swap_out(lines, keep, other_kernel_packages, own_family_source=""):
    """The installed packages of another driver that a node moving to this one removes (see
    plugin_utils/nvidia_driver_swap)."""
    return swap_out([str(line) for line in lines or []], [str(name) for name in keep or []],
                    [str(name) for name in other_kernel_packages or []], str(own_family_source or ""))


def nvidia_driver_swap_problem(source_lines, host, swapped_out, driver):
    """'' where a driver swap removes driver packages only, else why not (see plugin_utils/nvidia_driver_swap)."""
    return swap_problem(str(host), [str(line) for line in source_lines or []], [str(name) for name in swapped_out or []],
                        str(driver))


def nvidia_driver_other_kernel_packages(kernel, flavor, precompiled, precompiled_remove=None):
    """The kernel packages a node moving to this flavour swaps out (see plugin_utils/_nvidia_driver/swap)."""
    return other_kernel_packages(dict(kernel or {}), flavor, bool(precompiled), list(precompiled_remove or []))


def nvidia_driver_package_version(available, version, branch, manager):
    """The version of the driver's packages to install, '' where the source has none that fits (see
    plugin_utils/_nvidia_driver/versions)."""
    try:
        return package_version([str(item) for item in available or []], version, branch, manager)
    except ValueError as error:
        raise AnsibleFilterError("nvidia_driver_package_version: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"nvidia_driver_plans": nvidia_driver_plans, "nvidia_driver_cuda_problem": nvidia_driver_cuda_problem,
                "nvidia_driver_node_flavor": nvidia_driver_node_flavor, "nvidia_driver_problems": nvidia_driver_problems,
                "nvidia_driver_ubuntu_modules": nvidia_driver_ubuntu_modules,
                "nvidia_driver_swap_out": nvidia_driver_swap_out,
                "nvidia_driver_swap_problem": nvidia_driver_swap_problem,
                "nvidia_driver_package_version": nvidia_driver_package_version,
                "nvidia_driver_other_kernel_packages": nvidia_driver_other_kernel_packages}
