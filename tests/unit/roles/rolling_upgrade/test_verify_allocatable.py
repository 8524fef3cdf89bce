"""What the rolling path's verification expects a node to advertise once it is back: one nvidia.com/gpu per GPU on PCI,
one per replica on a node the microk8s role time-slices, its MIG devices where it shares by MIG. Evaluated with
Ansible's templating, from verify.yml, through the collection's filter (a module of its own: Ansible's plugin loader
finds this collection's filters only where the test module imported none of the collection's Python before it)."""

import json
import pathlib

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from role_vars import trust

VERIFY = pathlib.Path(__file__).resolve().parents[4] / "roles" / "rolling_upgrade" / "tasks" / "verify.yml"
pytestmark = pytest.mark.usefixtures("ansible_plugin_loader")


def problem(labels, allocatable, pci_gpus=2, rc=0, mig=None):
    task = next(t for t in yaml.safe_load(VERIFY.read_text()) if t["name"] == "Wait for the node to be Ready with its GPUs allocatable")
    node = {"metadata": {"labels": labels}, "status": {"allocatable": allocatable}}
    variables = dict(task["vars"], __rolling_upgrade_node={"rc": rc, "stdout": json.dumps(node) if rc == 0 else ""},
                     __rolling_upgrade_verify_gpu={"pci_gpus": [{}] * pci_gpus})
    if mig is not None:
        variables["__rolling_upgrade_mig_check"] = {"gpus": mig}
    return Templar(loader=DataLoader(), variables=trust(variables)).template(
        trust("{{ __rolling_upgrade_allocatable_problem }}"))


@pytest.mark.parametrize("labels, gpus", [
    ({}, 2),
    ({"nvidia.com/gpu.present": "true", "dlinfra.io/gpu.sharing": "none", "nvidia.com/gpu.replicas": "1"}, 2),
    ({"dlinfra.io/gpu.sharing": "time-sliced", "nvidia.com/gpu.replicas": "4"}, 8),
    ({"nvidia.com/gpu.replicas": "4"}, 2),  # another labeller's replicas without our sharing label: not ours to read
    ({"dlinfra.io/gpu.sharing": "time-sliced", "nvidia.com/gpu.replicas": "x"}, 2),
])
def test_the_gpus_a_node_must_advertise(labels, gpus):
    assert problem(labels, {"nvidia.com/gpu": str(gpus)}) == ""
    assert problem(labels, {"nvidia.com/gpu": str(gpus + 1)}) == (
        "allocatable shows nvidia.com/gpu %d, expected nvidia.com/gpu %d" % (gpus + 1, gpus))


def test_a_mig_node_must_advertise_its_mig_devices():
    labels = {"dlinfra.io/gpu.sharing": "mig", "nvidia.com/mig.strategy": "single"}
    mig = [{"index": 0, "mig": True, "instances": ["3g.71gb@0", "3g.71gb@4"]}]
    assert problem(labels, {"nvidia.com/gpu": "2"}, pci_gpus=1, mig=mig) == ""
    assert problem(labels, {"nvidia.com/gpu": "1"}, pci_gpus=1, mig=mig) != ""


def test_a_node_kubectl_cannot_read_is_expected_to_advertise_its_gpus():
    assert problem({}, {}, rc=1) == "allocatable shows no GPU resource, expected nvidia.com/gpu 2"
