# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The microk8s role's view of the cluster for its converged_state record, its preflight problems, who joins and which
nodes are Ready: a thin wrapper over plugin_utils/_microk8s."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._microk8s.members import joins, ready_names
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._microk8s.preflight import preflight_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._microk8s.view import observed_items


def microk8s_observed(view, node_name, node_address, addons, device_plugin=False, high_availability=False):
    """The cluster's items this host's record holds (see plugin_utils/microk8s_view)."""
    return observed_items(view, node_name, node_address, list(addons), bool(device_plugin), bool(high_availability))


def microk8s_problems(settings):
    """One line per problem, empty when all is well (see plugin_utils/_microk8s/preflight)."""
    try:
        return preflight_problems(settings)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("microk8s_problems: %s" % error) from error


def microk8s_joins(nodes_json, host, first_head, node_name, node_address):
    """Whether ``host`` joins the cluster whose nodes ``nodes_json`` lists (see plugin_utils/_microk8s/members)."""
    return joins(nodes_json, host, first_head, node_name, node_address)


def microk8s_ready_names(nodes_json):
    """The Ready nodes' names (see plugin_utils/_microk8s/members)."""
    return ready_names(nodes_json)


class FilterModule:
    def filters(self):
        return {"microk8s_observed": microk8s_observed, "microk8s_problems": microk8s_problems,
                "microk8s_joins": microk8s_joins, "microk8s_ready_names": microk8s_ready_names}
