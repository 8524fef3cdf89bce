# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stage a node's dataset shards into a local directory, atomically and resumably.

``stage(shards, dest, ...)`` is the whole engine; the ``shard_fetch`` module and benchmarks call it.
This module checks the settings, plans each shard against the journal and a scan of dest, prunes and
reports; workers runs the transfers it plans.
A shard appears under its final name only after it is complete, verified and durable; until then it
lives in ``.NAME.part`` beside a ``.NAME.part.state`` file that records how much of it is durable and
which source version (validator) it came from, so a later run can resume it with an HTTP Range request.
Small shards are made durable in groups (group commit): workers verify and close their part files, and
the coordinating thread makes a whole batch durable with one syncfs(2) before renaming any of them; large
shards, and filesystems or kernels where syncfs cannot be trusted, get one fsync per shard instead.
A journal in ``dest`` remembers every staged shard (size, mtime_ns, sha256, validator) so a re-run
confirms them from one directory scan, and so pruning only ever removes files this engine staged.

Run without Ansible: ``python -m <this module> CONFIG.json`` where CONFIG holds stage()'s keyword
arguments plus ``shards`` or ``shards_file``; the result is printed as JSON.
"""

import json
import os
import stat
import sys
import time

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.fetcher import SOURCE_ACCESS_KEYS, Transfer
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.input import (
    ShardListFile, check_settings, normalize_shards)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import (
    JOURNAL_NAME, PART_SUFFIX, SCAN_WORKERS, STATE_SUFFIX, DirectoryScan, Journal, create_temp, cyclic_gc_paused, fsync_directory,
    nearest_existing, unlink_quietly)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.last_run import LastRun, held_and_planned
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.lock import DirectoryLock
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.peer import PeerServer, PeerSources, peer_settings
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.progress import PROGRESS_NAME
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.workers import FetchingMixin
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.byte_units import human_bytes
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import redact_url

MIB = 1 << 20


class _Run(FetchingMixin):
    """The state of one stage() call: plan, transfers (see workers.FetchingMixin), journal updates, prune and the result."""

    def __init__(self, shards, dest, journal_path, settings, listed=None):
        # None while a re-run may still confirm every shard from the journal without reading the list (listed, a
        # ShardListFile, is then the list the journal was last completed for).
        self.shards = shards
        self.listed = listed
        self.dest = dest
        self.journal_path = journal_path
        self.settings = settings
        self.check_mode = settings["check_mode"]
        self.report_limit = settings["report_limit"]
        self.journal = None
        self.counts = dict(fetched=0, fetched_bytes=0, resumed=0, confirmed=0, verified=0, repaired=0, removed=0, removed_bytes=0,
                           from_peers=0)
        self.fetched_names = []
        self.removed_names = []
        self.failed = []
        self.errors = []
        self.warnings = []
        self.fetch_seconds = 0.0
        self.transfer = Transfer(dest, settings["retries"], settings["timeout"], settings["backoff"], settings["backoff_max"],
                                 settings["bandwidth_limit"], settings["buffer_size"], settings["checkpoint_bytes"], self.check_mode)
        # Peer-assisted staging (see peer): the server hands this node's staged shards to the other nodes.
        self.server = None
        # The progress file (see progress), from the first transfer to the end of the run; what each worker is on.
        self.progress = None
        self.active = []
        self.partials = {}
        self.needed = 0
        # The record of this run for monitoring (see last_run), from the moment its shards are known.
        self.last_run = None
        self.started_wall = time.time()

    # -- preparation -----------------------------------------------------------------------------

    def prepare_dest(self):
        """Create dest and prove it writable, or (check mode) say whether that would work."""
        dest = self.dest
        if os.path.exists(dest) and not os.path.isdir(dest):
            raise StagingError("dest %s exists and is not a directory; choose another dest or remove it" % dest)
        if self.check_mode:
            anchor = nearest_existing(dest)
            if not os.path.isdir(anchor) or not os.access(anchor, os.W_OK | os.X_OK):
                raise StagingError("dest %s is not writable (checked %s); fix its permissions or choose another dest" % (dest, anchor))
            if anchor != dest:
                self.warnings.append("dest %s does not exist and would be created" % dest)
            return
        try:
            os.makedirs(dest, exist_ok=True)
            # create_temp: an unguessable name, created with O_EXCL|O_NOFOLLOW, so nothing planted in dest is opened.
            fd, probe = create_temp(os.path.join(dest, ".shard_fetch.probe"), 0o600)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise StagingError("dest %s is not writable: %s; fix its permissions or choose another dest" % (dest, exc.strerror or exc))

    def load_journal(self):
        if self.journal is not None:
            return
        real_dest = os.path.realpath(self.dest)
        with cyclic_gc_paused():
            self.journal = Journal.load(self.journal_path, real_dest)
        if self.journal.warning:
            self.warnings.append(self.journal.warning)

    @property
    def names(self):
        """The shard names of this run (while the list is unread, the journal's: they are the same, see confirm_unchanged)."""
        if self.shards is None:
            return self.journal.names()
        return [shard.name for shard in self.shards]

    def read_list(self):
        with cyclic_gc_paused():
            self.shards = normalize_shards(self.listed.load())

    def confirm_unchanged(self, files, states):
        """A re-run given, byte for byte, the list the journal was completed for (Journal.complete_for) needs no list:
        the journal's entries are then exactly its shards, with the sizes and sha256 the list gives. When every entry's
        file is still there with the recorded size and mtime, and no engine leftovers are, all are confirmed, as plan()
        would have. Returns False (nothing counted) otherwise: the list is then read and planned as usual."""
        if states or self.partials or not self.journal.matches(files):
            return False
        self.counts["confirmed"] = len(self.journal)
        if self.server is not None:
            for name, entry in self.journal.entries.items():
                self.server.publish(name, entry[0], entry[1], entry[2])
        return True

    def mark_complete(self):
        """After the run: whether the journal now holds exactly the listed shards, all staged (see confirm_unchanged)."""
        if self.listed is None or self.check_mode:
            return
        complete = not self.failed and not self.errors and (self.shards is None or self._journal_is_the_list())
        self.journal.mark_complete(self.listed.digest if complete else None)

    def _journal_is_the_list(self):
        entries = self.journal.entries
        return len(entries) == len(self.shards) and all(shard.name in entries for shard in self.shards)

    @staticmethod
    def partial_sizes(files):
        """The sizes of the engine's partial files (.NAME.part) in a dest scan, by shard name."""
        return {name[1:-len(PART_SUFFIX)]: found[1] for name, found in files.items() if name[:1] == "." and name.endswith(PART_SUFFIX)}

    def plan(self, files, verify):
        """Sort the shards into confirmed, tasks (shard, sha256 to check first or None) and failures."""
        tasks = []
        entries = self.journal.entries
        for shard in self.shards:
            found = files.get(shard.name)
            if found is None:
                tasks.append((shard, None))
                continue
            regular, size, mtime_ns = found
            if not regular:
                self._record_failure(shard, "%s exists and is not a regular file; move it away" % os.path.join(self.dest, shard.name))
                continue
            entry = entries.get(shard.name)
            staged = entry is not None and entry[0] == size and entry[1] == mtime_ns
            if staged and shard.sha256 is not None and shard.sha256 != entry[2]:
                tasks.append((shard, None))
            elif shard.size is not None and shard.size != size:
                tasks.append((shard, None))
            elif staged and verify == "quick":
                self.counts["confirmed"] += 1
                if self.server is not None:
                    self.server.publish(shard.name, size, mtime_ns, entry[2])
            elif staged:
                tasks.append((shard, shard.sha256 or entry[2]))
            elif shard.sha256 is not None:
                tasks.append((shard, shard.sha256))
            else:
                tasks.append((shard, None))
        return tasks

    def check_space(self, tasks, partials):
        needed = unknown = count = 0
        for shard, expected in tasks:
            if expected is not None:
                continue
            count += 1
            if shard.size is None:
                unknown += 1
            else:
                needed += max(0, shard.size - partials.get(shard.name, 0))
        anchor = nearest_existing(self.dest)
        info = os.statvfs(anchor)
        free = info.f_bavail * info.f_frsize
        if needed > free:
            raise StagingError(
                "not enough free space for %s: %d shards need %d bytes (%s) but only %d bytes (%s) are free on its filesystem; "
                "short by %d bytes (%s). Free space there or assign fewer shards to this node"
                % (self.dest, count, needed, human_bytes(needed), free, human_bytes(free), needed - free, human_bytes(needed - free)))
        if unknown:
            self.warnings.append("%d shards have no size; the free-space check could not count them" % unknown)
        self.needed = needed
        return needed

    # -- the run's record (see last_run) ---------------------------------------------------------

    def start_last_run(self):
        if self.check_mode:
            return
        self.last_run = LastRun(self.dest, self.settings["progress_id"], self.started_wall)
        self.last_run.start(held_and_planned(self.shards, self.journal))

    def finish_last_run(self, succeeded):
        record = self.last_run
        record.finish(succeeded, held_and_planned(self.shards, self.journal), len(self.failed))
        if record.error:
            self.warnings.append(record.error)

    # -- failures and the journal (the transfers are workers.FetchingMixin's) --------------------

    def _record_failure(self, shard, reason):
        self.failed.append({"name": shard.name, "url": redact_url(shard.url), "reason": reason})

    def _save_journal(self, during_run=False):
        try:
            fsync_directory(self.dest)
            self.journal.save()
        except OSError as exc:
            message = "cannot write the journal %s: %s" % (self.journal_path, exc.strerror or exc)
            if during_run:
                if message not in self.warnings:
                    self.warnings.append(message + " (retried at the end of the run)")
            else:
                self.errors.append(message + "; the next run re-verifies what this one staged")

    # -- prune -----------------------------------------------------------------------------------

    def prune(self, partials, states):
        """Remove staged shards that are no longer assigned, and the engine's leftovers for them."""
        assigned = set(self.names)
        for name in [name for name in self.journal.entries if name not in assigned]:
            size, mtime_ns = self.journal.entries[name][:2]
            path = os.path.join(self.dest, name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                self.journal.forget(name)
                continue
            except OSError as exc:
                self.errors.append("cannot inspect %s for pruning: %s" % (path, exc.strerror))
                continue
            if not stat.S_ISREG(info.st_mode) or (info.st_size, info.st_mtime_ns) != (size, mtime_ns):
                self.warnings.append("kept %s: it changed after it was staged, so it is no longer the engine's to remove" % path)
                self.journal.forget(name)
                continue
            if not self.check_mode:
                try:
                    os.unlink(path)
                except OSError as exc:
                    self.errors.append("cannot remove %s: %s" % (path, exc.strerror))
                    continue
                self.journal.forget(name)
            self.counts["removed"] += 1
            self.counts["removed_bytes"] += size
            if len(self.removed_names) < self.report_limit:
                self.removed_names.append(name)
        # The engine's leftovers for shards no longer assigned: part files, with or without the state file their first
        # checkpoint writes (a hidden .NAME.part is the engine's: no shard name starts with a dot), and state files.
        if not self.check_mode:
            for name in set(states).union(partials):
                if name not in assigned:
                    unlink_quietly(os.path.join(self.dest, "." + name + PART_SUFFIX))
                    unlink_quietly(os.path.join(self.dest, "." + name + STATE_SUFFIX))
            fsync_directory(self.dest)

    # -- result ----------------------------------------------------------------------------------

    def result(self, started):
        elapsed = time.monotonic() - started
        counts = self.counts
        throughput = counts["fetched_bytes"] / self.fetch_seconds if self.fetch_seconds and not self.check_mode else 0.0
        result = dict(counts)
        result.update(
            changed=bool(counts["fetched"] or counts["removed"]),
            total=len(self.shards) if self.shards is not None else self.counts["confirmed"],
            failed_shards=self.failed,
            errors=self.errors,
            fetched_names=self.fetched_names,
            removed_names=self.removed_names,
            elapsed=round(elapsed, 3),
            throughput=round(throughput, 1),
            dest=self.dest,
            journal=self.journal_path,
            warnings=self.warnings,
        )
        peers = self.transfer.peers
        if peers is not None or self.server is not None:
            peer_bytes = sum(peers.from_peers.values()) if peers is not None else 0
            result["peers"] = dict(
                source_bytes=counts["fetched_bytes"] - peer_bytes,
                peer_bytes=peer_bytes,
                from_peers=dict(peers.from_peers) if peers is not None else {},
                bad_data=list(peers.bad) if peers is not None else [],
                given_up=dict(peers.given_up) if peers is not None else {},
                waited_out=dict(peers.waited_out) if peers is not None else {},
                served_bytes=0,
                not_done=[],
            )
        return result


def stage(shards, dest, concurrency=8, retries=5, timeout=60.0, bandwidth_limit=None, verify="quick", prune=False,
          journal=None, check_mode=False, backoff=1.0, backoff_max=60.0, journal_interval=10.0,
          checkpoint_bytes=64 * MIB, buffer_size=MIB, report_limit=20, group_commit_bytes=8 * MIB, commit_interval=0.2, peer=None,
          progress_interval=5.0, progress_id=None, source_access=None, if_locked="fail"):
    """Bring dest in line with shards (a list of {name, url, size, sha256} mappings, or a ShardListFile) and return a
    result dict.

    A run given a ShardListFile records in the journal when dest holds exactly that list's shards; a later run given the
    same bytes (verify quick) confirms them from the journal and the directory scan without parsing the list again
    (see _Run.confirm_unchanged): a no-op re-run over a million shards is then a scan and a comparison.

    Raises StagingError, before anything is changed, for invalid input, an unusable dest, too little free
    space or a concurrent run. Per-shard failures do not raise: they are listed in result["failed_shards"]
    and the other shards are still staged; prune then does nothing. check_mode only reads (and hashes
    where verification is due) and reports what a real run would do. Shards of up to group_commit_bytes are made
    durable in batches (at most commit_interval seconds apart) with one syncfs(2) each where that can be trusted.

    ``peer`` (peer-assisted staging, see peer and _peer_settings) lets this node take some shards from the other
    nodes of the run and serve its own to them; it is ignored in check mode.

    ``source_access`` (a mapping of headers, url_username, url_password, proxy, ca_file) says how the sources are reached,
    see Transfer.set_source_access(); credentials in a source URL's user info are sent as HTTP Basic authentication. URLs
    the run reports show their credentials as ``***``.

    While shards are transferred, a progress file in dest (see progress) that carries progress_id is rewritten at
    most every progress_interval seconds (None: never) and removed when the run ends. Once its shards are known, a run
    (not in check mode) records its start, and then its end and result, in dest (see last_run).

    ``if_locked`` (wait | stop | fail, see lock) says what to do when an earlier run still stages into dest; the
    result's ``earlier_run`` says what it cost (None when there was none).
    """
    started = time.monotonic()
    check_settings(concurrency, retries, timeout, bandwidth_limit, verify, backoff, journal_interval, checkpoint_bytes, buffer_size,
                   group_commit_bytes, commit_interval)
    if progress_interval is not None and progress_interval <= 0:
        raise StagingError("progress_interval must be a positive number of seconds (or unset), got %r" % (progress_interval,))
    dest = os.path.abspath(dest)
    journal_path = os.path.abspath(journal) if journal else os.path.join(dest, JOURNAL_NAME)
    settings = dict(concurrency=concurrency, retries=retries, timeout=timeout, bandwidth_limit=bandwidth_limit,
                    check_mode=check_mode, backoff=backoff, backoff_max=backoff_max, journal_interval=journal_interval,
                    checkpoint_bytes=checkpoint_bytes, buffer_size=buffer_size, report_limit=report_limit,
                    group_commit_bytes=group_commit_bytes, commit_interval=commit_interval, progress_interval=progress_interval,
                    progress_id=progress_id)
    lock = None if check_mode else DirectoryLock(dest, if_locked)
    listed = shards if isinstance(shards, ShardListFile) else None
    scan = run = None
    succeeded = False
    try:
        # Where dest already exists, its scan starts first (under the lock) so its workers overlap the validation.
        if check_mode or lock.acquire(if_possible=True):
            scan = DirectoryScan(dest, min(os.cpu_count() or 1, SCAN_WORKERS))
        run = _Run(None, dest, journal_path, settings, listed)
        if listed is not None and scan is not None and verify == "quick":
            run.load_journal()
        if listed is None:
            with cyclic_gc_paused():
                run.shards = normalize_shards(shards)
        elif run.journal is None or run.journal.complete_for != listed.digest:
            run.read_list()
        unknown = sorted(set(source_access or {}) - set(SOURCE_ACCESS_KEYS))
        if unknown:
            raise StagingError("source_access has unknown keys %s; give %s" % (", ".join(unknown), ", ".join(SOURCE_ACCESS_KEYS)))
        run.transfer.set_source_access(**(source_access or {}))
        if peer is not None and not check_mode:
            _set_up_peers(run, peer_settings(peer))
        run.prepare_dest()
        if scan is None:
            lock.acquire()
            scan = DirectoryScan(dest, 1)
        result = _stage_locked(run, scan, verify, prune, started)
        result["earlier_run"] = lock.earlier if lock is not None else None
        succeeded = not (result["failed_shards"] or result["errors"])
        return result
    finally:
        # The record's end before the progress file goes: a reader never sees a live run without either.
        if run is not None and run.last_run is not None:
            run.finish_last_run(succeeded)
        if run is not None and run.progress is not None:
            run.progress.remove()
        if scan is not None:
            scan.close()
        if lock is not None:
            lock.release()


def _set_up_peers(run, settings):
    token = settings["token"]
    if settings["sources"]:
        run.transfer.peers = PeerSources(token, settings["peers"], settings["sources"], settings["wait"], settings["node"],
                                         settings["linger"])
    if settings["downstream"]:
        run.server = PeerServer(run.dest, settings["address"], settings["port"], token, run.names,
                                settings["downstream"], settings["linger"])


def _stage_locked(run, scan, verify, prune, started):
    result = None
    try:
        result = _stage_serving(run, scan, verify, prune, started)
        return result
    finally:
        # The nodes this one took shards from are told it is done, so they stop serving as soon as nobody needs them.
        if run.transfer.peers is not None:
            run.transfer.peers.tell_done(run.settings["timeout"], run.transfer.peers.linger)
        server = run.server
        if server is not None and server.serving:
            server.close_pending()
            try:
                not_done = server.wait_for_downstream()
            finally:
                server.stop()
            if result is not None:
                result["peers"].update(served_bytes=server.served_bytes, not_done=not_done)


def _stage_serving(run, scan, verify, prune, started):
    with cyclic_gc_paused():
        run.load_journal()
        files, states = scan.collect()
        if PROGRESS_NAME in files and not run.check_mode:
            # Left by a run that was killed (this one holds the lock): it must not pass for this run's progress.
            unlink_quietly(os.path.join(run.dest, PROGRESS_NAME))
        partials = run.partials = run.partial_sizes(files)
        run.transfer.states = frozenset(states)
        if run.shards is None and run.confirm_unchanged(files, states):
            tasks = []
        else:
            if run.shards is None:
                run.read_list()
            tasks = run.plan(files, verify)
        run.start_last_run()
    run.check_space(tasks, partials)
    if run.server is not None:
        try:
            run.server.start()
        except OSError as exc:
            run.server = None
            raise StagingError("%s; free that port or set another (shard_staging_peer_port)" % exc.strerror)
    run.execute(tasks)
    if prune and (run.failed or run.errors):
        run.warnings.append("prune skipped: %d shards failed, so nothing unassigned was removed" % len(run.failed))
    elif prune:
        run.prune(partials, states)
    run.mark_complete()
    if run.journal.dirty and not run.check_mode:
        run._save_journal()
    return run.result(started)


def _main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: python -m %s CONFIG.json (stage() keyword arguments plus shards or shards_file)\n" % __name__)
        return 2
    with open(argv[1]) as handle:
        config = json.load(handle)
    try:
        shards = ShardListFile(config.pop("shards_file")) if "shards_file" in config else config.pop("shards")
        result = stage(shards, **config)
    except StagingError as exc:
        sys.stdout.write(json.dumps({"error": str(exc)}) + "\n")
        return 2
    sys.stdout.write(json.dumps(result) + "\n")
    return 1 if result["failed_shards"] or result["errors"] else 0


if __name__ == "__main__":
    # Only for running the engine by hand or from a benchmark; inside a module, main() never runs.
    raise SystemExit(_main(sys.argv))
