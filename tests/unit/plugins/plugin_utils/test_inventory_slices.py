"""Which --limit slices keep each cluster's first head; the message names the hosts and the fix."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils.inventory_slices import clusters, limit_problems

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
