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
import fcntl
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from urllib.parse import quote

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.progress import PROGRESS_NAME, parse_progress
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.byte_units import human_bytes

display = Display()

# async bookkeeping that is not part of what the fetch reported
_BOOKKEEPING = ("ansible_job_id", "results_file", "started", "finished", "erased", "stdout", "stderr", "stdout_lines", "stderr_lines")


# -- formatting ------------------------------------------------------------------------------------

def human_duration(seconds):
    """Seconds as the two largest units: '45s', '3m 20s', '2h 10m', '3d 4h'."""
    seconds = int(round(max(0, seconds)))
    if seconds < 60:
        return "%ds" % seconds
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return "%dm %02ds" % (minutes, seconds)
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return "%dh %02dm" % (hours, minutes)
    days, hours = divmod(hours, 24)
    return "%dd %dh" % (days, hours)


def eta_seconds(progress):
    """Seconds until the bytes still to come are in at the current rate; 0 when all are in; None when it cannot be told."""
    left = progress.get("bytes_total", 0) - progress.get("bytes_done", 0)
    if left <= 0:
        return 0 if progress.get("bytes_total") or progress.get("shards_done", 0) >= progress.get("shards_total", 0) else None
    rate = progress.get("rate") or 0
    return left / rate if rate > 0 else None


def _amounts(progress):
    parts = ["{0:,}/{1:,} shards".format(progress.get("shards_done", 0), progress.get("shards_total", 0))]
    if progress.get("bytes_total"):
        parts.append("%s/%s" % (human_bytes(progress.get("bytes_done")), human_bytes(progress["bytes_total"])))
    else:
        parts.append(human_bytes(progress.get("bytes_done")))
    return parts


def _name(who, label):
    return "%s %s" % (who, label) if label else who


def progress_line(host, label, progress):
    """'gpu1 yt8m: 1,234/10,000 shards, 1.1 TiB/8.9 TiB, 1.0 GiB/s, ETA 2h 10m' (and ', 3 failed' when some did)."""
    parts = _amounts(progress)
    if progress.get("phase") == "finishing":
        parts.append("transfers done, finishing")
    else:
        eta = eta_seconds(progress)
        parts.append("%s/s" % human_bytes(progress.get("rate")))
        parts.append("ETA %s" % (human_duration(eta) if eta is not None else "unknown"))
    if progress.get("failed"):
        parts.append("{0:,} failed".format(progress["failed"]))
    return "%s: %s" % (_name(host, label), ", ".join(parts))


def total_line(label, entries, hosts):
    """The cluster-wide line from every node's latest progress (entries: host -> progress, 'done' when its fetch ended)."""
    running = [progress for progress in entries.values() if not progress.get("done")]
    total = dict(shards_done=0, shards_total=0, bytes_done=0, bytes_total=0)
    for progress in entries.values():
        for key in total:
            total[key] += progress.get(key, 0) or 0
    parts = _amounts(total)
    parts.append("%s/s" % human_bytes(sum(progress.get("rate") or 0 for progress in running)))
    etas = [eta_seconds(progress) for progress in running]
    known = [eta for eta in etas if eta is not None]
    # The cluster is done when its slowest node is.
    parts.append("ETA %s" % (human_duration(max(known)) if known and len(known) == len(etas) else "unknown"))
    failed = sum(progress.get("failed", 0) or 0 for progress in entries.values())
    if failed:
        parts.append("{0:,} failed".format(failed))
    done = len(entries) - len(running)
    heard = "%d of %d nodes" % (len(entries), hosts) if len(entries) < hosts else "%d nodes" % hosts
    return "%s: %s (%s reporting, %d done)" % (_name("all", label), ", ".join(parts), heard, done)


def summary_line(host, label, result):
    """'gpu1 yt8m: done in 2h 10m, 1,234 fetched (12 resumed), 8,766 confirmed, 0 removed, 0 failed, 8.9 TiB at 1.0 GiB/s'."""
    if "fetched" not in result:
        return None
    counts = "{0:,} fetched ({1:,} resumed), {2:,} confirmed, {3:,} removed, {4:,} failed".format(
        result.get("fetched", 0), result.get("resumed", 0), result.get("confirmed", 0), result.get("removed", 0),
        len(result.get("failed_shards") or []))
    return "%s: done in %s, %s, %s at %s/s" % (_name(host, label), human_duration(result.get("elapsed", 0)), counts,
                                               human_bytes(result.get("fetched_bytes", 0)), human_bytes(result.get("throughput", 0)))


