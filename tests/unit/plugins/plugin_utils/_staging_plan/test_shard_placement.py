# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Placement: shares follow ranks, every node within one shard of its share, little moves on a change, ranks even."""

from __future__ import annotations

import random

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.placement import (
    fair_shares, node_ranks, place_shards, split_ranks)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError

UNLIMITED = 1 << 62
TB = 10 ** 12


def shard_sizes(count, unequal=False, seed=7, unit=1000):
    rng = random.Random(seed)
    return {f"s-{number:06d}.tar": (rng.randint(unit // 2, 2 * unit) if unequal else unit) for number in range(count)}


def loads(assignment, sizes):
    held = {}
    for name, hosts in assignment.items():
        for host in hosts:
            held[host] = held.get(host, 0) + sizes[name]
    return held


def moved(before, after):
    return sum(len(set(after[name]) - set(before.get(name, ()))) for name in after)


@pytest.mark.parametrize("nodes, shards", [(8, 64), (64, 6_400), (1_000, 20_000)])
@pytest.mark.parametrize("unequal", [False, True], ids=["equal", "unequal"])
@pytest.mark.parametrize("copies", [1, 2])
def test_every_node_holds_its_share_within_one_shard(nodes, shards, unequal, copies):
    sizes = shard_sizes(shards, unequal)
    ranks = {f"n{number:04d}": 8 for number in range(nodes)}
    assignment, shares, capped = place_shards(sizes, ranks, dict.fromkeys(ranks, UNLIMITED), copies)
    held = loads(assignment, sizes)
    largest = max(sizes.values())
    assert not capped and all(len(set(hosts)) == copies for hosts in assignment.values())
    assert all(held.get(host, 0) <= shares[host] + largest for host in ranks)
    # The target: max / average <= 1.02, or at most one shard above the fair share (checked above).
    average = copies * sum(sizes.values()) / nodes
    assert max(held.values()) / average <= 1.02 or max(held.values()) <= average + largest


def test_equal_gpus_with_disks_of_7_to_60_tb_hold_equal_bytes():
    # 16 nodes, 4 each of 7, 15, 30 and 60 TB; an 8 TB dataset in 8,000 shards of about 1 GB.
    sizes = shard_sizes(8_000, unequal=True, unit=10 ** 9)
    disks = {f"n{number:02d}": (7, 15, 30, 60)[number % 4] * TB for number in range(16)}
    assignment, _shares, capped = place_shards(sizes, dict.fromkeys(disks, 8), disks, 1)
    held = loads(assignment, sizes)
    assert not capped
    assert max(held.values()) / min(held.values()) <= 1.02


def test_nodes_of_8_and_4_gpus_hold_2_to_1():
    sizes = shard_sizes(12_000, unequal=True)
    ranks = {f"n{number:02d}": (8, 4)[number % 2] for number in range(16)}
    held = loads(place_shards(sizes, ranks, dict.fromkeys(ranks, UNLIMITED), 1)[0], sizes)
    per_rank = [held[host] / ranks[host] for host in ranks]
    assert max(per_rank) / min(per_rank) <= 1.02


def test_a_node_that_cannot_hold_its_share_is_capped_and_the_rest_shared_by_ranks():
    sizes = shard_sizes(3_000)
    limits = {"small": 300_000, "big-a": UNLIMITED, "big-b": UNLIMITED}
    assignment, shares, capped = place_shards(sizes, {"small": 4, "big-a": 4, "big-b": 8}, limits, 1)
    held = loads(assignment, sizes)
    assert capped == {"small"} and held["small"] <= 300_000
    assert shares == {"small": 300_000.0, "big-a": 900_000.0, "big-b": 1_800_000.0}
    assert abs(held["big-b"] / held["big-a"] - 2) < 0.02


def test_fair_shares_fill_like_water():
    shares, capped = fair_shares(100, {"a": 1, "b": 1, "c": 2}, {"a": 10, "b": 100, "c": 100}, 1)
    assert capped == {"a"} and shares == {"a": 10.0, "b": 30.0, "c": 60.0}
    # A node holds one copy of each shard at most, whatever its ranks.
    shares, capped = fair_shares(100, {"a": 10, "b": 1, "c": 1}, dict.fromkeys("abc", 10 ** 6), 2)
    assert capped == {"a"} and shares == {"a": 100.0, "b": 50.0, "c": 50.0}


@pytest.mark.parametrize("unequal", [False, True], ids=["equal", "unequal"])
@pytest.mark.parametrize("copies", [1, 2])
def test_adding_or_removing_one_node_of_100_moves_at_most_twice_the_ideal(unequal, copies):
    sizes = shard_sizes(10_000, unequal)
    ranks = {f"n{number:03d}": 8 for number in range(100)}
    before = place_shards(sizes, ranks, dict.fromkeys(ranks, UNLIMITED), copies)[0]
    grown = dict(ranks, n100=8)
    after = place_shards(sizes, grown, dict.fromkeys(grown, UNLIMITED), copies, previous=before)[0]
    assert moved(before, after) <= 2 * copies * len(sizes) / 101
    assert all(set(after[name]) - set(before[name]) <= {"n100"} for name in sizes if moved({name: before[name]}, {name: after[name]}))
    shrunk = {host: count for host, count in ranks.items() if host != "n050"}
    after = place_shards(sizes, shrunk, dict.fromkeys(shrunk, UNLIMITED), copies, previous=before)[0]
    own = sum("n050" in hosts for hosts in before.values())
    assert moved(before, after) <= 2 * own


@pytest.mark.parametrize("copies", [1, 2])
def test_a_rerun_with_nothing_changed_moves_nothing_and_keeps_the_order_of_copies(copies):
    sizes = shard_sizes(5_000, unequal=True)
    ranks = {f"n{number:02d}": (8, 4, 2)[number % 3] for number in range(30)}
    limits = {host: (10 ** 6 if host == "n07" else UNLIMITED) for host in ranks}
    first = place_shards(sizes, ranks, limits, copies)[0]
    assert place_shards(sizes, ranks, limits, copies, previous=first)[0] == first


def test_an_older_plan_keeps_every_copy_the_new_shares_allow():
    # A plan of the old planner: n0 holds 1.3x the average. Planning on it moves only what evens it out.
    sizes = shard_sizes(1_000)
    ranks = {f"n{number}": 1 for number in range(4)}
    hosts = ["n0"] * 325 + ["n1"] * 225 + ["n2"] * 225 + ["n3"] * 225
    old = {name: [host] for name, host in zip(sorted(sizes), hosts)}
    new = place_shards(sizes, ranks, dict.fromkeys(ranks, UNLIMITED), 1, previous=old)[0]
    assert sorted(loads(new, sizes).values()) == [250_000] * 4
    assert moved(old, new) == 75


def test_placement_does_not_depend_on_input_order():
    sizes = shard_sizes(2_000, unequal=True)
    ranks = {f"n{number}": 1 + number % 3 for number in range(9)}
    reference = place_shards(sizes, ranks, dict.fromkeys(ranks, UNLIMITED), 2)[0]
    names, hosts = list(sizes), list(ranks)
    random.Random(3).shuffle(names)
    random.Random(4).shuffle(hosts)
    shuffled = place_shards({name: sizes[name] for name in names}, {host: ranks[host] for host in hosts},
                            dict.fromkeys(hosts, UNLIMITED), 2)[0]
    assert shuffled == reference


def test_a_copy_that_fits_nowhere_is_refused_naming_the_shard():
    with pytest.raises(ShardPlanError, match=r"shard 's-000000.tar' \(1000 B\) cannot get 2 copies"):
        place_shards(shard_sizes(1), {"a": 1, "b": 1}, {"a": 10 ** 6, "b": 10}, 2)


@pytest.mark.parametrize("ranks", [0, -1, 1.5, "8", True])
def test_bad_ranks_are_refused_naming_the_host_and_the_variable(ranks):
    with pytest.raises(ShardPlanError, match=r"node 'gpu7': shard_staging_ranks_per_node is .* 1 or more"):
        node_ranks("gpu7", {"free_bytes": 1, "ranks": ranks})


@pytest.mark.parametrize("ranks", [1, 3, 8])
def test_ranks_within_a_node_differ_by_at_most_the_heaviest_shard(ranks):
    weights = {f"s-{number:03d}.tar": random.Random(number).randint(500, 2_000) for number in range(101)}
    ranked = split_ranks(weights, ranks)
    totals = [sum(weight for name, weight in weights.items() if ranked[name] == rank) for rank in range(ranks)]
    assert sorted(set(ranked.values())) == list(range(ranks))
    assert max(totals) - min(totals) <= max(weights.values())
    assert split_ranks(dict(reversed(list(weights.items()))), ranks) == ranked
