"""Which --limit slices keep each cluster's first head; the message names the hosts and the fix."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.inventory_slices import (
    clusters, limit_problems, staging_slice_problems, target_clusters)

SETTINGS = {"site_group": "gpu_cluster", "cluster_group_pattern": "^cluster_", "head_group": "head"}
GROUPS = {
    "all": ["a-head", "a-gpu1", "a-gpu2", "b-head1", "b-head2", "b-gpu1", "lone-gpu", "store"],
    "gpu_cluster": ["a-head", "a-gpu1", "a-gpu2", "b-head1", "b-head2", "b-gpu1", "lone-gpu"],
    "cluster_a": ["a-head", "a-gpu1", "a-gpu2"],
    "cluster_b": ["b-head1", "b-head2", "b-gpu1"],
    "rack_a1": ["a-gpu1"],
    "head": ["a-head", "b-head1", "b-head2"],
    "gpu_nodes": ["a-gpu1", "a-gpu2", "b-gpu1", "lone-gpu"],
    "dataset_store": ["store"],
}


def test_the_clusters_and_the_hosts_in_none():
    assert clusters(GROUPS, "gpu_cluster", "^cluster_") == {
        "cluster_a": ["a-head", "a-gpu1", "a-gpu2"], "cluster_b": ["b-head1", "b-head2", "b-gpu1"],
        "gpu_cluster": ["lone-gpu"]}


@pytest.mark.parametrize("limited", [
    None,  # no --limit
    GROUPS["all"],
    GROUPS["cluster_a"],  # a slice by cluster
    ["a-head", "a-gpu1"],  # a rack with its cluster's head
    ["b-head1", "b-gpu1"],  # the first head is enough
    ["store"],  # outside the site group
    ["lone-gpu"],  # a cluster without a head: nothing once per cluster to protect
    [],
])
def test_slices_that_keep_the_first_head_pass(limited):
    assert limit_problems(GROUPS, limited, SETTINGS) == []


def test_a_rack_without_its_head_is_refused_naming_hosts_and_fix():
    assert limit_problems(GROUPS, GROUPS["rack_a1"], SETTINGS) == [
        "cluster cluster_a: --limit takes a-gpu1 but not its first head a-head, which runs the cluster's "
        "once-per-cluster steps (MicroK8s joins and addons, the staging plan); fix: add the head "
        "(--limit a-gpu1,a-head) or slice by cluster (--limit cluster_a)"]


def test_heads_split_from_each_other_are_refused():
    problems = limit_problems(GROUPS, ["b-head2"], SETTINGS)
    assert len(problems) == 1 and problems[0].startswith("cluster cluster_b: --limit takes b-head2 but not its first "
                                                         "head b-head1")


def test_each_cut_cluster_is_named():
    problems = limit_problems(GROUPS, ["a-gpu2", "b-gpu1"], SETTINGS)
    assert [line.split(":")[0] for line in problems] == ["cluster cluster_a", "cluster cluster_b"]


TARGETS = ["a-gpu1", "a-gpu2", "b-gpu1", "lone-gpu"]


def test_the_staging_targets_by_cluster_and_those_in_none():
    assert target_clusters(TARGETS, GROUPS, "^cluster_") == {
        "cluster_a": ["a-gpu1", "a-gpu2"], "cluster_b": ["b-gpu1"], "": ["lone-gpu"]}
    assert target_clusters(TARGETS, GROUPS, "^no_such_group$") == {"": TARGETS}


@pytest.mark.parametrize("in_play, limited", [
    (TARGETS, None),  # the whole inventory
    (["a-gpu1", "a-gpu2"], GROUPS["cluster_a"]),  # a slice by cluster
    (["b-gpu1", "lone-gpu"], ["b-head1", "b-gpu1", "lone-gpu"]),  # two clusters of four
    ([], ["store"]),  # no target at all
])
def test_plays_that_take_whole_clusters_of_targets_pass(in_play, limited):
    assert staging_slice_problems(TARGETS, GROUPS, "^cluster_", in_play, limited) == []


def test_a_limit_that_takes_part_of_a_cluster_is_refused_naming_hosts_and_fix():
    assert staging_slice_problems(TARGETS, GROUPS, "^cluster_", ["a-gpu1"], ["a-head", "a-gpu1"]) == [
        "shard_staging_targets: cluster cluster_a: --limit takes a-gpu1 but not a-gpu2, and the staging plan places the "
        "cluster's shards on all its targets at once; fix: run the play on the whole cluster (--limit cluster_a), or take "
        "a-gpu2 out of shard_staging_targets"]


def test_targets_in_no_cluster_group_are_one_cluster():
    problems = staging_slice_problems(["n1", "n2"], {"stage_targets": ["n1", "n2"]}, "^cluster_", ["n1"], ["n1"])
    assert problems == [
        "shard_staging_targets: the targets in no cluster group (shard_staging_cluster_group_pattern ^cluster_): --limit "
        "takes n1 but not n2, and the staging plan places the cluster's shards on all its targets at once; fix: run the "
        "play on the whole cluster (--limit n1,n2), or take n2 out of shard_staging_targets"]


def test_a_target_the_play_leaves_out_without_a_limit_is_refused():
    # shard_staging_targets names a host the play's pattern does not take: whole cluster or not, it would go unplanned.
    problems = staging_slice_problems(TARGETS, GROUPS, "^cluster_", ["a-gpu1", "a-gpu2", "lone-gpu"], None)
    assert problems == ["shard_staging_targets: b-gpu1 are not in this play; run the play on every target (hosts: "
                        "stage_targets) or take them out of shard_staging_targets"]
