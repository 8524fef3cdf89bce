# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver a node's GPUs allow (flavour, branches), one branch for a cluster, and every refusal's message."""
import re

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.choice import (
    DriverChoiceError, cluster_branches, cuda_driver_problem, driver_plans, node_choice)

K80, V100, T4, A100, H100, H200, L40S, B200 = "0x102d", "0x1db5", "0x1eb8", "0x20b2", "0x2330", "0x2335", "0x26b9", "0x2901"


def gpus(*ids):
    return [{"address": "0000:%02x:00.0" % number, "device_id": device, "class": "0x030200"} for number, device in enumerate(ids)]


@pytest.mark.parametrize("ids, flavor, low, high", [
    ((H200,) * 8, "open", 550, None),
    ((B200,) * 8, "open", 570, None),
    ((V100,) * 8, "proprietary", 390, 580),
    ((K80,), "proprietary", 390, 470),
    ((A100, L40S), "open", 525, None),
    ((T4,), "open", 418, None),
])
def test_auto_picks_the_flavour_and_the_branches_every_gpu_allows(ids, flavor, low, high):
    choice = node_choice("gpu1", gpus(*ids))
    assert (choice["flavor"], choice["min_branch"], choice["max_branch"]) == (flavor, low, high)


def test_auto_keeps_the_proprietary_module_on_a_branch_before_560_where_the_gpus_allow_either():
    assert node_choice("gpu1", gpus(A100), branch="535")["flavor"] == "proprietary"
    assert node_choice("gpu1", gpus(A100), branch=570)["flavor"] == "open"
    # Blackwell has no choice, whatever the branch.
    assert node_choice("gpu1", gpus(B200), branch=570)["flavor"] == "open"


@pytest.mark.parametrize("ids, flavor, branch, message", [
    ((B200,), "proprietary", None,
     "gpu1: nvidia_driver_flavor is proprietary but NVIDIA B200 (Blackwell, 10de:2901) run(s) only with the open kernel modules: "
     "set nvidia_driver_flavor to open or auto"),
    ((V100,), "auto", 590,
     "gpu1: nvidia_driver_branch 590 cannot drive Tesla V100-SXM2-32GB (Volta, 10de:1db5); branches that drive all its GPUs: "
     "390 to 580"),
    ((H100,), "auto", 470,
     "gpu1: nvidia_driver_branch 470 cannot drive NVIDIA H100 80GB HBM3 (Hopper, 10de:2330); branches that drive all its GPUs: "
     "525 and later"),
    ((V100,), "open", None,
     "gpu1: nvidia_driver_flavor is open but Tesla V100-SXM2-32GB (Volta, 10de:1db5) cannot run the open kernel modules "
     "(Turing and later only): set nvidia_driver_flavor to proprietary or auto"),
    ((B200, V100), "auto", None,
     "gpu1: no driver drives all its GPUs: NVIDIA B200 (Blackwell, 10de:2901) need(s) the open kernel modules and "
     "Tesla V100-SXM2-32GB (Volta, 10de:1db5) cannot run them; put these GPUs in different nodes"),
    ((K80, H100), "proprietary", None,
     "gpu1: no driver branch drives all its GPUs: Tesla K80 (Kepler, 10de:102d) ends with branch 470, "
     "NVIDIA H100 80GB HBM3 (Hopper, 10de:2330) starts at 525; put these GPUs in different nodes"),
    (("0x2336",), "auto", None,
     "gpu1: unknown NVIDIA device 10de:2336: its driver cannot be chosen for it; set nvidia_driver_flavor (open or "
     "proprietary) and nvidia_driver_branch for this host by hand"),
    ((A100,), "open", 470,
     "gpu1: the open kernel modules start with branch 515, nvidia_driver_branch is 470: set a later branch or "
     "nvidia_driver_flavor: proprietary"),
    ((A100,), "closed", None, "gpu1: nvidia_driver_flavor is 'closed'; choose one of auto, open, proprietary"),
])
def test_each_impossible_driver_is_refused_naming_host_gpus_and_fix(ids, flavor, branch, message):
    with pytest.raises(DriverChoiceError, match="^%s$" % re.escape(message)):
        node_choice("gpu1", gpus(*ids), flavor, branch)


def test_an_unknown_gpu_pinned_by_hand_is_taken_as_pinned():
    choice = node_choice("gpu1", gpus("0x2336"), "open", "580")
    assert choice["flavor"] == "open" and choice["gpus"] == ["10de:2336"] and choice["architectures"] == []


def test_a_cluster_shares_the_branches_every_node_allows():
    choices = {"v100-1": node_choice("v100-1", gpus(V100)), "h200-1": node_choice("h200-1", gpus(H200)),
               "a100-1": node_choice("a100-1", gpus(A100))}
    assert cluster_branches(choices) == (550, 580)


