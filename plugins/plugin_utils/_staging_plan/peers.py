# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: each node's peer configuration in a peer-assisted plan: where it listens, which peer it asks for which shard,
who asks it. May change without notice."""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import peer_roles


def peer_url(endpoint):
    address = endpoint["address"]
    return "http://%s:%d" % ("[%s]" % address if ":" in address else address, int(endpoint["port"]))


def peer_configs(dataset, plan, endpoints):
    """Per node: where it listens, which peer it asks for which shard (and that peer's URL), who asks it.

    ``endpoints``: {host: {"address", "port"}} where each node serves its shards to the others.
    """
    roles = peer_roles(plan)
    missing = sorted(host for host in roles if not (endpoints.get(host) or {}).get("address"))
    if missing:
        raise ShardPlanError("dataset %r is staged peer-assisted but %s found no address to serve peers on: set "
                             "shard_staging_peer_address for them (their address on the cluster network), or give the dataset "
                             "peer_assist: false" % (dataset, ", ".join(missing)))
    configs = {}
    for host, role in roles.items():
        upstream = sorted(set(role["sources"].values()))
        configs[host] = {
            "node": host,
            "address": endpoints[host]["address"],
            "port": int(endpoints[host]["port"]),
            "peers": {peer: peer_url(endpoints[peer]) for peer in upstream},
            "sources": role["sources"],
            "downstream": role["downstream"],
        }
    return configs
