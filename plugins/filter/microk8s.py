# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The microk8s role's view of the cluster for its converged_state record: a thin wrapper over plugin_utils/microk8s_view."""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._microk8s.view import observed_items


def microk8s_observed(view, node_name, node_address, addons, device_plugin=False, high_availability=False):
    """The cluster's items this host's record holds (see plugin_utils/microk8s_view)."""
    return observed_items(view, node_name, node_address, list(addons), bool(device_plugin), bool(high_availability))


class FilterModule:
    def filters(self):
        return {"microk8s_observed": microk8s_observed}
