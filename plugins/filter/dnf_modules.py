# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The dnf commands that enable one module stream: a thin wrapper over plugin_utils/dnf_modules."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.dnf_modules import module_stream_commands


def dnf_module_stream_commands(listing, module, stream):
    """[] or the argv lists that make ``module:stream`` the enabled stream (see module_stream_commands)."""
    try:
        return module_stream_commands(listing, module, stream)
    except ValueError as error:
        raise AnsibleFilterError("dnf_module_stream_commands: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"dnf_module_stream_commands": dnf_module_stream_commands}
