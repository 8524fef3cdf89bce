# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each problem the shard_staging role's validation finds with its datasets and targets, word for word."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.shard_staging import shard_staging_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.inputs import input_problems

EMPTY = "shard_staging_targets is empty: put the staging hosts in [stage_targets] or set shard_staging_targets"
SLICED = "cluster_a: the play takes dgx01 of its staging targets but not dgx02; fix: ..."


@pytest.mark.parametrize("names", [
    pytest.param([], id="no-datasets"),
    pytest.param(["imagenet", "c4.en", "laion_400m-v2", "0data"], id="good-names"),
])
def test_good_inputs_are_no_problem(names):
    assert input_problems(["dgx01"], names, []) == []


@pytest.mark.parametrize("targets, names, sliced, expected", [
    pytest.param([], ["a"], [], [EMPTY], id="no-targets"),
    pytest.param(["dgx01"], ["b", "a", "b", "a", "b", "c"], [],
                 ["shard_staging_datasets: the name(s) b, a appear more than once; give each dataset its own name"],
                 id="repeated-in-first-seen-order"),
    pytest.param(["dgx01"], ["c4 en", ".hidden", "ok", "-x", "a/b"], [],
                 ["shard_staging_datasets: the name(s) c4 en, .hidden, -x, a/b are not usable as directory names; use "
                  "letters, digits, . _ -"], id="bad-names"),
    pytest.param(["dgx01"], ["ok"], [SLICED], [SLICED], id="sliced-as-given"),
    pytest.param([], ["x y", "x y"], [SLICED],
                 [EMPTY, "shard_staging_datasets: the name(s) x y appear more than once; give each dataset its own name",
                  "shard_staging_datasets: the name(s) x y, x y are not usable as directory names; use letters, digits, "
                  ". _ -", SLICED], id="all-at-once-in-order"),
])
def test_each_problem_word_for_word(targets, names, sliced, expected):
    assert input_problems(targets, names, sliced) == expected


def test_the_filter_takes_what_ansible_gives():
    assert shard_staging_problems(("dgx01",), ("a", "a"), None) == [
        "shard_staging_datasets: the name(s) a appear more than once; give each dataset its own name"]
