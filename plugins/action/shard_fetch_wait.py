# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for a node's async shard_fetch job and return its result: async_status polled here, so that a run of hours
prints one line per node when it ends instead of a "retrying" line per node every few seconds."""

import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

# async bookkeeping that is not part of what the fetch reported
_BOOKKEEPING = ("ansible_job_id", "results_file", "started", "finished", "erased", "stdout", "stderr", "stdout_lines", "stderr_lines")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _valid, args = self.validate_argument_spec(argument_spec={
            "jid": {"type": "str", "required": True},
            "poll": {"type": "float", "default": 10.0},
            "timeout": {"type": "float", "default": 604800.0},
        })
        if args["poll"] <= 0 or args["timeout"] <= 0:
            raise AnsibleActionFail("shard_fetch_wait: poll and timeout must be positive numbers of seconds")
        deadline = time.monotonic() + args["timeout"]
        while True:
            status = self._async_status(args["jid"], "status", task_vars)
            if status.get("finished") or status.get("failed"):
                break
            if time.monotonic() >= deadline:
                raise AnsibleActionFail("the fetch did not finish within %d s (shard_staging_fetch_time_limit); it goes on in the "
                                        "background on the node, and a re-run picks up what it staged" % args["timeout"])
            time.sleep(min(args["poll"], max(0.0, deadline - time.monotonic())))
        self._async_status(args["jid"], "cleanup", task_vars)
        result.update((key, value) for key, value in status.items() if key not in _BOOKKEEPING)
        return result

    def _async_status(self, jid, mode, task_vars):
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                    module_args={"jid": jid, "mode": mode, "_async_dir": async_dir})