def test_a_cluster_with_no_common_branch_names_both_groups():
    choices = {"k80-1": node_choice("k80-1", gpus(K80)), "k80-2": node_choice("k80-2", gpus(K80)),
               "b200-1": node_choice("b200-1", gpus(B200)), "v100-1": node_choice("v100-1", gpus(V100))}
    with pytest.raises(DriverChoiceError) as raised:
        cluster_branches(choices)
    assert str(raised.value) == (
        "no driver branch drives the whole cluster: k80-1, k80-2 end(s) with branch 470, b200-1 start(s) at 570; set "
        "nvidia_driver_cluster_consistency: none to let each node have its own branch, or split the cluster")


def node(*ids, cluster="cluster_a", flavor="", branch="", platform="Debian 13", platform_branch="550", fixed=True):
    return {"cluster": cluster, "pci_gpus": gpus(*ids), "flavor": flavor, "branch": branch, "platform": platform,
            "platform_branch": platform_branch, "fixed_branch": fixed}


def test_a_node_gets_the_platforms_branch_where_its_gpus_allow_it_and_the_flavour_for_that_branch():
    plans = driver_plans({"h200-1": node(H200), "v100-1": node(V100), "cpu-1": node()})
    assert {host: (plan["branch"], plan["flavor"], plan["problems"]) for host, plan in plans.items()} == {
        "h200-1": ("550", "proprietary", []), "v100-1": ("550", "proprietary", []), "cpu-1": ("550", "proprietary", [])}
    assert plans["h200-1"]["architectures"] == ["Hopper"] and plans["h200-1"]["min_branch"] == 550


def test_a_branch_from_the_cuda_repository_past_560_gets_the_open_modules_on_turing_and_later():
    plans = driver_plans({"h200-1": node(H200, branch="580", fixed=False), "v100-1": node(V100, branch="580", fixed=False)})
    assert (plans["h200-1"]["flavor"], plans["v100-1"]["flavor"]) == ("open", "proprietary")


def test_one_branch_per_cluster_the_highest_platform_branch_every_node_allows():
    nodes = {"b200-1": node(B200, platform_branch="580", fixed=False), "v100-1": node(V100, platform_branch="550", fixed=False),
             "h100-9": node(H100, cluster="cluster_b", platform_branch="550", fixed=False)}
    plans = driver_plans(nodes)
    assert {host: (plan["branch"], plan["flavor"]) for host, plan in plans.items()} == {
        "b200-1": ("580", "open"), "v100-1": ("580", "proprietary"), "h100-9": ("550", "proprietary")}
    each_own = driver_plans(nodes, consistency="none")
    assert (each_own["b200-1"]["branch"], each_own["v100-1"]["branch"]) == ("580", "550")


def test_a_cluster_without_a_common_branch_stops_every_node_of_it_naming_both_groups():
    plans = driver_plans({"k80-1": node(K80, fixed=False), "b200-1": node(B200, fixed=False), "h100-9": node(H100, cluster="")})
    assert plans["k80-1"]["problems"] == [
        "k80-1: in cluster_a, no driver branch drives the whole cluster: k80-1 end(s) with branch 470, b200-1 start(s) at "
        "570; set nvidia_driver_cluster_consistency: none to let each node have its own branch, or split the cluster"]
    assert plans["b200-1"]["problems"][0].startswith("b200-1: in cluster_a, no driver branch")
    assert plans["h100-9"]["problems"] == []


def test_different_pins_in_one_cluster_are_refused():
    plans = driver_plans({"a": node(A100, branch="550", fixed=False), "b": node(A100, branch="580", fixed=False)})
    assert plans["a"]["problems"] == [
        "a: cluster_a pin different driver branches (a: 550; b: 580) while nvidia_driver_cluster_consistency is branch: "
        "pin one branch for the cluster, or set nvidia_driver_cluster_consistency: none"]


def test_a_branch_the_distribution_does_not_carry_names_the_cuda_source():
    plans = driver_plans({"b200-1": node(B200), "k80-1": node(K80, cluster="cluster_k")})
    assert plans["b200-1"]["problems"] == [
        "b200-1: its GPUs (Blackwell) need driver branch 570, but Debian 13's own packages carry branch 550 only: set "
        "nvidia_driver_source: cuda (NVIDIA's repository, where it has that branch for Debian 13), or "
        "nvidia_driver_cluster_consistency: none where another node of the cluster set the branch"]
    assert plans["k80-1"]["branch"] == "470" and "need driver branch 470" in plans["k80-1"]["problems"][0]


