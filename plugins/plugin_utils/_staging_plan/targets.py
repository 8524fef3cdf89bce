# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: what the planner knows of each target from the shard_staging role's probe (the shard_plan action's
``reports`` argument): its room per dataset less its reserve, its training ranks, where it serves peers, where its plans
go. May change without notice."""

import os

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.placement import node_ranks


def less_reserve(result, reserve):
    """One shard_space result with ``reserve`` taken off. The planner weighs a node by free + ours (shard_space's
    ours_bytes), which a killed staging run cannot change; so is the reserve: the part that free (which the run did
    lower) cannot cover comes off ours, and free + ours is max(0, free + ours - reserve) however far a run got.
    A report without ours_bytes (an older shard_space) is planned on free + held as before."""
    free = int(result["free_bytes"])
    info = {"free_bytes": max(0, free - reserve), "held_bytes": result["held_bytes"], "total_bytes": result["total_bytes"]}
    if result.get("ours_bytes") is not None:
        info["ours_bytes"] = max(0, int(result["ours_bytes"]) - max(0, reserve - free))
    return info


def target_room(room):
    """{dataset: {free_bytes, held_bytes, total_bytes[, ours_bytes]}} of one target from its ``room`` report
    ({"reserve_bytes", "results": [shard_space results]}), its reserve taken off; {} if it never reported."""
    room = room or {}
    reserve = int(room.get("reserve_bytes") or 0)
    return {result["item"]["name"]: less_reserve(result, reserve) for result in room.get("results", []) if "free_bytes" in result}


def target_ranks(host, read):
    """{"ranks", "ranks_from"} of one target from its ``ranks`` report ({"set": shard_staging_ranks_per_node, "gpus",
    "gpu_group"}): shard_staging_ranks_per_node where it is set (checked by placement.node_ranks), else the GPU count of
    its facts, else 1. A node of the GPU group whose facts count no GPU needs the variable."""
    read = read or {}
    given = read.get("set")
    if given is not None:
        return {"ranks": node_ranks(host, {"ranks": given}), "ranks_from": "shard_staging_ranks_per_node"}
    gpus = read.get("gpus")
    if gpus is not None and int(gpus) >= 1:
        return {"ranks": int(gpus), "ranks_from": "nvidia_gpu_facts"}
    if gpus is not None and read.get("gpu_group"):
        raise ShardPlanError("%s: it is in shard_staging_gpu_group but nvidia_gpu_facts counts no GPU there, and "
                             "shard_staging_ranks_per_node is unset: set shard_staging_ranks_per_node for it (the ranks that "
                             "read its shards), bring its GPUs back, or take it out of shard_staging_targets" % host)
    return {"ranks": 1, "ranks_from": "default"}


def target_inputs(targets, reports):
    """({host: {dataset: its room, with the host's ranks and ranks_from}}, {host: where it serves peers, or None}) of
    ``targets`` from ``reports`` ({host: {"room", "peer_endpoint", "ranks"}}, as the role's probe found them)."""
    reports = {host: reports.get(host) or {} for host in targets}
    space = {host: target_room(reports[host].get("room")) for host in targets}
    ranks = {host: target_ranks(host, reports[host].get("ranks")) for host in targets}
    for host in targets:
        for room in space[host].values():
            room.update(ranks[host])
    return space, {host: reports[host].get("peer_endpoint") for host in targets}


def cluster_bases(clusters, reports, plan_dir):
    """{cluster: the directory its plans go under}: where its first target's room report says (the role's
    shard_staging_plan_dir as that host sees it: its default follows the inventory source that defines the host), else
    ``plan_dir``. A run over several clusters and a run sliced by cluster find them in the same place."""
    return {cluster: os.path.abspath(os.path.expanduser(
            ((reports.get(hosts[0]) or {}).get("room") or {}).get("plan_dir") or plan_dir))
            for cluster, hosts in clusters.items()}
