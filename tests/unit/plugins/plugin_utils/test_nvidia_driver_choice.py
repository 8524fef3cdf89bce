# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver a node's GPUs allow (flavour, branches), one branch for a cluster, and every refusal's message."""
import re

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils.nvidia_driver_choice import (
    DriverChoiceError, cluster_branches, node_choice)

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
