# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for a node's async shard_fetch job and return its result: the job looked at from here, so that a run of hours
prints no "retrying" line per node every few seconds. Instead, every progress_interval seconds, it reads the progress
file the engine keeps in dest (see module_utils/_staging/progress.py) and prints one line for the node, and, once per
interval for all the nodes, a cluster-wide total; at the end a summary line per node.

The nodes' waits run in separate worker processes (forks), so the total is built from files: each wait posts its node's
latest progress into a directory on the controller named after the run's progress id, and the first wait whose turn it
is (a time stamp under a lock) prints the total. Whatever number of forks watches whichever nodes, one total is printed
per interval, and the last node to finish removes the directory."""

import base64
import json
import math
import os
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.progress import PROGRESS_NAME, parse_progress
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_progress.board import Board
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_progress.lines import final_progress, summary_line
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_progress.watch import Watch, wait_for

display = Display()

# async bookkeeping that is not part of what the fetch reported
_BOOKKEEPING = ("ansible_job_id", "results_file", "started", "finished", "erased", "stdout", "stderr", "stdout_lines", "stderr_lines")


# A look at the job waits on the node until the job ends or up to poll seconds (see ActionModule._job_status), checking its
# job file this often: the end is seen within a quarter second, at the cost of a grep and a sleep per check on the node.
TICK = 0.25


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _valid, args = self.validate_argument_spec(argument_spec={
            "jid": {"type": "str", "required": True},
            "poll": {"type": "float", "default": 10.0},
            "timeout": {"type": "float", "default": 604800.0},
            "dest": {"type": "path"},
            "progress_id": {"type": "str"},
            "progress_interval": {"type": "float", "default": 30.0},
            "label": {"type": "str", "default": ""},
            "hosts": {"type": "list", "elements": "str"},
        })
        if args["poll"] <= 0 or args["timeout"] <= 0 or args["progress_interval"] <= 0:
            raise AnsibleActionFail("shard_fetch_wait: poll, timeout and progress_interval must be positive numbers of seconds")
        host = task_vars.get("inventory_hostname", self._play_context.remote_addr)
        watch = None
        if args["dest"] and args["progress_id"]:
            hosts = args["hosts"] if args["hosts"] is not None else task_vars.get("ansible_play_hosts", [host])
            watch = self._watch(task_vars, host, args, Board(args["progress_id"], list(hosts) + [host]))
        status = {}
        try:
            status = wait_for(lambda wait: self._job_status(args["jid"], wait, task_vars), watch.show if watch else None,
                              args["poll"], args["progress_interval"] if watch else None, args["timeout"])
        finally:
            if watch is not None:
                watch.board.finish(host, final_progress(watch.last, status))
        self._cleanup(args["jid"], task_vars)
        result.update((key, value) for key, value in status.items() if key not in _BOOKKEEPING)
        line = summary_line(host, args["label"], result)
        if line:
            display.display(line)
        return result

    def _watch(self, task_vars, host, args, board):
        return Watch(lambda dest, run_id: self._read_progress(dest, run_id, task_vars), display.display,
                     host, args, board)

    def _async_dir(self):
        return self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))

    def _async_status(self, jid, mode, task_vars):
        return self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                    module_args={"jid": jid, "mode": mode, "_async_dir": self._async_dir()})

    def _job_status(self, jid, wait, task_vars):
        """What one look at the job tells after waiting on the node up to wait seconds for it to end: {"finished": 0} while
        it runs, else its result. The job file that Ansible's async wrapper keeps holds a "started" marker while the job
        runs and the module's result after: the look is one shell command on the node (a module run, async_status, took
        about 0.2 s of the node's CPU: 20 runs 4.2 s). A file that cannot be read is left to async_status."""
        seen = self._job_file(jid, wait)
        if seen is None:
            state = self._async_status(jid, "status", task_vars)
            if not (state.get("finished") or state.get("failed")):
                time.sleep(wait)
            return state
        if "started" in seen and not seen.get("finished"):
            return {"finished": 0, "started": 1}
        return dict(seen, finished=1, ansible_job_id=jid)

    def _job_path(self, jid):
        shell = self._connection._shell
        return shell.quote(shell.join_path(self._async_dir(), jid))

    def _job_file(self, jid, wait):
        """The job file as an object, read when the job has ended or after wait seconds; None when it cannot be read."""
        command = ('f=%s; n=%d; while [ "$n" -gt 0 ] && grep -qF \'"started": \' "$f"; do sleep %s; n=$((n - 1)); done; cat "$f"'
                   % (self._job_path(jid), int(math.ceil(wait / TICK)), TICK))
        seen = self._low_level_execute_command(command)
        if seen.get("rc") != 0:
            return None
        try:
            data = json.loads(seen.get("stdout") or "")
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def _cleanup(self, jid, task_vars):
        if self._low_level_execute_command("rm -f %s" % self._job_path(jid)).get("rc") != 0:
            self._async_status(jid, "cleanup", task_vars)

    def _read_progress(self, dest, run_id, task_vars):
        """The node's progress file as a document (any run's: the caller compares its run_id), or None."""
        found = self._execute_module(module_name="ansible.legacy.slurp", task_vars=task_vars,
                                     module_args={"src": os.path.join(dest, PROGRESS_NAME)})
        if found.get("failed") or "content" not in found:
            return None
        try:
            text = base64.b64decode(found["content"]).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return None
        return parse_progress(text)
