# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The training world of a cluster's staging plan: which node is node 0, the global ranks of each node's lists, the
world size, one epoch length that every rank can meet, and a digest by which a launcher sees that every node holds the
same plan. ``add_world`` adds it to a plan that ``make_plan`` made; each node's hand-off writes its part (world.json).
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.handoff import rank_list

# What a node's hand-off holds of a plan: the placement and the ranks, not what moved since the last plan, so a re-run
# that moves nothing keeps the digest.
_PLACED = ("dataset", "mode", "shards", "assignment", "replicated_on", "cached")
_NODE_PLACED = ("ranks", "node_rank", "first_rank", "rank_bytes", "rank_samples")


def add_world(plan):
    """Number the plan's nodes and ranks, and add the world: "world" for the plan; per node "node_rank", "first_rank"
    (the global rank of its rank 0) and "world" (what its hand-off says, ``node_world``).

    Nodes are numbered in the order of their names, so a re-run, a killed run or another order of the hosts in the
    inventory numbers them the same; a node that joins or leaves renumbers the nodes after it. Node 0 is the rendezvous.
    The epoch is the fewest samples any rank's list holds (bytes where a shard of the index has no sample count): a
    length every rank of the world can meet, so no rank waits at the end of an epoch for others that ran out. "unread" is
    what the ranks' lists hold beyond it, per epoch."""
    hosts = sorted(plan["nodes"])
    first = 0
    for node_rank, host in enumerate(hosts):
        node = plan["nodes"][host]
        node["node_rank"], node["first_rank"] = node_rank, first
        first += node["ranks"]
    unit = "samples" if plan["rank_split_by"] == "samples" else "bytes"
    per_rank = [value for host in hosts for value in plan["nodes"][host]["rank_" + unit]]
    epoch = min(per_rank)
    plan["world"] = {"nodes": len(hosts), "size": first, "rendezvous": hosts[0],
                     "epoch": {"unit": unit, "per_rank": epoch, "unread": sum(per_rank) - epoch * first}}
    plan["world"]["plan_digest"] = plan_digest(plan)
    for host in hosts:
        plan["nodes"][host]["world"] = node_world(plan, host)


def plan_digest(plan):
    """"sha256:HEX" of the plan's placement, the nodes' numbering and rank split, and the world."""
    placed = {key: plan.get(key) for key in _PLACED}
    placed["nodes"] = {host: {key: node.get(key) for key in _NODE_PLACED} for host, node in plan["nodes"].items()}
    placed["world"] = {key: value for key, value in plan["world"].items() if key != "plan_digest"}
    encoded = json.dumps(placed, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return "sha256:" + hashlib.sha256(encoded).hexdigest()


def node_world(plan, host):
    """A node's part of the world, as its hand-off writes it (world.json): its node rank, the global rank of each of its
    lists (ranks/rank-NNNN.txt, local rank NNNN), the world, the rendezvous node, the epoch and the plan's digest."""
    node, world = plan["nodes"][host], plan["world"]
    return {
        "dataset": plan["dataset"],
        "node": host,
        "node_rank": node["node_rank"],
        "nodes": world["nodes"],
        "world_size": world["size"],
        "rendezvous": world["rendezvous"],
        "ranks": [{"local_rank": rank, "global_rank": node["first_rank"] + rank, "list": rank_list(rank)}
                  for rank in range(node["ranks"])],
        "epoch": world["epoch"],
        "plan_digest": world["plan_digest"],
    }
