# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""source_reachable's controller half: start its message with the role that asks and the host, as 'ROLE on HOST'."""

from ansible.plugins.action import ActionBase


def context(task, host):
    role = task._role.get_name(include_role_fqcn=False) if task._role else ""
    return "%s on %s" % (role, host) if role else host


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        module_args = dict(self._task.args)
        if not module_args.get("context"):
            module_args["context"] = context(self._task, task_vars["inventory_hostname"])
        result.update(self._execute_module(module_name="dlinfra.gpu_cluster.source_reachable", module_args=module_args,
                                           task_vars=task_vars))
        return result
