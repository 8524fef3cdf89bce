# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""rolling_plan's controller half. With gpu_facts, one task reads the node's GPUs (nvidia_gpu_facts) and its versions
(the module), and resolves the driver flavour the GPUs get (plugin_utils/nvidia_driver_choice), which needs the
controller: a re-run of site.yml pays one task here for what took five on every node. Without it, the module alone.
A node the plan will change (a reboot may bring another kernel) has its min facts gathered again by the next role
(plugin_utils/_converged/facts.py)."""
from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.rolling_change import plan_for
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._converged.facts import FACT
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.choice import DriverChoiceError, node_flavor

GPU_FACTS = "dlinfra.gpu_cluster.nvidia_gpu_facts"
MODULE = "dlinfra.gpu_cluster.rolling_plan"


def facts_kept(result):
    """RESULT with the facts gathered earlier in the run given up where the plan changes the node."""
    if (result.get("plan") or {}).get("drain") or result.get("resume"):
        result["ansible_facts"] = dict(result.get("ansible_facts") or {}, **{FACT: ""})
    return result


def gpu_processes(gpu):
    return sum(len(card.get("processes") or []) for card in gpu.get("gpus") or [])


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        return facts_kept(self._plan(super().run(tmp, task_vars), task_vars))

    def _plan(self, result, task_vars):
        args = dict(self._task.args)
        if not boolean(args.pop("gpu_facts", False), strict=False):
            result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
            return result
        roots = {key: args[key] for key in ("sysfs_root", "procfs_root") if args.get(key)}
        gpu = self._execute_module(module_name=GPU_FACTS, module_args=roots, task_vars=task_vars)
        if gpu.get("failed"):
            result.update(gpu)
            return result
        target = {key: str(value) for key, value in (args.get("target") or {}).items() if value not in (None, "")}
        flavor = target.pop("driver_flavor", None)
        args.update(target=target, gpu_processes=gpu_processes(gpu))
        found = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        # The facts nvidia_gpu_facts sets (nvidia_gpu) are set here too, as its own task did: later roles read them.
        result.update(found, gpu=gpu, ansible_facts=gpu.get("ansible_facts") or {})
        if found.get("failed") or flavor is None:
            return result
        host = task_vars.get("inventory_hostname", "this host")
        branches = [target.get("driver"), found["recorded"].get("branch"), gpu.get("driver_version")]
        try:
            pins = dict(target, driver_flavor=node_flavor(host, gpu.get("pci_gpus") or [], flavor, branches))
        except DriverChoiceError as error:
            raise AnsibleActionFail(str(error))
        result["plan"], result["not_installed"] = plan_for(found["installed"], pins)
        result["target"] = pins
        return result
