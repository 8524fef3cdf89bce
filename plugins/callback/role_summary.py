# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
name: role_summary
type: aggregate
short_description: A per-host table of what each role did
version_added: 0.1.0
author: dlinfra.gpu_cluster maintainers (@dlinfra)
description:
  - At the end of a run, prints one row per host and one column per role, each cell saying whether the role
    changed something on that host (and how many tasks), changed nothing, or failed.
  - Tasks outside roles are counted under C(play).
requirements:
  - enable in C(callbacks_enabled) (or C(ANSIBLE_CALLBACKS_ENABLED)) as C(dlinfra.gpu_cluster.role_summary)
"""

from collections import defaultdict

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dlinfra.gpu_cluster.role_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.roles = []
        self.cells = defaultdict(lambda: {"tasks": 0, "changed": 0, "failed": 0})

    def _count(self, result, outcome):
        role = result._task._role.get_name(include_role_fqcn=False) if result._task._role else "play"
        if role not in self.roles:
            self.roles.append(role)
        cell = self.cells[(result._host.get_name(), role)]
        cell["tasks"] += 1
        if outcome == "ok" and result._result.get("changed"):
            cell["changed"] += 1
        if outcome == "failed":
            cell["failed"] += 1

    def v2_runner_on_ok(self, result):
        self._count(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result, "ok" if ignore_errors else "failed")

    def v2_runner_on_unreachable(self, result):
        self._count(result, "failed")

    @staticmethod
    def describe(cell):
        if cell is None:
            return "-"
        if cell["failed"]:
            return "FAILED"
        return "changed %d/%d" % (cell["changed"], cell["tasks"]) if cell["changed"] else "no change (%d)" % cell["tasks"]

    def v2_playbook_on_stats(self, stats):
        hosts = sorted({host for host, _role in self.cells})
        if not hosts:
            return
        rows = [["host"] + self.roles]
        rows += [[host] + [self.describe(self.cells.get((host, role))) for role in self.roles] for host in hosts]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        self._display.banner("ROLE SUMMARY")
        for row in rows:
            self._display.display("  ".join(text.ljust(width) for text, width in zip(row, widths)).rstrip())
