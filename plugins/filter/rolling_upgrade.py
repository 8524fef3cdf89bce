# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling_upgrade role's preflight problems: a thin wrapper over plugin_utils/_rolling_upgrade/preflight."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._rolling_upgrade.allocatable import allocatable_problem
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._rolling_upgrade.preflight import preflight_problems


def rolling_upgrade_problems(settings):
    """One line per problem, empty when all is well (see plugin_utils/_rolling_upgrade/preflight)."""
    try:
        return preflight_problems(settings)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("rolling_upgrade_problems: %s" % error) from error


def rolling_upgrade_allocatable_problem(node, pci_gpus, mig_gpus=None):
    """'' or what the node shows against what it should (see plugin_utils/_rolling_upgrade/allocatable)."""
    return allocatable_problem(dict(node or {}), int(pci_gpus), list(mig_gpus or []))


class FilterModule:
    def filters(self):
        return {"rolling_upgrade_problems": rolling_upgrade_problems,
                "rolling_upgrade_allocatable_problem": rolling_upgrade_allocatable_problem}
