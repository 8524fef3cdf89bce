# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_container_toolkit role's preflight problems: a thin wrapper over
plugin_utils/nvidia_container_toolkit_preflight."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_container_toolkit.preflight import (
    preflight_problems)


def nvidia_container_toolkit_problems(settings):
    """One line per problem, empty when all is well (see plugin_utils/nvidia_container_toolkit_preflight)."""
    try:
        return preflight_problems(settings)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("nvidia_container_toolkit_problems: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"nvidia_container_toolkit_problems": nvidia_container_toolkit_problems}
