# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of shard_staging: learn the shards, plan where they go, write the plan and each node's list.

The work is plugin_utils/_staging_plan's (cluster_plans, discovery, list_store, peers, targets); this is its arguments.
"""

import re

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.inventory_slices import target_clusters
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.cluster_plans import plan_clusters, prune_clusters
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.targets import cluster_bases, target_inputs

display = Display()

_USER_INFO_RE = re.compile(r"://[^/@\s]*@")


class ActionModule(ActionBase):
    """Arguments (plugins/modules/shard_plan.py documents them):

    - ``datasets``: the role's shard_staging_datasets.
    - ``targets``: the hosts to plan for, in inventory order (a cluster's first target says where its plans go).
    - ``reports``: {host: what the role's probe found on it}, each {"room": {"reserve_bytes": N, "results": [shard_space
      results], "plan_dir": its shard_staging_plan_dir}, "peer_endpoint": {"address": ..., "port": N} (where it serves
      its shards to the others), "ranks": {"set": shard_staging_ranks_per_node, "gpus": the GPU count of its
      nvidia_gpu_facts or None, "gpu_group": whether it is in shard_staging_gpu_group}}. A target without one (it is
      unreachable or failed earlier) has no room: planning a dataset on it fails naming it.
    - ``plan_dir``: where plans go when a target's room report names none; ``timeout``: seconds per request;
      ``cluster_group_pattern``: the groups whose targets are planned apart (none: one plan for all).
    """

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("datasets", "targets", "reports", "plan_dir", "timeout", "cluster_group_pattern"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        datasets, targets, plan_dir = args.get("datasets"), args.get("targets"), args.get("plan_dir")
        reports = args.get("reports") or {}
        timeout = args.get("timeout", 30)
        if not isinstance(datasets, list) or not isinstance(targets, list) or not targets or not plan_dir:
            raise AnsibleActionFail("shard_plan needs datasets (a list), targets (a non-empty list of hosts) and plan_dir")
        if not isinstance(reports, dict):
            raise AnsibleActionFail("shard_plan's reports must be a dict of each target's probe report (host: report)")
        try:
            space, endpoints = target_inputs(targets, reports)
        except ShardPlanError as exc:
            raise AnsibleActionFail(to_native(exc))
        pattern = args.get("cluster_group_pattern")
        clusters = target_clusters(targets, task_vars.get("groups") or {}, pattern) if pattern else {"": list(targets)}
        bases = cluster_bases(clusters, reports, plan_dir)
        result.update(changed=False, datasets={})
        diff_before, diff_after = [], []
        for dataset in datasets:
            try:
                planned = plan_clusters(dataset, space, clusters, bases, endpoints, timeout, self._task.check_mode)
            except ShardPlanError as exc:
                # A message may quote a source pattern as the user wrote it: its user info never reaches the output.
                raise AnsibleActionFail(_USER_INFO_RE.sub("://***@", to_native(exc)))
            result["datasets"][dataset["name"]] = planned
            result["changed"] = result["changed"] or planned["changed"]
            diff_before.append(planned.pop("_before"))
            diff_after.append(planned["summary"])
        if not self._task.check_mode:
            prune_clusters(bases, result["datasets"])
        result["msg"] = "\n".join(diff_after)
        # Shown on every run, as the fetch's progress is: where the data goes is what the user wants to see.
        display.display(result["msg"])
        if self._task.diff:
            result["diff"] = {"before": "\n".join(diff_before) + "\n", "after": "\n".join(diff_after) + "\n",
                              "before_header": "previous plans", "after_header": "new plans"}
        return result
