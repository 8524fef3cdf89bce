# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converged_state action: a record only from a run of every phase of the role; the read is never held back."""

import os
from unittest import mock

import pytest
from ansible.playbook.play_context import PlayContext
from ansible.template import Templar
from ansible.parsing.dataloader import DataLoader

from ansible_collections.dlinfra.gpu_cluster.plugins.action.converged_state import ActionModule
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._converged.facts import run_id


@pytest.fixture
def role_path(tmp_path):
    path = tmp_path / "roles" / "nccl"
    (path / "tasks").mkdir(parents=True)
    (path / "tasks" / "main.yml").write_text("---\n")
    return str(path)


def action_for(args, check_mode=False):
    """The converged_state action for a task with ``args``; its _execute_module is the test's to set."""
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = check_mode
    loader = DataLoader()
    action = ActionModule(task, mock.MagicMock(), PlayContext(), loader=loader, templar=Templar(loader=loader),
                          shared_loader_obj=None)
    return action


def run(args, role_path, check_mode=False, **task_vars):
    action = action_for(args, check_mode)
    executed = mock.Mock(return_value={"changed": True, "converged": True, "reason": "", "drift": []})
    action._execute_module = executed
    variables = dict({"role_path": role_path, "ansible_run_tags": ["all"], "ansible_skip_tags": []}, **task_vars)
    return action.run(task_vars=variables), executed


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("tags", [
    {"ansible_run_tags": ["nccl_install"]},
    {"ansible_skip_tags": ["molecule-notest", "notest", "nccl_verify"]},
    {"ansible_skip_tags": ["always"]},
])
def test_a_run_limited_to_some_phases_is_not_recorded(role_path, tags, check_mode):
    result, executed = run({"role": "nccl", "record": True}, role_path, check_mode=check_mode, **tags)
    assert result["skipped"] is True and result["changed"] is False
    assert result["msg"] == "nccl: not recorded, --tags/--skip-tags ran only some of its phases"
    executed.assert_not_called()


@pytest.mark.parametrize("tags", [
    {},
    {"ansible_run_tags": ["nccl"]},
    {"ansible_skip_tags": ["molecule-notest", "notest"]},
])
def test_a_run_of_every_phase_records(role_path, tags):
    result, executed = run({"role": "nccl", "record": True, "paths": ["/etc/nccl.conf"]}, role_path, **tags)
    assert result["changed"] is True and not result.get("skipped")
    args = executed.call_args.kwargs["module_args"]
    assert args["record"] is True and args["paths"] == ["/etc/nccl.conf"] and len(args["inputs_digest"]) == 64


def test_the_read_runs_whatever_the_tags(role_path):
    result, executed = run({"role": "nccl"}, role_path, ansible_run_tags=["nccl_install"], ansible_skip_tags=["always"])
    assert result["converged"] is True and not result.get("skipped")
    executed.assert_called_once()


def test_controller_paths_are_read_here_and_passed_as_observed_items(role_path, tmp_path):
    config = tmp_path / "cluster_a.kubeconfig"
    config.write_text("apiVersion: v1\n")
    config.chmod(0o600)
    args = {"role": "nccl", "observed": {"k8s node": "worker"}, "controller_paths": [str(config), str(tmp_path / "no")]}
    dummy, executed = run(args, role_path)
    module_args = executed.call_args.kwargs["module_args"]
    assert "controller_paths" not in module_args
    assert module_args["observed"]["k8s node"] == "worker"
    assert module_args["observed"]["controller path %s" % config].startswith("file 600 ")
    assert module_args["observed"]["controller path %s" % (tmp_path / "no")] == "absent"


GATHERED = {"ansible_distribution": "Debian", "ansible_distribution_version": "13.1", "ansible_kernel": "6.12.9",
            "ansible_architecture": "x86_64", "ansible_os_family": "Debian", "gather_subset": ["min"]}


def run_gathering(args, role_path, converged=True, module_facts=None, **task_vars):
    """run() with setup answering GATHERED and the module answering CONVERGED (with module_facts, as Ansible adds the
    interpreter it discovered); (result, [(module, args)])."""
    action = action_for(args)
    calls = []

    def execute(module_name, module_args, task_vars):
        calls.append((module_name, dict(module_args)))
        if module_name == "ansible.builtin.setup":
            return {"ansible_facts": dict(GATHERED)}
        answer = {"changed": False, "converged": converged, "reason": "", "drift": []}
        return dict(answer, ansible_facts=dict(module_facts)) if module_facts else answer

    action._execute_module = execute
    variables = dict({"role_path": role_path, "ansible_run_tags": ["all"], "ansible_skip_tags": []}, **task_vars)
    return action.run(task_vars=variables), calls


def test_gathered_facts_are_returned_and_the_digest_is_the_one_a_record_with_those_facts_makes(role_path):
    # nccl_cuda_home stands for a role variable that reads a fact: the check must template it with the new facts.
    variables = {"nccl_cuda_home": "/usr/lib/{{ ansible_facts['architecture'] }}"}
    result, calls = run_gathering({"role": "nccl", "gather_facts": True}, role_path, **variables)
    assert [name for name, dummy in calls] == ["ansible.builtin.setup", "dlinfra.gpu_cluster.converged_state"]
    assert calls[0][1] == {"gather_subset": ["min"]}
    assert result["ansible_facts"] == dict(GATHERED, dlinfra_facts_run=run_id()) and result["converged"] is True
    assert "gather_facts" not in calls[1][1]
    facts = {"distribution": "Debian", "distribution_version": "13.1", "kernel": "6.12.9", "architecture": "x86_64"}
    dummy, recorded = run_gathering({"role": "nccl", "record": True}, role_path, ansible_facts=facts, **variables)
    assert [name for name, dummy in recorded] == ["dlinfra.gpu_cluster.converged_state"]
    assert calls[1][1]["inputs_digest"] == recorded[0][1]["inputs_digest"]
    stale, other = run_gathering({"role": "nccl"}, role_path, ansible_facts=dict(facts, kernel="6.1.0"), **variables)
    assert other[0][1]["inputs_digest"] != recorded[0][1]["inputs_digest"]


