# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU facts for the gpu_sharing tests: nvidia_gpu_facts' real result on one H200 (driver 580, from
../shared/gpu-samples/h200-580/; validate's tests read the same file), and nodes of other models made from it (the same record, another product name,
index and uuid)."""

import copy
import json
import pathlib

import pytest

H200_FACTS = json.loads((pathlib.Path(__file__).parents[1] / "_validate" / "fixtures" / "nvidia_gpu_facts_h200_580.json")
                        .read_text())


@pytest.fixture
def h200_facts():
    return copy.deepcopy(H200_FACTS)


@pytest.fixture
def node_facts():
    """node_facts(*names): the H200 result with one GPU per name (indexes 0, 1...)."""
    def make(*names):
        facts = copy.deepcopy(H200_FACTS)
        template = facts["gpus"][0]
        facts["gpus"] = [dict(copy.deepcopy(template), index=index, name=name, uuid="GPU-%08d" % index)
                         for index, name in enumerate(names)]
        facts["gpu_count"] = len(names)
        if not names:
            facts["pci_gpus"] = []  # a node without GPUs, not one whose driver does not answer
        return facts
    return make