def final_progress(last, result):
    """What the board keeps for a node whose fetch has ended: its result's counts, the byte total it last reported."""
    last = last or {}
    fetched_bytes = result.get("fetched_bytes", last.get("bytes_done", 0)) or 0
    return dict(done=True, rate=0, bytes_done=fetched_bytes, bytes_total=max(last.get("bytes_total", 0) or 0, fetched_bytes),
                shards_done=result.get("fetched", 0) + result.get("confirmed", 0) if "fetched" in result else last.get("shards_done", 0),
                shards_total=result.get("total", last.get("shards_total", 0)), failed=len(result.get("failed_shards") or []))


# -- waiting ---------------------------------------------------------------------------------------

# A look at the job waits on the node until the job ends or up to poll seconds (see ActionModule._job_status), checking its
# job file this often: the end is seen within a quarter second, at the cost of a grep and a sleep per check on the node.
TICK = 0.25


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


class Board(object):
    """The controller-side directory where each node's wait posts its latest progress, for the cluster-wide total."""

    def __init__(self, run_id, hosts, root=None):
        root = root or os.path.join(tempfile.gettempdir(), "dlinfra-shard-fetch-wait-%d" % os.getuid())
        self.directory = os.path.join(root, hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:24])
        self.hosts = sorted(set(hosts))
        os.makedirs(self.directory, mode=0o700, exist_ok=True)

    def _path(self, host):
        return os.path.join(self.directory, quote(host, safe="") + ".json")

    def post(self, host, progress):
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=".post.")
        with os.fdopen(fd, "w") as handle:
            json.dump(progress, handle)
        os.replace(temp, self._path(host))

    def entries(self):
        found = {}
        for host in self.hosts:
            try:
                with open(self._path(host)) as handle:
                    found[host] = json.load(handle)
            except (OSError, ValueError):
                continue
        return found

    def claim_total(self, interval, now=None):
        """True for the first caller in each interval (across processes): that one prints the total."""
        now = time.time() if now is None else now
        fd = os.open(os.path.join(self.directory, ".total"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                last = float(os.pread(fd, 64, 0) or 0)
            except ValueError:
                last = 0.0
            if now - last < interval / 2.0:
                return False
            stamp = repr(now).encode("ascii")
            os.ftruncate(fd, 0)
            os.pwrite(fd, stamp, 0)
            return True
        finally:
            os.close(fd)

    def finish(self, host, progress):
        """Post the node's final numbers; the last node to finish removes the board."""
        self.post(host, progress)
        entries = self.entries()
        if all(entries.get(other, {}).get("done") for other in self.hosts):
            shutil.rmtree(self.directory, ignore_errors=True)


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
            watch = _Watch(self, task_vars, host, args, Board(args["progress_id"], list(hosts) + [host]))
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


class _Watch(object):
    """One node's progress display: its own line every interval and, when its turn, the cluster total."""

    def __init__(self, action, task_vars, host, args, board):
        self.action = action
        self.task_vars = task_vars
        self.host = host
        self.args = args
        self.board = board
        self.last = None
        self.earlier = None

    def show(self):
        args = self.args
        progress = self.action._read_progress(args["dest"], args["progress_id"], self.task_vars)
        if progress is not None and progress.get("run_id") != args["progress_id"]:
            progress = self._earlier(progress)
            if progress is not None:
                display.display("%s: waiting for an earlier run's fetch, still at work here: %s" % (
                    _name(self.host, args["label"]), progress_line(self.host, args["label"], progress).split(": ", 1)[1]))
                return
        if progress is None and self.last is not None:
            return  # the engine has ended and removed its progress file: the summary line comes next, not "preparing"
        if progress is None:
            display.display("%s: preparing (reading dest and the journal, planning the transfers)" % _name(self.host, args["label"]))
        else:
            self.last = progress
            display.display(progress_line(self.host, args["label"], progress))
            self.board.post(self.host, progress)
        if len(self.board.hosts) > 1 and self.board.claim_total(args["progress_interval"]):
            display.display(total_line(args["label"], self.board.entries(), len(self.board.hosts)))

    def _earlier(self, progress):
        """Another run's progress, once it is seen to move (its time stamp changed since the last look): a fetch an
        interrupted play left running, which this run's waits for. A file a killed run left behind never moves."""
        before, self.earlier = self.earlier, progress
        if before is None or before.get("run_id") != progress.get("run_id") or before.get("updated") == progress.get("updated"):
            return None
        return progress
