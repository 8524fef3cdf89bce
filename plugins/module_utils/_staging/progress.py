# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The progress file of a staging run: a small JSON document beside the journal that a poller reads while the run goes on.

The run's coordinating thread rewrites it (atomically, without fsync: it is a view, not state) at most every
``interval`` seconds; the run removes it when it ends, whichever way. A file left behind by a run that was killed is
never taken for a live one: it carries the id the poller gave the run (``run_id``) and the writer's pid, and
``read_progress`` rejects a file whose id differs from the one asked for or whose pid is not alive on this machine.
A new run also removes a stale file as soon as it holds dest's lock.
"""

import collections
import json
import os
import time

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import PART_SUFFIX, unlink_quietly, write_atomically

PROGRESS_NAME = ".shard_fetch.progress"
PROGRESS_VERSION = 1
# The rate is measured over about this many seconds of the most recent samples.
RATE_WINDOW = 30.0
# The counts a poller shows in its summary, by name in the run's counts.
_COUNTS = ("fetched", "resumed", "confirmed", "verified", "repaired", "removed", "from_peers")


class Progress(object):
    """One run's progress file: totals fixed at the start, done counts and the current rate on every write."""

    def __init__(self, path, interval, run_id, shards_total, bytes_total, in_flight=lambda: 0, clock=time.monotonic):
        self.path = path
        self.in_flight = in_flight
        self.interval = interval
        self.run_id = run_id
        self.shards_total = shards_total
        self.bytes_total = bytes_total
        self.clock = clock
        self.started = clock()
        self.started_wall = time.time()
        self.next_write = self.started
        self.bytes_done = 0
        self.samples = collections.deque()
        self.written = False
        self.error = None

    def due(self, now):
        return now >= self.next_write

    def document(self, counts, failed, in_flight, now, phase="transfer"):
        """The progress as the file holds it; bytes done never go down (a retried shard's bytes are not taken back)."""
        self.bytes_done = max(self.bytes_done, counts["fetched_bytes"] + in_flight)
        samples = self.samples
        samples.append((now, self.bytes_done))
        while len(samples) > 2 and now - samples[1][0] >= RATE_WINDOW:
            samples.popleft()
        first_time, first_bytes = samples[0]
        rate = (self.bytes_done - first_bytes) / (now - first_time) if now > first_time else 0.0
        return dict(
            version=PROGRESS_VERSION, run_id=self.run_id, pid=os.getpid(), phase=phase,
            started=round(self.started_wall, 3), updated=round(time.time(), 3), elapsed=round(now - self.started, 3),
            shards_total=self.shards_total, shards_done=counts["confirmed"] + counts["fetched"], failed=failed,
            bytes_total=self.bytes_total, bytes_done=self.bytes_done, rate=round(rate, 1),
            counts=dict((name, counts[name]) for name in _COUNTS),
        )

    def write(self, counts, failed, phase="transfer"):
        """Rewrite the file now (failed: the list of failures so far); a failure to write costs the display, never the run
        (it is kept in self.error)."""
        now = self.clock()
        data = json.dumps(self.document(counts, len(failed), self.in_flight(), now, phase), sort_keys=True).encode("utf-8")
        self.next_write = now + self.interval
        try:
            write_atomically(self.path, data, sync=False)
        except OSError as exc:
            self.error = "cannot write the progress file %s: %s; the run goes on without showing its progress" % (
                self.path, exc.strerror or exc)
            return
        self.written = True

    def remove(self):
        if self.written:
            unlink_quietly(self.path)
            self.written = False


def in_flight_bytes(dest, active, partials):
    """Bytes received so far by this run into the part files of the shards being transferred now.

    active holds the shard (or None) each worker is busy with; partials the part sizes found before the run, which a
    resume does not receive again (and which the run's byte total leaves out)."""
    total = 0
    for shard in list(active):
        if shard is None:
            continue
        try:
            size = os.stat(os.path.join(dest, "." + shard.name + PART_SUFFIX)).st_size
        except OSError:
            continue
        total += max(0, size - partials.get(shard.name, 0))
    return total


def parse_progress(text, run_id=None):
    """The progress document in text, or None when it is not one, or belongs to another run than run_id (if given)."""
    try:
        progress = json.loads(text)
    except ValueError:
        return None
    if not isinstance(progress, dict) or progress.get("version") != PROGRESS_VERSION:
        return None
    if run_id is not None and progress.get("run_id") != run_id:
        return None
    return progress


def pid_alive(pid):
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True


def read_progress(dest, run_id=None):
    """The live progress of the run staging into dest, read on the node itself; None when there is none.

    A file whose writer is gone (a killed run) or that belongs to another run than run_id is not live."""
    try:
        with open(os.path.join(dest, PROGRESS_NAME), "rb") as handle:
            progress = parse_progress(handle.read().decode("utf-8", "replace"), run_id)
    except OSError:
        return None
    if progress is None or not pid_alive(progress.get("pid")):
        return None
    return progress
