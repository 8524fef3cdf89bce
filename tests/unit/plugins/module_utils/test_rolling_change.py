# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The day-2 decision for one node, on every combination of what can differ: which components change, whether the node is
drained, and whether a reload of the driver modules is enough or it must reboot."""

import itertools

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.rolling_change import as_pinned, decide, matches_pin

OLD = {"driver": "550.127.05", "toolkit": "1.16.2", "nccl": "2.21.5", "microk8s": "1.30/stable"}
NEW = {"driver": "570.133.20", "toolkit": "1.17.8", "nccl": "2.22.3", "microk8s": "1.31/stable"}


def node(loaded="same", fabric_manager=False, new_kernel=False, held=False, **versions):
    installed = dict(OLD, **versions)
    installed["driver_loaded"] = {"same": installed["driver"], "older": "535.216.01", "none": None}[loaded]
    installed["fabric_manager"] = installed["driver"] if fabric_manager else None
    installed["kernel_running"] = "6.1.0-28-amd64"
    installed["kernel_newest"] = "6.1.0-31-amd64" if new_kernel else "6.1.0-28-amd64"
    installed["gpu_processes"] = 1 if held else 0
    installed["module_holders"] = 0
    return installed


COMBINATIONS = list(itertools.product([False, True], ["same", "older", "none"], [False, True], [False, True], [False, True],
                                      [False, True], [False, True], [False, True]))


@pytest.mark.parametrize("driver, loaded, fabric_manager, toolkit, nccl, microk8s, new_kernel, held", COMBINATIONS)
def test_every_combination(driver, loaded, fabric_manager, toolkit, nccl, microk8s, new_kernel, held):
    target = {key: (NEW[key] if moved else OLD[key]) for key, moved in
              (("driver", driver), ("toolkit", toolkit), ("nccl", nccl), ("microk8s", microk8s))}
    plan = decide(node(loaded, fabric_manager, new_kernel, held), target)

    expected = [key for key, moved in (("driver", driver), ("toolkit", toolkit), ("nccl", nccl), ("microk8s", microk8s)) if moved]
    if driver and fabric_manager:
        expected.insert(1, "fabric_manager")  # in lockstep, right after the driver
    assert plan["change"] == expected
    stale = loaded == "older" or (loaded == "same" and driver)  # the running module is not the package's after the change
    assert plan["reboot"] == (new_kernel or (stale and held))
    assert plan["reload"] == (not new_kernel and stale and not held)
    assert not (plan["reboot"] and plan["reload"])
    assert plan["drain"] == bool(expected or plan["reboot"] or plan["reload"])
    assert len(plan["reasons"]) >= len(expected)


def test_a_node_at_its_pinned_versions_is_not_touched():
    assert decide(node(), dict(OLD)) == {"change": [], "drain": False, "reboot": False, "reload": False, "reasons": []}


def test_unpinned_components_are_never_changed():
    assert decide(node(), {"driver": "", "toolkit": None})["change"] == []


def test_a_driver_upgrade_on_an_idle_node_reloads_instead_of_rebooting():
    plan = decide(node(fabric_manager=True), {"driver": NEW["driver"]})
    assert plan["change"] == ["driver", "fabric_manager"]
    assert (plan["drain"], plan["reload"], plan["reboot"]) == (True, True, False)
    assert "nothing holds the GPUs: reload the driver modules instead of rebooting" in plan["reasons"]


def test_a_module_left_stale_by_an_earlier_upgrade_is_finished_without_a_package_change():
    plan = decide(node(loaded="older", held=True), dict(OLD))
    assert plan["change"] == [] and plan["drain"] and plan["reboot"]
    assert "the loaded driver module is 535.216.01, the package 550.127.05" in plan["reasons"]


def test_a_fabric_manager_out_of_step_with_the_driver_is_brought_back():
    installed = node()
    installed["fabric_manager"] = "535.216.01"
    assert decide(installed, dict(OLD))["change"] == ["fabric_manager"]


@pytest.mark.parametrize("version, pin, expected", [
    ("1.17.8-1", "1.17.8", True), ("1.17.8", "1.17.8", True), ("1.17.80-1", "1.17.8", False),
    ("550.163.01-1", "550", True), ("5501.0", "550", False), ("1:2.22.3-1+cuda12.6", "2.22.3", True),
    ("2.22.3-1", "1:2.22.3", True), ("1.17.9-1", "1.17.8", False), (None, "1.17.8", False), ("1.17.8-1", "", False),
])
def test_matches_pin(version, pin, expected):
    assert matches_pin(version, pin) is expected


def test_as_pinned_compares_packages_with_pins_and_modules_with_packages():
    installed = {"driver": "550.163.01-1", "driver_loaded": "550.163.01", "fabric_manager": "550.163.01-1",
                 "toolkit": "1.17.8-1", "nccl": "2.22.3-1", "microk8s": "1.32/stable"}
    same = as_pinned(installed, {"driver": "550", "toolkit": "1.17.8", "nccl": "2.22.3", "microk8s": "1.32/stable"})
    assert decide(same, {"driver": "550", "toolkit": "1.17.8", "nccl": "2.22.3", "microk8s": "1.32/stable"})["drain"] is False
    moved = as_pinned(installed, {"driver": "550", "toolkit": "1.17.9"})
    plan = decide(moved, {"driver": "550", "toolkit": "1.17.9"})
    assert (plan["change"], plan["reboot"], plan["reload"]) == (["toolkit"], False, False)
    assert as_pinned(dict(installed, driver_loaded="535.216.01"), {"driver": "550"})["driver_loaded"] == "535.216.01"


@pytest.mark.parametrize("reboot_required, held", [(False, False), ("linux-image-6.1.0-31-amd64", False), (True, True)])
def test_a_reboot_the_system_asks_for_is_a_reboot(reboot_required, held):
    installed = dict(node(held=held), reboot_required=reboot_required)
    plan = decide(installed, dict(OLD))
    assert (plan["drain"], plan["reboot"], plan["reload"]) == (bool(reboot_required), bool(reboot_required), False)


@pytest.mark.parametrize("held", [False, True])
def test_a_new_kernel_module_flavour_changes_the_driver_and_its_loaded_module(held):
    installed = dict(node(held=held), driver_flavor="proprietary", driver_flavor_loaded="proprietary")
    plan = decide(installed, {"driver": OLD["driver"], "driver_flavor": "open"})
    assert plan["change"] == ["driver"] and plan["drain"]
    assert (plan["reboot"], plan["reload"]) == (held, not held)
    assert "driver kernel modules proprietary -> open" in plan["reasons"]
    assert "the loaded driver module is the proprietary one, the packages the open one" in plan["reasons"]


def test_a_flavour_with_a_new_version_is_one_driver_change():
    installed = dict(node(fabric_manager=True), driver_flavor="proprietary", driver_flavor_loaded="proprietary")
    plan = decide(installed, {"driver": NEW["driver"], "driver_flavor": "open"})
    assert plan["change"] == ["driver", "fabric_manager"] and plan["reload"]


def test_the_flavour_already_there_or_unknown_changes_nothing():
    assert decide(dict(node(), driver_flavor="open", driver_flavor_loaded="open"), {"driver_flavor": "open"})["drain"] is False
    assert decide(dict(node(loaded="none"), driver_flavor=None), {"driver_flavor": "open"})["drain"] is False


def test_a_module_of_the_other_flavour_left_loaded_is_finished():
    plan = decide(dict(node(), driver_flavor="open", driver_flavor_loaded="proprietary"), {"driver_flavor": "open"})
    assert plan["change"] == [] and plan["reload"]
    assert "the loaded driver module is the proprietary one, the packages the open one" in plan["reasons"]
