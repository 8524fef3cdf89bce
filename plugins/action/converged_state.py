# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""converged_state's controller half: the role's inputs digest (plugin_utils/_converged/inputs.py), then the module.
With gather_facts, the node's min facts are gathered first in the same task (a role's setup task less on every run) and
the digest is made with them; where an earlier role of this run gathered them and every role since found the node
converged, those are still the node's and are used as they are (plugin_utils/_converged/facts.py).
gpu_cluster_full_run=true (an inventory or extra variable) makes every role run in full, as before records existed.
A record is written only by a run of every phase of the role (plugin_utils/_converged/record.py): one that --tags or
--skip-tags limit is skipped here, before the node is asked anything."""
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._converged.controller import controller_path_items
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._converged.facts import FACT, gathered_in, run_id
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._converged.inputs import (
    collection_version, inputs_digest, role_files_digest, role_variables)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._converged.record import every_phase_runs

FULL_RUN = "gpu_cluster_full_run"


def with_facts(task_vars, gathered):
    """The task's variables as the next task will see them once the facts ``gathered`` (setup's ansible_* keys) are
    the host's: under ansible_facts without the prefix, and as ansible_* variables."""
    facts = {name[len("ansible_"):] if name.startswith("ansible_") else name: value for name, value in gathered.items()}
    return dict(task_vars, ansible_facts=dict(task_vars.get("ansible_facts") or {}, **facts),
                **{name: value for name, value in gathered.items() if name.startswith("ansible_")})


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        module_args = dict(self._task.args)
        role = module_args.get("role")
        role_path = task_vars.get("role_path")
        if not role or not role_path:
            raise AnsibleActionFail("converged_state runs inside a role, with role: naming it")
        record = boolean(module_args.get("record", False), strict=False)
        if record and not every_phase_runs(role, task_vars.get("ansible_run_tags", ["all"]),
                                           task_vars.get("ansible_skip_tags", [])):
            result.update(changed=False, skipped=True,
                          msg="%s: not recorded, --tags/--skip-tags ran only some of its phases" % role)
            return result
        templar = self._templar
        run = run_id()
        gather = boolean(module_args.pop("gather_facts", False), strict=False) and not record
        if gather and not gathered_in(task_vars, run):
            gathered = self._execute_module(module_name="ansible.builtin.setup", module_args={"gather_subset": ["min"]},
                                            task_vars=task_vars)
            if gathered.get("failed"):
                result.update(gathered)
                return result
            result["ansible_facts"] = gathered.get("ansible_facts", {})
            task_vars = with_facts(task_vars, result["ansible_facts"])
            templar = self._templar.copy_with_new_env(available_variables=task_vars)
        if not record and boolean(templar.template(task_vars.get(FULL_RUN, False)), strict=False):
            result.update(changed=False, converged=False, drift=[], reason="%s is true: the role runs in full" % FULL_RUN)
            result.setdefault("ansible_facts", {})[FACT] = ""
            return result
        # Files the role writes on the controller are read here, where they are, and compared as the node's own items.
        controller_paths = module_args.pop("controller_paths", None) or []
        if controller_paths:
            module_args["observed"] = dict(module_args.get("observed") or {}, **controller_path_items(controller_paths))
        variables = {name: self._value(templar, task_vars[name]) for name in role_variables(task_vars, role)}
        module_args["inputs_digest"] = inputs_digest(variables, task_vars.get("ansible_facts", {}),
                                                     module_args.pop("inputs", None), role_files_digest(role_path),
                                                     collection_version(role_path))
        answer = self._execute_module(module_name="dlinfra.gpu_cluster.converged_state", module_args=module_args,
                                      task_vars=task_vars)
        # Its facts (the interpreter Ansible discovered, where none is set) add to the gathered ones, not replace them.
        facts = dict(result.get("ansible_facts") or {}, **(answer.pop("ansible_facts", None) or {}))
        result.update(answer)
        if facts:
            result["ansible_facts"] = facts
        if not record and not result.get("failed"):
            # The role runs in full where it is not converged: the roles after it gather again.
            if not result.get("converged"):
                result.setdefault("ansible_facts", {})[FACT] = ""
            elif gather:
                result.setdefault("ansible_facts", {})[FACT] = run
        return result

    @staticmethod
    def _value(templar, raw):
        """A variable as the role sees it; one that cannot be templated yet counts as its text, which is as stable."""
        try:
            return templar.template(raw)
        except AnsibleError:
            return str(raw)
