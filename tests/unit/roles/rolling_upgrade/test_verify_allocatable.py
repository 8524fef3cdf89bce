# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the rolling path's verification expects a node to advertise once it is back: one nvidia.com/gpu per GPU on PCI,
or one per replica on a node the microk8s role time-slices. Evaluated with Ansible's templating, from verify.yml."""

import json
import pathlib

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from role_vars import trust

VERIFY = pathlib.Path(__file__).resolve().parents[4] / "roles" / "rolling_upgrade" / "tasks" / "verify.yml"


def expected(labels, pci_gpus=2, rc=0):
    task = next(t for t in yaml.safe_load(VERIFY.read_text()) if t["name"] == "Wait for the node to be Ready with its GPUs allocatable")
    node = {"metadata": {"labels": labels}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    variables = dict(task["vars"], __rolling_upgrade_node={"rc": rc, "stdout": json.dumps(node) if rc == 0 else ""},
                     __rolling_upgrade_verify_gpu={"pci_gpus": [{}] * pci_gpus})
    return Templar(loader=DataLoader(), variables=trust(variables)).template(
        trust("{{ __rolling_upgrade_expected_gpus | int }}"))


@pytest.mark.parametrize("labels, gpus", [
    ({}, 2),
    ({"nvidia.com/gpu.present": "true", "dlinfra.io/gpu.sharing": "none", "nvidia.com/gpu.replicas": "1"}, 2),
    ({"dlinfra.io/gpu.sharing": "time-sliced", "nvidia.com/gpu.replicas": "4"}, 8),
    ({"nvidia.com/gpu.replicas": "4"}, 2),  # another labeller's replicas without our sharing label: not ours to read
    ({"dlinfra.io/gpu.sharing": "time-sliced", "nvidia.com/gpu.replicas": "x"}, 2),
])
def test_the_gpus_a_node_must_advertise(labels, gpus):
    assert int(expected(labels)) == gpus


def test_a_node_kubectl_cannot_read_is_expected_to_advertise_its_gpus():
    assert int(expected({}, rc=1)) == 2
