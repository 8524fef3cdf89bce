# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nccl role's preflight problems: a thin wrapper over plugin_utils/nccl_preflight."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.preflight import preflight_problems


def nccl_problems(settings, found):
    """One line per problem, empty when all is well (see plugin_utils/nccl_preflight)."""
    try:
        return preflight_problems(settings, found)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("nccl_problems: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"nccl_problems": nccl_problems}
