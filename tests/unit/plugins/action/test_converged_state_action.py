# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converged_state action: a record only from a run of every phase of the role; the read is never held back."""

from unittest import mock

import pytest
from ansible.playbook.play_context import PlayContext
from ansible.template import Templar
from ansible.parsing.dataloader import DataLoader

from ansible_collections.dlinfra.gpu_cluster.plugins.action.converged_state import ActionModule


@pytest.fixture
def role_path(tmp_path):
    path = tmp_path / "roles" / "nccl"
    (path / "tasks").mkdir(parents=True)
    (path / "tasks" / "main.yml").write_text("---\n")
    return str(path)


def run(args, role_path, check_mode=False, **task_vars):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = check_mode
    loader = DataLoader()
    action = ActionModule(task, mock.MagicMock(), PlayContext(), loader=loader, templar=Templar(loader=loader),
                          shared_loader_obj=None)
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
