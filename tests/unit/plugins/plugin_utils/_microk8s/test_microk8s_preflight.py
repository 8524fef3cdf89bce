# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each problem the microk8s role's preflight reports, word for word, and the settings that do not raise it."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.microk8s import microk8s_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._microk8s.preflight import SETTINGS, preflight_problems
from ansible.errors import AnsibleFilterError

SUPPORTED = {"Debian": ["12", "13"], "Ubuntu": ["22", "24"]}
GOOD = {
    "distribution": "Debian", "major_version": "12", "supported": SUPPORTED, "channel": "1.32/stable", "join_token": "",
    "cluster_groups": ["cluster_a"], "cluster": "cluster_a", "first_head": "head-a1", "head_group": "head",
    "gpu_support": "device_plugin", "addons": ["dns", "hostpath-storage"], "offline_missing": [],
    "gpu_sharing": {"gpus": [], "problems": []},
}
H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "memory_total_mib": 81559}


def sharing(*modes, problems=()):
    extra = {"time_slicing": {"replicas": 4}, "mig": {"layout": {"7g.80gb": 1}}}
    gpus = [dict(H100, index=index, mode=mode, **extra.get(mode, {})) for index, mode in enumerate(modes)]
    return {"gpus": [] if problems else gpus, "problems": list(problems)}


def problems(**settings):
    return preflight_problems(dict(GOOD, **settings))


def test_the_keys_are_those_the_docs_name():
    assert set(GOOD) == set(SETTINGS)


@pytest.mark.parametrize("settings", [
    pytest.param({}, id="debian12"),
    pytest.param({"distribution": "Ubuntu", "major_version": "24"}, id="ubuntu24"),
    pytest.param({"channel": "1.31-strict/edge"}, id="strict-edge-channel"),
    pytest.param({"join_token": "x" * 32}, id="token-of-32"),
    pytest.param({"cluster_groups": [], "cluster": ""}, id="in-no-cluster-group"),
    pytest.param({"gpu_support": "none", "addons": ["nvidia"]}, id="nvidia-addon-by-hand"),
    pytest.param({"gpu_support": "device_plugin", "addons": []}, id="no-addons"),
    pytest.param({"gpu_sharing": sharing("time_slicing", "time_slicing")}, id="time-sliced"),
    pytest.param({"gpu_sharing": sharing("whole"), "gpu_support": "nvidia_addon"}, id="whole-with-the-addon"),
])
def test_good_settings_are_no_problem(settings):
    assert problems(**settings) == []


@pytest.mark.parametrize("settings, expected", [
    pytest.param({"major_version": "11"}, "Debian 11 is not supported; supported: Debian 12, 13; Ubuntu 22, 24",
                 id="unsupported-release"),
    pytest.param({"distribution": "Rocky", "major_version": "9"},
                 "Rocky 9 is not supported; supported: Debian 12, 13; Ubuntu 22, 24", id="unsupported-distribution"),
    pytest.param({"channel": "latest/stable"},
                 "microk8s_channel=latest/stable does not pin a Kubernetes minor; use a channel such as 1.32/stable",
                 id="unpinned-channel"),
    pytest.param({"channel": "1.32"}, "microk8s_channel=1.32 does not pin a Kubernetes minor; use a channel such as "
                 "1.32/stable", id="channel-without-risk"),
    pytest.param({"join_token": "short"}, "microk8s_join_token is 5 characters long; MicroK8s needs at least 32 (or "
                 "leave it empty for a random token per run)", id="short-token"),
    pytest.param({"cluster_groups": ["cluster_a", "cluster_b"]}, "the host is in cluster_a and cluster_b (groups "
                 "matching microk8s_cluster_group_pattern); a host belongs to one cluster", id="two-clusters"),
    pytest.param({"first_head": ""}, "cluster cluster_a has no host in the head group; put its control plane there, or "
                 "set microk8s_head_group", id="no-head"),
    pytest.param({"first_head": "", "cluster": "", "cluster_groups": [], "head_group": "control"},
                 "cluster (hosts in no cluster group) has no host in the control group; put its control plane there, or "
                 "set microk8s_head_group", id="no-head-no-cluster"),
    pytest.param({"addons": ["dns", "nvidia"]}, "microk8s_addons lists nvidia while microk8s_gpu_support=device_plugin "
                 "manages it; remove it from microk8s_addons", id="nvidia-addon-twice"),
    pytest.param({"gpu_support": "nvidia_addon", "addons": ["nvidia"]}, "microk8s_addons lists nvidia while "
                 "microk8s_gpu_support=nvidia_addon manages it; remove it from microk8s_addons", id="nvidia-addon-addon"),
    pytest.param({"offline_missing": ["/srv/microk8s.snap", "/srv/microk8s.assert"]}, "microk8s_offline_snaps names "
                 "files the controller does not have: /srv/microk8s.snap, /srv/microk8s.assert", id="missing-snaps"),
    pytest.param({"gpu_sharing": sharing(problems=["dgx01: microk8s_gpu_sharing_layout[0]: time_slicing needs "
                                                   "replicas from 2 to 64 (pods per GPU); got 1000"])},
                 "dgx01: microk8s_gpu_sharing_layout[0]: time_slicing needs replicas from 2 to 64 (pods per GPU); got "
                 "1000", id="the-declarations-own-problem"),
    pytest.param({"gpu_sharing": sharing("mig", "whole"), "gpu_support": "nvidia_addon"}, "microk8s_gpu_sharing_layout "
                 "shares GPUs (GPU 0 mig), which this role configures in NVIDIA's device plugin only; set "
                 "microk8s_gpu_support=device_plugin (microk8s_gpu_support=nvidia_addon)", id="mig-without-plugin"),
    pytest.param({"gpu_sharing": sharing("time_slicing"), "gpu_support": "nvidia_addon"}, "microk8s_gpu_sharing_layout "
                 "shares GPUs (GPU 0 time_slicing), which this role configures in NVIDIA's device plugin only; set "
                 "microk8s_gpu_support=device_plugin (microk8s_gpu_support=nvidia_addon)", id="sharing-without-plugin"),
])
def test_each_problem_word_for_word(settings, expected):
    assert problems(**settings) == [expected]


def test_mig_with_the_device_plugin_is_accepted():
    """The rolling path sets MIG mode and makes the instances; the role labels what the GPUs have (gpu_sharing_in_place)."""
    assert problems(gpu_sharing=sharing("mig", "whole")) == []


def test_every_problem_is_reported_at_once_in_order():
    lines = problems(major_version="11", channel="edge", join_token="t", cluster_groups=["cluster_a", "cluster_b"],
                     first_head="", addons=["nvidia"], offline_missing=["a.snap"])
    assert [line.split(" ")[0] for line in lines] == [
        "Debian", "microk8s_channel=edge", "microk8s_join_token", "the", "cluster", "microk8s_addons",
        "microk8s_offline_snaps"]


def test_the_filter_names_an_unknown_key():
    with pytest.raises(AnsibleFilterError, match="microk8s_problems: settings has unknown key"):
        microk8s_problems(dict(GOOD, spare=1))
