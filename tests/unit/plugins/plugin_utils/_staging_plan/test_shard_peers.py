# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each node's peer configuration in a peer-assisted plan."""
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.peers import peer_configs, peer_url
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import make_plan, peer_roles

SHARDS = [{"name": "s-%d.tar" % i, "url": "http://store/s-%d.tar" % i, "size": 100, "sha256": None} for i in range(6)]
NODES = {"n%d" % i: {"free_bytes": 10 ** 6, "held_bytes": 0, "total_bytes": 10 ** 6} for i in range(3)}


def test_a_peers_url_brackets_an_ipv6_address():
    assert peer_url({"address": "10.0.0.1", "port": "8473"}) == "http://10.0.0.1:8473"
    assert peer_url({"address": "fd00::1", "port": 8473}) == "http://[fd00::1]:8473"


def test_each_node_learns_whom_to_ask_for_which_shard_and_who_asks_it():
    plan = make_plan({"name": "ds", "mode": "partition", "replicas": 2}, SHARDS, NODES)
    endpoints = {host: {"address": "10.0.0.%d" % (i + 1), "port": 8473} for i, host in enumerate(sorted(NODES))}
    configs = peer_configs("ds", plan, endpoints)
    roles = peer_roles(plan)
    assert sorted(configs) == sorted(roles)
    for host, config in configs.items():
        assert (config["node"], config["address"], config["port"]) == (host, endpoints[host]["address"], 8473)
        assert config["sources"] == roles[host]["sources"] and config["downstream"] == roles[host]["downstream"]
        assert config["peers"] == {peer: peer_url(endpoints[peer]) for peer in set(config["sources"].values())}


def test_nodes_with_no_address_to_serve_peers_on_are_named():
    plan = make_plan({"name": "ds", "mode": "partition", "replicas": 2}, SHARDS, NODES)
    endpoints = {"n0": {"address": "10.0.0.1", "port": 8473}, "n1": {"address": "", "port": 8473}}
    with pytest.raises(ShardPlanError, match=r"^dataset 'ds' is staged peer-assisted but n1, n2 found no address to serve peers "
                                             r"on: set shard_staging_peer_address"):
        peer_configs("ds", plan, endpoints)
