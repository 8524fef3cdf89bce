# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_monitoring_problems: the gpu_monitoring role's preflight, a thin face over plugin_utils.gpu_monitoring_checks."""

from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils.gpu_monitoring_checks import preflight_problems


def gpu_monitoring_problems(settings, host, ss_lines=None, ss_error=None):
    if not isinstance(settings, dict):
        raise AnsibleFilterError("gpu_monitoring_problems expects the role's settings as a mapping")
    return preflight_problems(settings, host, list(ss_lines or []), ss_error or None)


class FilterModule:
    def filters(self):
        return {"gpu_monitoring_problems": gpu_monitoring_problems}
