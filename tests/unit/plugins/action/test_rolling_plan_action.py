# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling_plan action: with gpu_facts, the GPUs are read first, their processes passed on, and the driver flavour
resolved from them on the pinned, recorded or loaded branch before the plan is made; without it, the module alone."""

from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.template import Templar

from ansible_collections.dlinfra.gpu_cluster.plugins.action.rolling_plan import ActionModule

H200, B200 = "0x2335", "0x2901"
INSTALLED = {"driver": "550.163.01-1", "driver_loaded": None, "driver_flavor": "open", "driver_flavor_loaded": None,
             "toolkit": "1.17.8-1", "nccl": None, "microk8s": None, "fabric_manager": None, "kernel_running": "6.1.0",
             "kernel_newest": "6.1.0", "reboot_required": False, "gpu_processes": 0, "module_holders": 0}


def gpu_facts(device, processes=0, failed=False):
    facts = {"pci_gpus": [{"address": "0000:18:00.0", "device_id": device, "class": "0x030200"}], "driver_version": None,
             "gpus": [{"index": 0, "processes": [{"pid": 100 + n, "name": "python"} for n in range(processes)]}]}
    facts["ansible_facts"] = {"nvidia_gpu": dict(facts)}
    return dict(facts, failed=True, msg="nvidia_gpu_facts: boom") if failed else facts


def run(args, gpu, recorded=None):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    loader = DataLoader()
    action = ActionModule(task, mock.MagicMock(), PlayContext(), loader=loader, templar=Templar(loader=loader),
                          shared_loader_obj=None)

    def execute(module_name, module_args, task_vars):
        if module_name.endswith("nvidia_gpu_facts"):
            return gpu
        return {"changed": False, "installed": dict(INSTALLED), "plan": {"from": "the module"}, "not_installed": [],
                "target": module_args["target"], "recorded": recorded or {}, "resume": {}}

    action._execute_module = mock.Mock(side_effect=execute)
    return action.run(task_vars={"inventory_hostname": "gpu7"}), action._execute_module.call_args_list


def test_without_gpu_facts_the_module_runs_alone_with_its_arguments():
    result, calls = run({"target": {"toolkit": "1.17.9"}, "sysfs_root": "/srv/sys"}, gpu_facts(H200))
    assert [call.kwargs["module_name"] for call in calls] == ["dlinfra.gpu_cluster.rolling_plan"]
    assert calls[0].kwargs["module_args"] == {"target": {"toolkit": "1.17.9"}, "sysfs_root": "/srv/sys"}
    assert result["plan"] == {"from": "the module"} and "gpu" not in result


def test_the_gpus_are_read_under_the_roots_and_their_processes_passed_on():
    args = {"target": {"toolkit": "1.17.9", "nccl": ""}, "gpu_facts": True, "sysfs_root": "/srv/sys", "procfs_root": "/srv/proc",
            "state_file": "/var/lib/dlinfra/rolling_upgrade.json"}
    result, calls = run(args, gpu_facts(H200, processes=2))
    facts, module = (call.kwargs for call in calls)
    assert facts["module_name"] == "dlinfra.gpu_cluster.nvidia_gpu_facts"
    assert facts["module_args"] == {"sysfs_root": "/srv/sys", "procfs_root": "/srv/proc"}
    assert module["module_args"]["gpu_processes"] == 2 and "gpu_facts" not in module["module_args"]
    assert module["module_args"]["target"] == {"toolkit": "1.17.9"}
    assert result["gpu"]["pci_gpus"][0]["device_id"] == H200
    assert result["ansible_facts"]["nvidia_gpu"]["pci_gpus"] == result["gpu"]["pci_gpus"]  # set for later roles
    assert result["plan"] == {"from": "the module"}  # no flavour asked for: the module's plan stands


@pytest.mark.parametrize("pin, recorded, flavor, change", [
    ("", {"branch": "550", "flavor": "open"}, "proprietary", ["driver"]),  # Hopper on 550: proprietary by default
    ("580", {"branch": "550", "flavor": "open"}, "open", ["driver"]),  # the pin's branch first: 580 takes open; 550 -> 580
    ("", {}, "open", []),  # no branch known: the newest, which gives Hopper the open modules, as installed
])
def test_auto_becomes_the_flavour_the_gpus_get_on_the_first_branch_known(pin, recorded, flavor, change):
    args = {"target": {"driver": pin, "driver_flavor": "auto"}, "gpu_facts": True}
    result, calls = run(args, gpu_facts(H200), recorded=recorded)
    assert "driver_flavor" not in calls[1].kwargs["module_args"]["target"]
    assert result["target"]["driver_flavor"] == flavor
    assert result["plan"]["change"] == change


def test_a_flavour_the_gpus_cannot_take_fails_naming_host_gpus_and_variable():
    with pytest.raises(AnsibleActionFail, match="gpu7: nvidia_driver_flavor is proprietary but NVIDIA B200"):
        run({"target": {"driver_flavor": "proprietary"}, "gpu_facts": True}, gpu_facts(B200), recorded={"branch": "570"})


def test_a_failed_read_of_the_gpus_stops_before_the_module():
    result, calls = run({"target": {"toolkit": "1.17.9"}, "gpu_facts": True}, gpu_facts(H200, failed=True))
    assert result["failed"] and result["msg"] == "nvidia_gpu_facts: boom" and len(calls) == 1


@pytest.mark.parametrize("pin, kept", [("550.163.01-1", True), ("580.95.05-1", False)])
def test_a_node_the_plan_changes_has_its_facts_gathered_again_by_the_next_role(pin, kept):
    result, dummy = run({"target": {"driver": pin, "driver_flavor": "open"}, "gpu_facts": True}, gpu_facts(H200))
    assert bool(result["plan"]["drain"]) is not kept
    assert ("dlinfra_facts_run" not in result["ansible_facts"]) is kept
    assert result["ansible_facts"].get("dlinfra_facts_run", "") == ""
    assert "nvidia_gpu" in result["ansible_facts"]
