# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the planner takes from each target's report: its room less the reserve, its ranks, its peer endpoint."""
import os

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.placement import node_ranks
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.targets import (
    cluster_bases, less_reserve, target_inputs, target_ranks)


@pytest.mark.parametrize("free, ours, reserve, expected", [
    (1000, 300, 200, {"free_bytes": 800, "ours_bytes": 300}),
    (100, 300, 200, {"free_bytes": 0, "ours_bytes": 200}),  # free cannot cover the reserve: the rest comes off ours
    (100, 50, 200, {"free_bytes": 0, "ours_bytes": 0}),
    (1000, None, 200, {"free_bytes": 800}),  # an older shard_space: free + held as before
])
def test_the_reserve_comes_off_free_plus_ours_whatever_a_run_left(free, ours, reserve, expected):
    result = {"free_bytes": free, "held_bytes": 40, "total_bytes": 10 ** 6}
    if ours is not None:
        result["ours_bytes"] = ours
    assert less_reserve(result, reserve) == dict(expected, held_bytes=40, total_bytes=10 ** 6)
    if ours is not None:
        # A run that moved 60 bytes from free into dest leaves the sum the planner weighs alone.
        moved = less_reserve(dict(result, free_bytes=free - 60, ours_bytes=ours + 60), reserve)
        assert moved["free_bytes"] + moved["ours_bytes"] == expected["free_bytes"] + expected["ours_bytes"]


@pytest.mark.parametrize("read, expected", [
    ({"set": 4, "gpus": 8, "gpu_group": True}, {"ranks": 4, "ranks_from": "shard_staging_ranks_per_node"}),
    ({"set": None, "gpus": 8, "gpu_group": True}, {"ranks": 8, "ranks_from": "nvidia_gpu_facts"}),
    ({"set": None, "gpus": "2", "gpu_group": False}, {"ranks": 2, "ranks_from": "nvidia_gpu_facts"}),
    ({"set": None, "gpus": 0, "gpu_group": False}, {"ranks": 1, "ranks_from": "default"}),
    ({"set": None, "gpus": None, "gpu_group": True}, {"ranks": 1, "ranks_from": "default"}),
    (None, {"ranks": 1, "ranks_from": "default"}),
])
def test_a_targets_ranks_are_the_variable_else_its_gpus_else_one(read, expected):
    assert target_ranks("gpu7", read) == expected


@pytest.mark.parametrize("given", [0, -1, True, 2.5, "8"])
def test_a_bad_ranks_variable_is_refused_with_placements_message(given):
    # One check and one message for the variable: placement.node_ranks'.
    with pytest.raises(ShardPlanError, match=r"^node 'gpu7': shard_staging_ranks_per_node is .*; it must be a whole number of "
                                             r"training ranks \(GPUs\) on the node, 1 or more$"):
        target_ranks("gpu7", {"set": given})
    with pytest.raises(ShardPlanError) as placed:
        node_ranks("gpu7", {"ranks": given})
    with pytest.raises(ShardPlanError) as targeted:
        target_ranks("gpu7", {"set": given})
    assert str(placed.value) == str(targeted.value)


def test_a_gpu_node_whose_facts_count_no_gpu_needs_the_variable():
    with pytest.raises(ShardPlanError, match=r"^gpu7: it is in shard_staging_gpu_group but nvidia_gpu_facts counts no GPU"):
        target_ranks("gpu7", {"set": None, "gpus": 0, "gpu_group": True})


def test_the_inputs_take_each_targets_room_ranks_and_endpoint_from_its_report():
    report = {"room": {"reserve_bytes": "100", "results": [
        {"item": {"name": "ds"}, "free_bytes": 1000, "held_bytes": 5, "total_bytes": 2000},
        {"item": {"name": "skipped"}, "skipped": True}]},
        "peer_endpoint": {"address": "10.0.0.1", "port": 8473}, "ranks": {"set": 2}}
    space, endpoints = target_inputs(["a", "b"], {"a": report, "c": report})
    assert space == {"a": {"ds": {"free_bytes": 900, "held_bytes": 5, "total_bytes": 2000, "ranks": 2,
                                  "ranks_from": "shard_staging_ranks_per_node"}},
                     "b": {}}  # no report: no room, which the plan of a dataset names
    assert endpoints == {"a": {"address": "10.0.0.1", "port": 8473}, "b": None}


def test_a_clusters_plans_go_where_its_first_targets_room_says(tmp_path):
    reports = {"a1": {"room": {"plan_dir": str(tmp_path / "a")}}, "b1": {"room": {}}, "b2": {"room": {"plan_dir": "/elsewhere"}}}
    bases = cluster_bases({"cluster_a": ["a1"], "cluster_b": ["b1", "b2"], "": ["c1"]}, reports, str(tmp_path / "given"))
    assert bases == {"cluster_a": str(tmp_path / "a"), "cluster_b": str(tmp_path / "given"), "": str(tmp_path / "given")}
    assert cluster_bases({"": ["c1"]}, {}, "~/plans")[""] == os.path.expanduser("~/plans")
