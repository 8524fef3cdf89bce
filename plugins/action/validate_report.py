# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate_report runs on the controller only: evaluate what the validate role read on every node and write
report.json, junit.xml and report.html."""

import datetime
import json
import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.checks import evaluate
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.phases import mark_unread
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.report import summarize, write_report


def _plain(value):
    """Ansible's lazy and tagged containers as plain JSON data."""
    return json.loads(json.dumps(value, default=to_native))


def read_plans(plan_dir, wanted):
    """{cluster: {dataset: its plan or None}} for each (cluster, dataset) of ``wanted``: shard_staging writes a cluster's
    plans in its own directory of plan_dir, those of nodes in no cluster group ('') in plan_dir itself."""
    plans = {}
    for cluster, name in wanted:
        path = os.path.join(plan_dir, cluster, name + ".plan.json")
        try:
            with open(path) as handle:
                plans.setdefault(cluster, {})[name] = json.load(handle)
        except (OSError, ValueError):
            plans.setdefault(cluster, {})[name] = None
    return plans


class ActionModule(ActionBase):
    _VALID_ARGS = frozenset(("dest", "nodes", "gpu_models", "inventory", "plan_dir"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        for name in ("dest", "nodes"):
            if not args.get(name):
                raise AnsibleActionFail("validate_report: %s is required" % name)
        nodes = _plain(args["nodes"])
        wanted = sorted({(raw["cluster"] or "", name) for raw in nodes.values() if raw for name in raw["expected"]["datasets"]})
        plans = read_plans(os.path.expanduser(args.get("plan_dir") or "."), wanted)
        generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        report = evaluate(nodes, plans, _plain(args.get("gpu_models") or {}), args.get("inventory") or "", generated)
        report = mark_unread(report, nodes)  # the phases --tags left out: their checks skipped, saying so
        dest = os.path.abspath(os.path.expanduser(args["dest"]))
        try:
            paths = write_report(report, dest)
        except Exception as error:  # the writer's own message says what to install or fix
            raise AnsibleActionFail("validate_report: could not write the report to %s: %s" % (dest, error))
        summary = summarize(report)
        failed = [c for c in report["checks"] if c["status"] == "fail"]
        gpu_failed = {}
        for item in failed:
            if item["check"].startswith("gpu."):
                gpu_failed.setdefault(item["node"], []).append(item["check"])
        counts = summary["counts"]
        result.update(
            changed=True, paths=paths, summary=summary, failed_checks=failed, failed_gpu_checks=gpu_failed,
            failure_lines=["%s %s: %s" % (c["node"], c["check"], c["message"]) for c in failed],
            summary_line="validate: %s, %d passed, %d failed, %d skipped on %d node(s)" % (
                summary["status"].upper(), counts["pass"], counts["fail"], counts["skip"], len(report["nodes"])))
        return result
