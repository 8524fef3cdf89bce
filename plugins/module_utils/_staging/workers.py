# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The running of a run's fetches, once transfer has planned them: worker threads take the shards from a TaskQueue and
bring each into dest (fetcher.Transfer); the coordinating thread applies their outcomes to the counts and the journal,
makes the small shards durable together (GroupCommit), and saves the journal and the progress file as it goes."""

import collections
import heapq
import itertools
import os
import threading
import time

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import LocalError, describe
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.fetcher import Outcome, Transfer
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.http import Connections
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import trusted_syncfs
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.peer import RETRY_SECONDS
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.progress import PROGRESS_NAME, Progress, in_flight_bytes

MIB = 1 << 20


class TaskQueue(object):
    """The run's shards to process, in order, in two lines: those from their sources and those from peers. A shard a
    peer does not have yet comes back after RETRY_SECONDS.

    Peer-assisted, a few workers (``source_workers``) take the source line first and the others the peer line: the
    shards this node seeds then arrive one after another, each ready for the peers early, instead of all of them
    together at the end of the source's share, which would leave the links between the nodes idle until then.
    """

    def __init__(self, tasks, from_peer=None):
        self.ready = collections.deque(task for task in tasks if from_peer is None or not from_peer(task[0]))
        self.peer_ready = collections.deque(task for task in tasks if from_peer is not None and from_peer(task[0]))
        self.later = []
        self.order = itertools.count()
        self.changed = threading.Condition()

    def get(self, source_first=True):
        """The next task, waiting for a deferred one when only those are left of the worker's line; None when there is
        nothing left."""
        with self.changed:
            while True:
                while self.later and self.later[0][0] <= time.monotonic():
                    self.peer_ready.append(heapq.heappop(self.later)[2])
                if source_first and self.ready:
                    return self.ready.popleft()
                if self.peer_ready:
                    return self.peer_ready.popleft()
                if self.ready and not self.later:
                    return self.ready.popleft()
                if not self.later:
                    return None
                self.changed.wait(self.later[0][0] - time.monotonic())

    def defer(self, task):
        with self.changed:
            heapq.heappush(self.later, (time.monotonic() + RETRY_SECONDS, next(self.order), task))
            self.changed.notify()


class GroupCommit(object):
    """Fetched small shards waiting to be made durable together: one syncfs(2) for the batch, then their renames;
    then they are handed back for the journal, whose every save fsyncs the directory first.

    Crash points: before the syncfs or before a rename, a shard is still a hidden part file, which a re-run
    fetches again; after its rename it is whole and durable under its final name but not yet journaled, so a
    re-run confirms it by its sha256 (or fetches it again when there is none). Nothing is ever visible under
    its final name before it is durable, and nothing is journaled before its rename is.
    """

    # Commit early when this much is waiting, so one syncfs never has to write back an unbounded amount.
    MAX_PENDING_BYTES = 256 * MIB

    def __init__(self, dest, syncfs, interval):
        self.syncfs = syncfs
        self.interval = interval
        self.pending = []
        self.pending_bytes = 0
        self.deadline = None
        # Opened before any shard is written: syncfs through it reports writeback errors since this point.
        self.fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)

    def close(self):
        os.close(self.fd)

    def add(self, outcome):
        if not self.pending:
            self.deadline = time.monotonic() + self.interval
        self.pending.append(outcome)
        self.pending_bytes += outcome.size

    def seconds_left(self):
        return max(0.0, self.deadline - time.monotonic()) if self.pending else None

    def due(self, finished):
        return bool(self.pending) and (finished or self.pending_bytes >= self.MAX_PENDING_BYTES or time.monotonic() >= self.deadline)

    def commit(self):
        """Make the pending shards durable and publish them; return their outcomes (failures for those that could not be)."""
        batch, self.pending, self.pending_bytes = self.pending, [], 0
        try:
            self.syncfs(self.fd)
        except OSError as exc:
            for outcome in batch:
                outcome.part.discard()
            return [self._failed(outcome, "cannot make %s durable (syncfs): %s" % (outcome.part.path, describe(exc))) for outcome in batch]
        results = []
        for outcome in batch:
            try:
                outcome.part.publish()
                outcome.part = None
                results.append(outcome)
            except LocalError as exc:
                outcome.part.discard()
                results.append(self._failed(outcome, str(exc)))
        return results

    @staticmethod
    def _failed(outcome, reason):
        failure = Transfer.failure(outcome.shard, reason, outcome.received)
        failure.hashed, failure.repaired = outcome.hashed, outcome.repaired
        return failure


class FetchingMixin(object):
    """The transfers of one stage() call, mixed into transfer._Run: they use and update its state (dest, settings,
    check_mode, transfer, journal, server, counts, fetched_names, active, partials, needed, progress, fetch_seconds)
    and its _record_failure() and _save_journal()."""

    def execute(self, tasks):
        """Run the tasks on worker threads; apply outcomes and save the journal periodically from this thread."""
        if self.check_mode:
            for shard, expected in tasks:
                if expected is None:
                    self._apply(Outcome("would_fetch", shard))
            tasks = [task for task in tasks if task[1] is not None]
        if not tasks:
            return
        started = time.monotonic()
        group = self._group_commit()
        progress = self.progress = self._start_progress()
        try:
            self._run_workers(tasks, group)
        finally:
            if group is not None:
                group.close()
                self.transfer.group_commit_bytes = -1
            if progress is not None:
                # What a poller sees while the run prunes, saves its journal and serves its peers: the final numbers.
                progress.write(self.counts, self.failed, "finishing")
                self.warnings.extend([progress.error] if progress.error else [])
        self.fetch_seconds = time.monotonic() - started

    def _start_progress(self):
        if self.settings["progress_interval"] is None or self.check_mode:
            return None
        progress = Progress(os.path.join(self.dest, PROGRESS_NAME), self.settings["progress_interval"],
                            self.settings["progress_id"], len(self.names), self.needed,
                            lambda: in_flight_bytes(self.dest, self.active, self.partials))
        progress.write(self.counts, self.failed)
        return progress

    def _group_commit(self):
        """A GroupCommit for this run's small shards, or None: every shard is then fsynced on its own."""
        if self.check_mode or not self.settings["group_commit_bytes"]:
            return None
        syncfs = trusted_syncfs(self.dest)
        if syncfs is None:
            return None
        group = GroupCommit(self.dest, syncfs, self.settings["commit_interval"])
        self.transfer.group_commit_bytes = self.settings["group_commit_bytes"]
        return group

    def _run_workers(self, tasks, group):
        # Outcomes go into a deque that this thread drains once per tick (the group commit interval) instead of
        # waking for each of them: with thousands of small shards a wake-up per shard cost more than the shard.
        peers = self.transfer.peers
        todo = TaskQueue(tasks, None if peers is None else lambda shard: peers.peer_for(shard.name) is not None)
        done, wake = collections.deque(), threading.Event()
        count = min(self.settings["concurrency"], len(tasks))
        source_workers = count if peers is None else max(1, count // 4)
        self.active = [None] * count
        workers = [threading.Thread(target=self._work, args=(todo, done, wake, index < source_workers, index),
                                    name="shard-fetch-%d" % index, daemon=True)
                   for index in range(count)]
        for worker in workers:
            worker.start()
        interval = self.settings["journal_interval"]
        tick = self.settings["commit_interval"]
        next_save = time.monotonic() + interval
        progress = self.progress
        remaining = len(tasks)
        while remaining or (group is not None and group.pending):
            if remaining:
                left = group.seconds_left() if group is not None and group.pending else None
                wake.wait(tick if left is None else min(tick, left))
                wake.clear()
            while done:
                outcome = done.popleft()
                remaining -= 1
                if outcome.part is not None:
                    group.add(outcome)
                else:
                    self._apply(outcome)
            if group is not None and group.due(finished=not remaining):
                for committed in group.commit():
                    self._apply(committed)
            now = time.monotonic()
            if not self.check_mode and self.journal.dirty and now >= next_save:
                self._save_journal(during_run=True)
                next_save = time.monotonic() + interval
            if progress is not None and progress.due(now):
                progress.write(self.counts, self.failed)
        for worker in workers:
            worker.join()

    def _work(self, todo, done, wake, source_first, index):
        transfer = self.transfer
        conns = transfer._local.conns = Connections(self.settings["timeout"], transfer.ssl_context, transfer.proxies)
        try:
            while True:
                task = todo.get(source_first)
                if task is None:
                    return
                shard, expected = task
                self.active[index] = shard
                try:
                    outcome = transfer.process(shard, expected, conns)
                except Exception as exc:  # pylint: disable=broad-except
                    # A bug must cost one shard, not hang the run waiting for its outcome.
                    outcome = transfer.failure(shard, "internal error: %r" % exc)
                self.active[index] = None
                if outcome.kind == "deferred":
                    todo.defer(task)
                else:
                    done.append(outcome)
        finally:
            conns.close()
            wake.set()

    def _apply(self, outcome):
        counts = self.counts
        shard = outcome.shard
        counts["fetched_bytes"] += outcome.received
        if outcome.hashed:
            counts["verified"] += 1
        if outcome.kind == "confirmed":
            counts["confirmed"] += 1
            previous = self.journal.entries.get(shard.name)
            validator = previous[3] if previous and len(previous) > 3 else None
            self.journal.record(shard.name, outcome.size, outcome.mtime_ns, outcome.sha256, validator)
            if self.server is not None:
                self.server.publish(shard.name, outcome.size, outcome.mtime_ns, outcome.sha256)
        elif outcome.kind in ("fetched", "would_fetch"):
            counts["fetched"] += 1
            counts["resumed"] += int(outcome.resumed)
            counts["repaired"] += int(outcome.repaired)
            if outcome.kind == "would_fetch":
                counts["fetched_bytes"] += shard.size or 0
            else:
                self.journal.record(shard.name, outcome.size, outcome.mtime_ns, outcome.sha256, outcome.validator)
                if self.server is not None:
                    self.server.publish(shard.name, outcome.size, outcome.mtime_ns, outcome.sha256)
            if outcome.peer is not None:
                counts["from_peers"] += 1
            if len(self.fetched_names) < self.report_limit:
                self.fetched_names.append(shard.name)
        else:
            reason = outcome.reason
            if outcome.repaired and self._withdraw_corrupt(shard):
                reason += "; the corrupt staged copy was removed"
            self._record_failure(shard, reason)
            if self.server is not None:
                self.server.fail(shard.name)

    def _withdraw_corrupt(self, shard):
        """Remove a staged shard that failed verification and could not be replaced, so no reader uses it."""
        entry = self.journal.entries.get(shard.name)
        path = os.path.join(self.dest, shard.name)
        try:
            info = os.lstat(path)
            if entry is None or (info.st_size, info.st_mtime_ns) != tuple(entry[:2]):
                return False
            os.unlink(path)
        except OSError:
            return False
        self.journal.forget(shard.name)
        return True
