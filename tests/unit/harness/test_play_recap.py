# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/harness/lab/play_recap.py, the one reader of ansible-playbook's PLAY RECAP (the airgap and rolling lab stages,
the fleet benchmark), on recaps as ansible-core 2.18 prints them."""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("play_recap", ROOT / "tests" / "harness" / "lab" / "play_recap.py")
play_recap = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(play_recap)

# The tail of a site.yml run on the simulated lab: a failed host, an unreachable one, and the role_summary callback's
# table after the recap.
RUN = """
TASK [dlinfra.gpu_cluster.validate : Write the report] *************************
ok: [sim-head]

PLAY RECAP *********************************************************************
sim-gpu1                   : ok=180  changed=3    unreachable=0    failed=1    skipped=40   rescued=2    ignored=1
sim-gpu2                   : ok=0    changed=0    unreachable=1    failed=0    skipped=0    rescued=0    ignored=0
sim-head                   : ok=120  changed=0    unreachable=0    failed=0    skipped=30   rescued=0    ignored=0

ROLE SUMMARY *******************************************************************
host      nvidia_driver  microk8s
sim-gpu1  changed 3/40   FAILED
sim-head  -              no change (12)
"""


def test_every_host_gets_all_seven_counts_as_ints():
    hosts = play_recap.recap(RUN)
    assert sorted(hosts) == ["sim-gpu1", "sim-gpu2", "sim-head"]
    assert hosts["sim-gpu1"] == {"ok": 180, "changed": 3, "unreachable": 0, "failed": 1, "skipped": 40, "rescued": 2,
                                 "ignored": 1}
    assert hosts["sim-gpu2"]["unreachable"] == 1
    assert all(list(counts) == list(play_recap.COUNTS) for counts in hosts.values())


def test_only_the_last_recap_counts():
    first = RUN.replace("changed=3 ", "changed=9 ").replace("sim-head", "sim-old")
    hosts = play_recap.recap(first + RUN)
    assert hosts["sim-gpu1"]["changed"] == 3
    assert "sim-old" not in hosts


@pytest.mark.parametrize("output", ["", "ERROR! the playbook: site.yml could not be found\n",
                                    "sim-gpu1 : ok=1 changed=0\n"])  # a host line with no recap above it
def test_no_recap_is_no_hosts(output):
    assert play_recap.recap(output) == {}


def test_a_host_name_with_dots_and_a_count_the_recap_left_out():
    hosts = play_recap.recap("PLAY RECAP ***\ngpu-01.rack-a1.example.org : ok=5 changed=1 unreachable=0 failed=0\n")
    assert hosts == {"gpu-01.rack-a1.example.org": {"ok": 5, "changed": 1, "unreachable": 0, "failed": 0, "skipped": 0,
                                                    "rescued": 0, "ignored": 0}}
