# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host_firewall role's preflight problems and rule set: thin wrappers over plugin_utils/_host_firewall/rules."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._host_firewall import rules


def host_firewall_problems(settings, found):
    """One line per problem, empty when all is well (see plugin_utils/_host_firewall/rules)."""
    try:
        return rules.preflight_problems(settings, found)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("host_firewall_problems: %s" % error) from error


def host_firewall_ruleset(settings, found):
    """The address sets and ports the role's nftables template writes (see plugin_utils/_host_firewall/rules)."""
    try:
        return rules.ruleset(settings, found)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("host_firewall_ruleset: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"host_firewall_problems": host_firewall_problems, "host_firewall_ruleset": host_firewall_ruleset}
