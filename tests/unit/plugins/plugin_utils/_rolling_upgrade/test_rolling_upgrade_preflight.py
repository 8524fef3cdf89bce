# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each problem the rolling_upgrade role's preflight reports, word for word, the batch sizes it reckons with, and the
settings that do not raise it."""

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.filter.rolling_upgrade import rolling_upgrade_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._rolling_upgrade.preflight import (
    SETTINGS, batch_size, preflight_problems)

OTHERS = ["dgx01", "dgx02", "dgx03", "dgx04", "cpu01"]
GOOD = {
    "cluster": "cluster_a", "kubectl_host": "head-a1", "serial": "1", "others": OTHERS,
    "cluster_hosts": ["head-a1", "dgx01", "dgx02", "dgx03"], "max_unavailable": 1, "gpu_poll": 10, "gpu_wait": 600,
    "components": ["driver", "nccl"], "known_components": ["driver", "driver_flavor", "toolkit", "nccl", "microk8s"],
}


def problems(**settings):
    return preflight_problems(dict(GOOD, **settings))


def test_the_keys_are_those_the_docs_name():
    assert set(GOOD) == set(SETTINGS)


@pytest.mark.parametrize("serial, others, expected", [
    pytest.param("1", OTHERS, 1, id="one"),
    pytest.param("3", OTHERS, 3, id="three"),
    pytest.param("40%", OTHERS, 2, id="percent-rounds-down"),
    pytest.param("10%", OTHERS, 1, id="percent-at-least-one"),
    pytest.param("100%", OTHERS, 5, id="all"),
    pytest.param("2.5", OTHERS, 2, id="decimal-as-int-reads-it"),
    pytest.param("many", OTHERS, 0, id="text-is-zero"),
    pytest.param("x%", OTHERS, 1, id="percent-of-text"),
    pytest.param("50%", [], 1, id="percent-of-none"),
])
def test_batch_size(serial, others, expected):
    assert batch_size(serial, others) == expected


@pytest.mark.parametrize("settings", [
    pytest.param({}, id="defaults"),
    pytest.param({"serial": "2", "max_unavailable": "2"}, id="two-by-two-as-text"),
    pytest.param({"serial": "100%", "max_unavailable": 3}, id="whole-cluster-within"),
    pytest.param({"serial": "5", "max_unavailable": 1, "cluster_hosts": ["head-a1", "dgx01"]},
                 id="one-node-of-the-cluster-among-others"),
    pytest.param({"gpu_wait": 0}, id="no-wait"),
    pytest.param({"components": []}, id="no-target"),
])
def test_good_settings_are_no_problem(settings):
    assert problems(**settings) == []


@pytest.mark.parametrize("settings, expected", [
    pytest.param({"cluster": "", "kubectl_host": "head-a1"},
                 ["the host is in no cluster_* group; put it under its cluster in the inventory"], id="no-cluster"),
    pytest.param({"kubectl_host": ""}, ["its cluster cluster_a has no host in the head group to run kubectl"],
                 id="no-head"),
    pytest.param({"max_unavailable": 0, "cluster_hosts": []}, ["rolling_upgrade_max_unavailable must be 1 or more"],
                 id="max-unavailable-zero"),
    pytest.param({"serial": "2"}, ["gpu_cluster_serial (2) puts up to 2 nodes of cluster_a in one batch, more than "
                                   "rolling_upgrade_max_unavailable (1): lower gpu_cluster_serial or raise "
                                   "gpu_cluster_max_unavailable"], id="batch-too-big"),
    pytest.param({"serial": "100%", "max_unavailable": "2"},
                 ["gpu_cluster_serial (100%) puts up to 3 nodes of cluster_a in one batch, more than "
                  "rolling_upgrade_max_unavailable (2): lower gpu_cluster_serial or raise gpu_cluster_max_unavailable"],
                 id="percent-batch-too-big"),
    pytest.param({"gpu_poll": 0}, ["rolling_upgrade_gpu_poll must be 1 or more and rolling_upgrade_gpu_wait 0 or more"],
                 id="poll-zero"),
    pytest.param({"gpu_wait": "-1"},
                 ["rolling_upgrade_gpu_poll must be 1 or more and rolling_upgrade_gpu_wait 0 or more"], id="wait-negative"),
    pytest.param({"components": ["driver", "cuda", "kernel"]},
                 ["rolling_upgrade_target: unknown component cuda", "rolling_upgrade_target: unknown component kernel"],
                 id="unknown-components"),
])
def test_each_problem_word_for_word(settings, expected):
    assert problems(**settings) == expected


def test_every_problem_is_reported_at_once_in_order():
    lines = problems(cluster="", kubectl_host="", max_unavailable="none", gpu_poll=0, components=["cuda"],
                     cluster_hosts=[])
    assert lines == [
        "the host is in no cluster_* group; put it under its cluster in the inventory",
        "its cluster  has no host in the head group to run kubectl",
        "rolling_upgrade_max_unavailable must be 1 or more",
        "rolling_upgrade_gpu_poll must be 1 or more and rolling_upgrade_gpu_wait 0 or more",
        "rolling_upgrade_target: unknown component cuda"]


def test_the_filter_names_an_unknown_key():
    with pytest.raises(AnsibleFilterError, match="rolling_upgrade_problems: settings has unknown key"):
        rolling_upgrade_problems(dict(GOOD, spare=1))
