# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import pathlib

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.mig_state import (
    mig_apply_plan, parse_compute_instances, parse_gpu_instances)

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "mig"


def fixture(name):
    return (FIXTURES / name).read_text()


def test_lgi_rows_of_two_gpus():
    instances = parse_gpu_instances(fixture("lgi-a100-80gb-two-gpus.txt"))
    assert len(instances) == 8
    assert instances[:4] == [
        {"gpu": 0, "profile": "1g.10gb", "profile_id": 19, "instance_id": 9, "start": 2, "size": 1},
        {"gpu": 0, "profile": "1g.10gb", "profile_id": 19, "instance_id": 10, "start": 3, "size": 1},
        {"gpu": 0, "profile": "2g.20gb", "profile_id": 14, "instance_id": 3, "start": 0, "size": 2},
        {"gpu": 0, "profile": "3g.40gb", "profile_id": 9, "instance_id": 2, "start": 4, "size": 4}]
    assert {instance["gpu"] for instance in instances[4:]} == {1}


def test_lci_rows():
    assert parse_compute_instances(fixture("lci-a100-40gb-3g-x2.txt")) == [
        {"gpu": 0, "gpu_instance_id": gpu_instance, "profile": "3g.20gb", "profile_id": 2, "instance_id": 0,
         "start": 0, "size": 3} for gpu_instance in (1, 2)]


@pytest.mark.parametrize("name", ["lgi-mig-disabled.txt", "lgi-no-instances.txt"])
def test_the_lines_printed_without_instances_read_as_none(name):
    assert parse_gpu_instances(fixture(name)) == []
    assert parse_compute_instances(fixture(name)) == []


def gpu(index, current, pending=None):
    return {"index": index, "mig_mode_current": current, "mig_mode_pending": current if pending is None else pending}


THREE_G_TWICE = [{"profile": "3g.20gb", "profile_id": 9, "start": start} for start in (0, 4)]
LGI, LCI = fixture("lgi-a100-40gb-3g-x2.txt"), fixture("lci-a100-40gb-3g-x2.txt")

PLANS = [
    ("whole and MIG off: nothing", [gpu(0, False)], {}, "", "", [], [], []),
    ("layout already there: nothing", [gpu(0, True)], {0: THREE_G_TWICE}, LGI, LCI, [], [], []),
    ("MIG off, layout wanted: mode on, then a reset", [gpu(0, False)], {0: THREE_G_TWICE}, "", "",
     [["nvidia-smi", "-i", "0", "-mig", "1"]], [0], [0]),
    ("mode pending on: only the reset", [gpu(0, False, True)], {0: THREE_G_TWICE}, "", "", [], [0], [0]),
    ("MIG on, no instances: create them at their placements", [gpu(0, True)], {0: THREE_G_TWICE}, "", "",
     [["nvidia-smi", "mig", "-cgi", "9:0,9:4", "-C", "-i", "0"]], [], [0]),
    ("another layout: destroy, then create", [gpu(0, True)],
     {0: [{"profile": "7g.40gb", "profile_id": 0, "start": 0}]}, LGI, LCI,
     [["nvidia-smi", "mig", "-dci", "-i", "0"], ["nvidia-smi", "mig", "-dgi", "-i", "0"],
      ["nvidia-smi", "mig", "-cgi", "0:0", "-C", "-i", "0"]], [], [0]),
    ("instances without compute instances: recreated", [gpu(0, True)], {0: THREE_G_TWICE}, LGI, "",
     [["nvidia-smi", "mig", "-dgi", "-i", "0"], ["nvidia-smi", "mig", "-cgi", "9:0,9:4", "-C", "-i", "0"]], [], [0]),
    ("whole wanted on a MIG GPU: destroy, mode off, reset", [gpu(0, True)], {}, LGI, LCI,
     [["nvidia-smi", "mig", "-dci", "-i", "0"], ["nvidia-smi", "mig", "-dgi", "-i", "0"],
      ["nvidia-smi", "-i", "0", "-mig", "0"]], [0], [0]),
    ("only the GPU that differs changes", [gpu(0, True), gpu(1, False)], {0: THREE_G_TWICE}, LGI, LCI, [], [], []),
]


@pytest.mark.parametrize("gpus, declared, lgi, lci, commands, reset, changed", [case[1:] for case in PLANS],
                         ids=[case[0] for case in PLANS])
def test_the_plan_reaches_the_declared_layout(gpus, declared, lgi, lci, commands, reset, changed):
    assert mig_apply_plan(gpus, declared, lgi, lci) == {"commands": commands, "reset_required": reset,
                                                        "changed": changed}
