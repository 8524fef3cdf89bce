# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The training world of a staging plan (shard_world, through make_plan): node and global ranks, the epoch, the digest."""

from __future__ import annotations

import random

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import make_plan

GIB = 1 << 30


def shards(samples, size=1000):
    return [{"name": "s-%03d.tar" % i, "url": "http://store/s-%03d.tar" % i, "size": size, "sha256": "0" * 64,
             "samples": count} for i, count in enumerate(samples)]


def nodes(ranks):
    return {host: {"free_bytes": 100 * GIB, "ranks": count} for host, count in ranks.items()}


def worlds(plan):
    return {host: node["world"] for host, node in plan["nodes"].items()}


def test_nodes_are_numbered_by_name_and_ranks_follow_them():
    plan = make_plan({"name": "ds", "mode": "partition"}, shards([10] * 12), nodes({"gpu-b": 4, "gpu-a": 2, "gpu-c": 2}))
    world = worlds(plan)
    assert [(world[h]["node_rank"], [r["global_rank"] for r in world[h]["ranks"]]) for h in ("gpu-a", "gpu-b", "gpu-c")] == [
        (0, [0, 1]), (1, [2, 3, 4, 5]), (2, [6, 7])]
    assert world["gpu-b"]["ranks"][3] == {"local_rank": 3, "global_rank": 5, "list": "ranks/rank-0003.txt"}
    assert {(w["nodes"], w["world_size"], w["rendezvous"]) for w in world.values()} == {(3, 8, "gpu-a")}
    assert len({w["plan_digest"] for w in world.values()}) == 1 and world["gpu-a"]["plan_digest"].startswith("sha256:")


def test_the_numbering_and_the_digest_hold_across_host_order_a_rerun_and_a_killed_run():
    records, ranks = shards([7, 9, 11, 13, 15, 17, 19, 21]), {"n%d" % i: 1 + i % 3 for i in range(6)}
    first = make_plan({"name": "ds", "mode": "partition"}, records, nodes(ranks))
    hosts = list(ranks)
    random.Random(4).shuffle(hosts)
    shuffled = make_plan({"name": "ds", "mode": "partition"}, records, nodes({h: ranks[h] for h in hosts}))
    # A re-run starts from the plan written last time; a killed run from the one before it: the same plan either way.
    again = make_plan({"name": "ds", "mode": "partition"}, records, nodes(ranks), previous=first)
    assert worlds(first) == worlds(shuffled) == worlds(again)
    assert first["world"] == again["world"]


def test_the_digest_changes_with_the_placement_or_the_ranks():
    records = shards([10] * 8)
    base = make_plan({"name": "ds", "mode": "partition"}, records, nodes({"a": 1, "b": 1}))["world"]["plan_digest"]
    more_ranks = make_plan({"name": "ds", "mode": "partition"}, records, nodes({"a": 2, "b": 1}))["world"]["plan_digest"]
    replicated = make_plan({"name": "ds", "mode": "replicate"}, records, nodes({"a": 1, "b": 1}))["world"]["plan_digest"]
    assert len({base, more_ranks, replicated}) == 3


def test_the_epoch_is_what_the_smallest_rank_holds_and_says_what_it_leaves_unread():
    # Unequal shards: the split balances samples within one shard, so the ranks' counts differ.
    plan = make_plan({"name": "ds", "mode": "partition"}, shards([100, 90, 80, 70, 5]), nodes({"a": 2, "b": 1}))
    per_rank = [count for host in ("a", "b") for count in plan["nodes"][host]["rank_samples"]]
    epoch = plan["world"]["epoch"]
    assert epoch == {"unit": "samples", "per_rank": min(per_rank), "unread": sum(per_rank) - 3 * min(per_rank)}
    assert epoch["unread"] > 0 and plan["nodes"]["b"]["world"]["epoch"] == epoch


def test_without_sample_counts_the_epoch_is_in_bytes():
    records = shards([None] * 6, size=4096)
    plan = make_plan({"name": "ds", "mode": "partition"}, records, nodes({"a": 1, "b": 2}))
    assert plan["world"]["epoch"]["unit"] == "bytes"
    assert plan["world"]["epoch"]["per_rank"] == min(b for n in plan["nodes"].values() for b in n["rank_bytes"])


def test_a_replicated_plan_numbers_its_world_the_same_way():
    plan = make_plan({"name": "ds", "mode": "replicate"}, shards([10] * 6), nodes({"y": 2, "x": 2}))
    assert plan["world"]["rendezvous"] == "x" and plan["nodes"]["y"]["world"]["ranks"][0]["global_rank"] == 2
    # Each node's ranks split the whole dataset: every rank holds 3 shards of 10 samples.
    assert plan["world"]["epoch"] == {"unit": "samples", "per_rank": 30, "unread": 0}