@pytest.mark.parametrize("converged", [True, False])
def test_facts_the_module_call_returns_add_to_the_gathered_ones(role_path, converged):
    # Without ansible_python_interpreter, each module call of the task returns the interpreter Ansible discovered: the
    # facts gathered before it must stay, or the role's tasks that read them fail (a role found not converged in a
    # playbook of its own, molecule's re-runs).
    discovered = {"discovered_interpreter_python": "/usr/bin/python3"}
    result, calls = run_gathering({"role": "nccl", "gather_facts": True}, role_path, converged=converged,
                                  module_facts=discovered)
    assert [name for name, dummy in calls] == ["ansible.builtin.setup", "dlinfra.gpu_cluster.converged_state"]
    assert {name: result["ansible_facts"][name] for name in GATHERED} == GATHERED
    assert result["ansible_facts"]["discovered_interpreter_python"] == "/usr/bin/python3"


def test_a_full_run_still_gathers_the_facts_and_asks_the_node_nothing_else(role_path):
    result, calls = run_gathering({"role": "nccl", "gather_facts": True}, role_path, gpu_cluster_full_run=True)
    assert [name for name, dummy in calls] == ["ansible.builtin.setup"]
    assert result["converged"] is False and result["ansible_facts"] == dict(GATHERED, dlinfra_facts_run="")


def test_a_failed_gather_stops_the_task(role_path):
    action = action_for({"role": "nccl", "gather_facts": True})
    action._execute_module = mock.Mock(return_value={"failed": True, "msg": "setup: no python"})
    result = action.run(task_vars={"role_path": role_path, "ansible_run_tags": ["all"], "ansible_skip_tags": []})
    assert result["failed"] and result["msg"] == "setup: no python"
    action._execute_module.assert_called_once()


RUN = "%d:1234" % os.getpid()


@pytest.fixture
def this_run():
    with mock.patch("ansible_collections.dlinfra.gpu_cluster.plugins.action.converged_state.run_id", return_value=RUN):
        yield RUN


def test_a_role_found_converged_leaves_its_facts_to_the_next_role_of_the_run(role_path, this_run):
    first, calls = run_gathering({"role": "nccl", "gather_facts": True}, role_path)
    assert first["ansible_facts"] == dict(GATHERED, dlinfra_facts_run=this_run)
    facts = {name[len("ansible_"):]: value for name, value in GATHERED.items() if name.startswith("ansible_")}
    variables = {"ansible_facts": dict(facts, dlinfra_facts_run=this_run), "nccl_cuda_home": "/usr/lib/{{ ansible_facts['architecture'] }}"}
    second, again = run_gathering({"role": "nccl", "gather_facts": True}, role_path, **variables)
    assert [name for name, dummy in again] == ["dlinfra.gpu_cluster.converged_state"]
    assert second["ansible_facts"] == {"dlinfra_facts_run": this_run}
    # The digest is the one a fresh gather makes: the facts are the same.
    fresh, gathered = run_gathering({"role": "nccl", "gather_facts": True}, role_path,
                                    nccl_cuda_home="/usr/lib/{{ ansible_facts['architecture'] }}")
    assert again[0][1]["inputs_digest"] == gathered[1][1]["inputs_digest"]


@pytest.mark.parametrize("marker", ["", "999:1", None])
def test_facts_of_another_run_or_after_a_full_run_are_gathered_again(role_path, this_run, marker):
    result, calls = run_gathering({"role": "nccl", "gather_facts": True}, role_path,
                                  ansible_facts={"kernel": "6.1.0", "dlinfra_facts_run": marker})
    assert [name for name, dummy in calls] == ["ansible.builtin.setup", "dlinfra.gpu_cluster.converged_state"]
    assert result["ansible_facts"]["ansible_kernel"] == "6.12.9"


def test_a_role_that_runs_in_full_makes_the_next_role_gather(role_path, this_run):
    result, calls = run_gathering({"role": "nccl", "gather_facts": True}, role_path, converged=False,
                                  ansible_facts={"dlinfra_facts_run": this_run})
    assert [name for name, dummy in calls] == ["dlinfra.gpu_cluster.converged_state"]
    assert result["ansible_facts"] == {"dlinfra_facts_run": ""}
    # A role that gathers nothing itself (microk8s) clears it too, and keeps it where it is converged.
    cleared, dummy = run_gathering({"role": "nccl"}, role_path, converged=False)
    kept, dummy = run_gathering({"role": "nccl"}, role_path)
    assert cleared["ansible_facts"] == {"dlinfra_facts_run": ""} and "ansible_facts" not in kept


def test_without_proc_every_role_gathers(role_path):
    with mock.patch("ansible_collections.dlinfra.gpu_cluster.plugins.action.converged_state.run_id", return_value=""):
        result, calls = run_gathering({"role": "nccl", "gather_facts": True}, role_path,
                                      ansible_facts={"dlinfra_facts_run": ""})
    assert [name for name, dummy in calls] == ["ansible.builtin.setup", "dlinfra.gpu_cluster.converged_state"]


def test_the_run_id_names_the_process_that_forked_this_one_and_its_start():
    parent, started = run_id().split(":")
    assert int(parent) == os.getppid() and started.isdigit()