def test_a_node_refused_on_its_own_is_left_out_of_its_clusters_branch():
    plans = driver_plans({"b200-1": node(B200, flavor="proprietary", fixed=False), "v100-1": node(V100, fixed=False)})
    assert plans["b200-1"]["problems"][0].startswith("b200-1: nvidia_driver_flavor is proprietary but NVIDIA B200")
    assert plans["v100-1"] == dict(plans["v100-1"], branch="550", problems=[])


def test_an_unsupported_release_has_no_branch_and_leaves_the_message_to_the_role():
    plans = driver_plans({"old-1": node(A100, platform="Debian 11", platform_branch=""), "new-1": node(A100),
                          "old-2": node(A100, cluster="cluster_old", platform="Debian 11", platform_branch="")})
    assert (plans["old-1"]["branch"], plans["old-1"]["problems"]) == ("550", [])  # its cluster's
    assert (plans["old-2"]["branch"], plans["old-2"]["problems"]) == ("", [])


@pytest.mark.parametrize("cuda, branch", [("12.4", "535"), ("12.8", 525), ("13.0", "580"), ("11.8", "470"),
                                          ("13.0", "590"), ("14.0", "580"), ("", "535"), ("12.4", "")])
def test_cuda_builds_the_branch_runs_or_cannot_judge_pass(cuda, branch):
    assert cuda_driver_problem("gpu1", "nccl_cuda_version %s" % cuda, cuda, branch) == ""


def test_a_cuda_13_build_on_branch_550_names_host_branches_and_fix():
    assert cuda_driver_problem("gpu1", "nccl_cuda_version 13.0", "13.0", "550") == (
        "gpu1: nccl_cuda_version 13.0 needs driver branch 580 or later (CUDA 13.x), but its driver is branch 550, which "
        "runs CUDA 11.x and CUDA 12.x builds: use a build for one of those, or raise nvidia_driver_branch to 580 or later "
        "where the node's GPUs allow it")


def test_a_cuda_12_build_on_kepler_s_470():
    problem = cuda_driver_problem("k80", "nccl_cuda_version 12.4", "12.4", 470)
    assert "needs driver branch 525 or later (CUDA 12.x)" in problem and "which runs CUDA 11.x builds: use" in problem


def test_no_cuda_release_runs_on_a_branch_older_than_every_minimum():
    assert "which runs no CUDA builds" in cuda_driver_problem("old", "nccl_cuda_version 11.8", "11.8", "418")


def test_a_refusal_names_each_kind_of_gpu_once_with_its_count():
    with pytest.raises(DriverChoiceError) as raised:
        node_choice("h200-1", gpus(*(H200,) * 8), branch=470)
    assert str(raised.value) == ("h200-1: nvidia_driver_branch 470 cannot drive 8x NVIDIA H200 (Hopper, 10de:2335); "
                                 "branches that drive all its GPUs: 550 and later")
    with pytest.raises(DriverChoiceError) as raised:
        node_choice("mixed", gpus(V100, V100, K80), flavor="open")
    assert "but 2x Tesla V100-SXM2-32GB (Volta, 10de:1db5), Tesla K80 (Kepler, 10de:102d) cannot run" in str(raised.value)


def debian12(*ids, **kwargs):
    """A node on Debian 12's archive: branch 535, and 470 as its nvidia-tesla-470 family."""
    return dict(node(*ids, platform="Debian 12", platform_branch="535", **kwargs), offered_branches=["470"])


def test_a_kepler_node_gets_the_older_branch_its_fixed_source_offers():
    plans = driver_plans({"k80-1": debian12(K80, cluster="cluster_k"), "h100-1": debian12(H100)})
    assert {host: (plan["branch"], plan["flavor"], plan["problems"]) for host, plan in plans.items()} == {
        "k80-1": ("470", "proprietary", []), "h100-1": ("535", "proprietary", [])}


def test_a_cluster_with_a_kepler_node_shares_the_offered_branch_all_its_nodes_allow():
    plans = driver_plans({"k80-1": debian12(K80), "v100-1": debian12(V100)})
    assert (plans["k80-1"]["branch"], plans["v100-1"]["branch"]) == ("470", "470")
    assert plans["k80-1"]["problems"] == plans["v100-1"]["problems"] == []


def test_a_branch_no_offered_family_carries_names_every_offered_branch():
    plans = driver_plans({"k80-1": dict(node(K80), offered_branches=["535"])})  # Debian 13: 550, and tesla-535
    assert plans["k80-1"]["branch"] == "470"
    assert plans["k80-1"]["problems"] == [
        "k80-1: its GPUs (Kepler) need driver branch 470, but Debian 13's own packages carry branch 550 or 535 only: set "
        "nvidia_driver_source: cuda (NVIDIA's repository, where it has that branch for Debian 13), or "
        "nvidia_driver_cluster_consistency: none where another node of the cluster set the branch"]
