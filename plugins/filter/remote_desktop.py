# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remote_desktop role's preflight problems: a thin wrapper over plugin_utils/_workspace/remote_desktop."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._workspace.remote_desktop import preflight_problems


def remote_desktop_problems(settings, found):
    """One line per problem, empty when all is well (see plugin_utils/_workspace/remote_desktop)."""
    try:
        return preflight_problems(settings, found)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("remote_desktop_problems: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"remote_desktop_problems": remote_desktop_problems}
