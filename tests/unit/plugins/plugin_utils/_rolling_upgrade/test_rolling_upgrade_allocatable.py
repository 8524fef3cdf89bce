# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._rolling_upgrade.allocatable import allocatable_problem

MIG = [{"index": 0, "mig": True, "instances": ["3g.40gb@0", "3g.40gb@4"]},
       {"index": 1, "mig": False, "instances": []}]


def node(allocatable, **labels):
    return {"metadata": {"labels": labels}, "status": {"allocatable": dict({"cpu": "4"}, **allocatable)}}


@pytest.mark.parametrize("the_node, pci, mig, problem", [
    (node({"nvidia.com/gpu": "2"}), 2, [], ""),
    (node({"nvidia.com/gpu": "8"}, **{"dlinfra.io/gpu.sharing": "time-sliced", "nvidia.com/gpu.replicas": "4"}), 2, [], ""),
    (node({"nvidia.com/gpu": "2"}, **{"dlinfra.io/gpu.sharing": "mig", "nvidia.com/mig.strategy": "single"}), 2,
     MIG[:1], ""),
    (node({"nvidia.com/gpu": "1", "nvidia.com/mig-3g.40gb": "2"},
          **{"dlinfra.io/gpu.sharing": "mig", "nvidia.com/mig.strategy": "mixed"}), 2, MIG, ""),
    (node({"nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "0"}), 2, [], ""),  # a zero count is none
    (node({"nvidia.com/gpu": "1"}), 2, [], "allocatable shows nvidia.com/gpu 1, expected nvidia.com/gpu 2"),
    (node({"nvidia.com/gpu": "2"}, **{"dlinfra.io/gpu.sharing": "mig", "nvidia.com/mig.strategy": "mixed"}), 2, MIG,
     "allocatable shows nvidia.com/gpu 2, expected nvidia.com/gpu 1, nvidia.com/mig-3g.40gb 2"),
    ({}, 1, [], "allocatable shows no GPU resource, expected nvidia.com/gpu 1"),  # kubectl failed
    (node({}), 0, [], ""),  # no GPU
])
def test_what_the_node_shows_against_its_gpus_and_labels(the_node, pci, mig, problem):
    assert allocatable_problem(the_node, pci, mig) == problem
