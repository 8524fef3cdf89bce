# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who joins a MicroK8s cluster and which nodes are Ready, from `microk8s kubectl get nodes -o json` on its first head:
pure Python.

A host is already a member where its node name or its InternalIP is in the node list (a renamed host keeps its
address); the first head formed the cluster and never joins.
"""

import json


def _items(nodes_json):
    return json.loads(nodes_json)["items"]


def joins(nodes_json, host, first_head, node_name, node_address):
    """Whether ``host`` joins: it is not ``first_head``, and neither ``node_name`` nor ``node_address`` is a node's."""
    nodes = _items(nodes_json)  # an empty text is an error here: the list was read before the joins
    names = [node["metadata"]["name"] for node in nodes]
    addresses = [address.get("address") for node in nodes for address in node["status"]["addresses"]
                 if address.get("type") == "InternalIP"]
    return host != first_head and node_name not in names and node_address not in addresses


def ready_names(nodes_json):
    """The names of the nodes whose Ready condition is True, in the list's order; none for an empty text (a read that
    failed, to be retried)."""
    return [node["metadata"]["name"] for node in _items(nodes_json or '{"items": []}')
            if any(condition.get("type") == "Ready" and condition.get("status") == "True"
                   for condition in node["status"]["conditions"])]
