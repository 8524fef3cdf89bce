# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""shard_verify's controller half: read the dataset's plan on the controller and pass the module the shards the plan
puts on this host, with their sizes and checksums."""

import json
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import node_shards, node_streamed


def planned_shards(plan, host):
    """[{name, size, sha256}] the plan puts on host (replicated or partitioned), in shard order."""
    return [{"name": name, "size": plan["shards"][name], "sha256": plan["sources"][name]["sha256"]}
            for name in node_shards(plan, host)]


def streamed_shards(plan, host):
    """[{name, url}] host reads from their source (stream mode)."""
    return [{"name": name, "url": plan["sources"][name]["url"]} for name in node_streamed(plan, host)]


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        module_args = dict(self._task.args)
        path = module_args.pop("plan", None)
        if path is not None:
            if module_args.get("shards") is not None:
                raise AnsibleActionFail("shard_verify: give plan or shards, not both")
            path = os.path.abspath(os.path.expanduser(path))
            if not os.path.isfile(path):
                result.update(changed=False, plan_missing=True, plan=path)
                return result
            try:
                with open(path) as handle:
                    plan = json.load(handle)
                module_args["shards"] = planned_shards(plan, task_vars["inventory_hostname"])
                module_args["streamed"] = streamed_shards(plan, task_vars["inventory_hostname"])
            except (OSError, ValueError, KeyError) as error:
                raise AnsibleActionFail("shard_verify: %s is not a plan shard_plan wrote (%s); run the shard_staging role "
                                        "again to rewrite it" % (path, error))
        result.update(self._execute_module(module_name="dlinfra.gpu_cluster.shard_verify", module_args=module_args,
                                           task_vars=task_vars))
        result["plan"] = path
        return result
