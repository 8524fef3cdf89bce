# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: how shard_fetch_wait waits for a node's fetch: when it looks at the job, and what it shows each interval."""

import time

from ansible.errors import AnsibleActionFail

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_progress.lines import named, progress_line, total_line


def wait_for(status, show, poll, interval, timeout, clock=time.monotonic):
    """Call status(seconds) until it says the job finished (or failed) and return what it said. Each call may take up to
    that many seconds, returning as soon as the job ends: at most poll, and never past the next show() or the deadline.
    show() comes every interval seconds (None: never). Raises AnsibleActionFail after timeout seconds."""
    start = clock()
    deadline = start + timeout
    next_show = start + interval if interval else float("inf")
    while True:
        now = clock()
        if now >= deadline:
            raise AnsibleActionFail("the fetch did not finish within %d s (shard_staging_fetch_time_limit); it goes on in the "
                                    "background on the node, and a re-run picks up what it staged" % timeout)
        state = status(max(0.0, min(poll, next_show - now, deadline - now)))
        if state.get("finished") or state.get("failed"):
            return state
        if clock() >= next_show:
            show()
            while next_show <= clock():
                next_show += interval


class Watch(object):
    """One node's progress display: its own line every interval and, when its turn, the cluster total."""

    def __init__(self, read_progress, say, host, args, board):
        self.read_progress = read_progress  # (dest, run_id) -> the node's progress document, or None
        self.say = say
        self.host = host
        self.args = args
        self.board = board
        self.last = None
        self.earlier = None

    def show(self):
        args = self.args
        progress = self.read_progress(args["dest"], args["progress_id"])
        if progress is not None and progress.get("run_id") != args["progress_id"]:
            progress = self._earlier(progress)
            if progress is not None:
                self.say("%s: waiting for an earlier run's fetch, still at work here: %s" % (
                    named(self.host, args["label"]), progress_line(self.host, args["label"], progress).split(": ", 1)[1]))
                return
        if progress is None and self.last is not None:
            return  # the engine has ended and removed its progress file: the summary line comes next, not "preparing"
        if progress is None:
            self.say("%s: preparing (reading dest and the journal, planning the transfers)" % named(self.host, args["label"]))
        else:
            self.last = progress
            self.say(progress_line(self.host, args["label"], progress))
            self.board.post(self.host, progress)
        if len(self.board.hosts) > 1 and self.board.claim_total(args["progress_interval"]):
            self.say(total_line(args["label"], self.board.entries(), len(self.board.hosts)))

    def _earlier(self, progress):
        """Another run's progress, once it is seen to move (its time stamp changed since the last look): a fetch an
        interrupted play left running, which this run's waits for. A file a killed run left behind never moves."""
        before, self.earlier = self.earlier, progress
        if before is None or before.get("run_id") != progress.get("run_id") or before.get("updated") == progress.get("updated"):
            return None
        return progress
