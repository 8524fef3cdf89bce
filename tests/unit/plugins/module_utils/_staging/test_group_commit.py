# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Group commit in the shard transfer engine: small shards made durable in batches with one syncfs(2).

The guarantees under test: a shard is never visible under its final name before it is whole, verified and
durable; the journal never lists a shard before its rename is durable; a crash at any step leaves a state
that a re-run completes from. Crashes are real process deaths (os._exit in a child process at the step).
"""

import errno
import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import journal as engine_journal, partial as engine_partial, workers
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import JOURNAL_NAME
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage

from engine_helpers import journal_entries, read_journal

FAST = dict(backoff=0.001, backoff_max=0.01, timeout=5)
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
KIB = 1024
MIB = 1024 * 1024

needs_trusted_syncfs = pytest.mark.skipif(
    not os.path.isdir("/proc/self") or engine_journal.trusted_syncfs(os.path.dirname(os.path.abspath(__file__))) is None,
    reason="group commit needs a trusted syncfs (Linux >= 5.8 on ext4/xfs/btrfs/f2fs) where the tests run")


def visible(dest):
    return sorted(name for name in os.listdir(dest) if not name.startswith("."))


def hidden_partials(dest):
    return sorted(name for name in os.listdir(dest) if name.endswith(".part") or name.endswith(".part.state"))


def journaled(dest):
    try:
        return read_journal(os.path.join(dest, JOURNAL_NAME))
    except FileNotFoundError:
        return {}


def assert_whole(dest, contents):
    """Every visible file is a whole, correct shard (whatever else a crash left behind)."""
    for name in visible(dest):
        with open(os.path.join(dest, name), "rb") as handle:
            assert hashlib.sha256(handle.read()).digest() == hashlib.sha256(contents[name]).digest(), name


# ---------------------------------------------------------------------------------------------
# Order of the steps that make a shard durable, visible and journaled
# ---------------------------------------------------------------------------------------------

class StepLog(object):
    """Records the durability steps of a run in order, by wrapping the engine's own functions."""

    def __init__(self, monkeypatch, syncfs_works=True):
        self.events = []
        self.syncfs_calls = 0
        real_trusted = workers.trusted_syncfs
        real_fsync = os.fsync
        real_complete = engine_partial.Partial.complete
        real_publish = engine_partial.Partial.publish
        real_write = engine_journal.write_atomically
        log = self

        def trusted(path):
            real = real_trusted(path)
            if real is None:
                return None

            def syncfs(fd):
                log.syncfs_calls += 1
                if not syncfs_works:
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                real(fd)
                log.events.append(("syncfs",))
            return syncfs

        def fsync(fd):
            real_fsync(fd)
            path = os.readlink("/proc/self/fd/%d" % fd)
            log.events.append(("dirsync",) if stat.S_ISDIR(os.fstat(fd).st_mode) else ("filesync", os.path.basename(path)))

        def complete(part, sync):
            result = real_complete(part, sync)
            log.events.append(("complete", part.shard.name))
            return result

        def publish(part):
            real_publish(part)
            log.events.append(("publish", part.shard.name))

        def write_atomically(path, data):
            # Logged before the journal file is written: what it lists must be durable already.
            if os.path.basename(path) == JOURNAL_NAME:
                log.events.append(("journal", frozenset(journal_entries(data))))
            real_write(path, data)

        monkeypatch.setattr(workers, "trusted_syncfs", trusted)
        monkeypatch.setattr(workers.os, "fsync", fsync)
        monkeypatch.setattr(engine_partial.Partial, "complete", complete)
        monkeypatch.setattr(engine_partial.Partial, "publish", publish)
        monkeypatch.setattr(engine_journal, "write_atomically", write_atomically)

    def index(self, event):
        return self.events.index(event)

    def durable_at(self, name):
        """Where the shard's data became durable: its own fsync, or the first syncfs after its part was completed."""
        for position, event in enumerate(self.events):
            if event == ("filesync", "." + name + ".part"):
                return position
        completed = self.index(("complete", name))
        return next(position for position in range(completed, len(self.events)) if self.events[position] == ("syncfs",))

    def assert_ordered(self, names):
        """durable < publish (rename) < directory fsync < every journal save that lists the shard."""
        for name in names:
            published = self.index(("publish", name))
            assert self.durable_at(name) < published, name
            dir_synced = next(position for position in range(published, len(self.events)) if self.events[position] == ("dirsync",))
            for position, event in enumerate(self.events):
                if event[0] == "journal" and name in event[1]:
                    assert dir_synced < position, name

    def syncfs_count(self):
        return self.events.count(("syncfs",))

    def file_fsyncs(self):
        return [event[1] for event in self.events if event[0] == "filesync" and event[1].endswith(".part")]


@needs_trusted_syncfs
def test_small_shards_share_one_syncfs_and_keep_the_order(tmp_path, make_shards, monkeypatch):
    shards, contents = make_shards({"g-%03d.tar" % index: 16 * KIB for index in range(40)})
    steps = StepLog(monkeypatch)
    dest = str(tmp_path / "dest")

    result = stage(shards, dest, concurrency=4, commit_interval=30, **FAST)

    assert (result["fetched"], result["failed_shards"]) == (40, [])
    assert steps.syncfs_count() == 1
    assert steps.file_fsyncs() == []
    steps.assert_ordered(contents)
    assert sorted(journaled(dest)) == sorted(contents) and hidden_partials(dest) == []
    assert_whole(dest, contents)


@needs_trusted_syncfs
def test_large_shards_keep_their_own_fsync(tmp_path, make_shards, monkeypatch):
    shards, contents = make_shards({"big.tar": 3 * MIB, "small-0.tar": KIB, "small-1.tar": 2 * KIB})
    steps = StepLog(monkeypatch)
    dest = str(tmp_path / "dest")

    result = stage(shards, dest, concurrency=3, group_commit_bytes=MIB, **FAST)

    assert (result["fetched"], result["failed_shards"]) == (3, [])
    assert steps.file_fsyncs() == [".big.tar.part"]
    assert steps.syncfs_count() >= 1
    steps.assert_ordered(contents)
    assert_whole(dest, contents)


@pytest.mark.parametrize("why", ["group commit off", "untrusted filesystem", "old kernel"])
def test_without_trusted_syncfs_every_shard_is_fsynced(tmp_path, make_shards, monkeypatch, why):
    shards, contents = make_shards({"f-%d.tar" % index: 8 * KIB for index in range(6)})
    settings = dict(FAST)
    if why == "group commit off":
        settings["group_commit_bytes"] = 0
    elif why == "untrusted filesystem":
        monkeypatch.setattr(engine_journal, "filesystem_type", lambda path: "fuse.sshfs")
    else:
        monkeypatch.setattr(engine_journal.os, "uname", lambda: os.uname_result(("Linux", "n", "5.4.0-150-generic", "#1", "x86_64")))
    steps = StepLog(monkeypatch)
    dest = str(tmp_path / "dest")

    result = stage(shards, dest, concurrency=2, **settings)

    assert (result["fetched"], result["failed_shards"]) == (6, [])
    assert steps.syncfs_calls == 0
    assert sorted(steps.file_fsyncs()) == sorted("." + name + ".part" for name in contents)
    steps.assert_ordered(contents)
    assert_whole(dest, contents)


@needs_trusted_syncfs
def test_a_failed_syncfs_fails_its_batch_and_publishes_nothing(tmp_path, make_shards, monkeypatch):
    shards, contents = make_shards({"e-%d.tar" % index: 4 * KIB for index in range(5)})
    steps = StepLog(monkeypatch, syncfs_works=False)
    dest = str(tmp_path / "dest")

    result = stage(shards, dest, concurrency=2, commit_interval=30, **FAST)

    assert steps.syncfs_calls == 1
    assert result["fetched"] == 0
    assert sorted(failure["name"] for failure in result["failed_shards"]) == sorted(contents)
    assert all("durable (syncfs)" in failure["reason"] and "Input/output error" in failure["reason"] for failure in result["failed_shards"])
    assert visible(dest) == [] and hidden_partials(dest) == [] and journaled(dest) == {}
    monkeypatch.undo()

    again = stage(shards, dest, concurrency=2, **FAST)

    assert (again["fetched"], again["failed_shards"]) == (5, [])
    assert_whole(dest, contents)


def test_kernel_release_parsing():
    assert engine_journal.kernel_release("6.1.0-18-amd64") == (6, 1)
    assert engine_journal.kernel_release("5.15.0-91-generic") == (5, 15)
    assert engine_journal.kernel_release("weird") is None


def test_filesystem_type_of_proc_and_of_a_missing_mountinfo(monkeypatch):
    assert engine_journal.filesystem_type("/proc") == "proc"
    real_open = open

    def refuse_mountinfo(path, *args):
        if path == "/proc/self/mountinfo":
            raise OSError(errno.EACCES, "denied")
        return real_open(path, *args)

    monkeypatch.setattr("builtins.open", refuse_mountinfo)
    assert engine_journal.filesystem_type("/proc") is None


# ---------------------------------------------------------------------------------------------
# Real crashes between the steps, then a re-run
# ---------------------------------------------------------------------------------------------

# Runs stage() in a child process that dies (os._exit, no cleanup, like kill -9) at one step of the group commit.
CRASHING_CHILD = textwrap.dedent("""\
    import json, os, sys
    from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import journal, partial, transfer as engine, workers

    config = json.load(open(sys.argv[1]))
    point, count = config.pop("crash_point"), config.pop("crash_count")
    seen = [0]

    def die():
        os._exit(77)

    real_trusted = workers.trusted_syncfs

    def trusted(path):
        real = real_trusted(path)
        if real is None:
            sys.stderr.write("no trusted syncfs")
            os._exit(3)

        def syncfs(fd):
            if point == "before-syncfs":
                die()
            real(fd)
            if point == "after-syncfs":
                die()
        return syncfs

    real_publish = partial.Partial.publish

    def publish(part):
        if point == "mid-renames" and seen[0] == count:
            die()
        real_publish(part)
        seen[0] += 1

    def save(journal):
        die()

    workers.trusted_syncfs = trusted
    partial.Partial.publish = publish
    if point == "before-journal":
        journal.Journal.save = save
    engine.stage(**config)
    os._exit(0)
""")


@needs_trusted_syncfs
@pytest.mark.parametrize("point, expect_visible, expect_fetched", [
    ("before-syncfs", 0, 12),
    ("after-syncfs", 0, 12),
    ("mid-renames", 5, 7),
    ("before-journal", 12, 0),
])
def test_a_crash_at_each_step_leaves_a_state_a_rerun_completes(tmp_path, make_shards, shard_server, point, expect_visible, expect_fetched):
    shards, contents = make_shards({"c-%03d.tar" % index: (index + 1) * 3 * KIB for index in range(12)})
    dest = str(tmp_path / "dest")
    # One batch for the whole run (the commit at the end) and no journal save before it: the crash point is exact.
    config = dict(shards=shards, dest=dest, concurrency=3, commit_interval=60, journal_interval=60,
                  crash_point=point, crash_count=5, **FAST)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "child.py").write_text(CRASHING_CHILD)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, "collections"))
    child = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(tmp_path / "config.json")], env=env,
                           capture_output=True, text=True, timeout=60, check=False)
    assert child.returncode == 77, child.stderr

    assert len(visible(dest)) == expect_visible
    assert_whole(dest, contents)
    assert journaled(dest) == {}
    assert len([name for name in os.listdir(dest) if name.endswith(".part")]) == 12 - expect_visible
    requests_before = len(shard_server.requests())

    result = stage(shards, dest, concurrency=3, **FAST)

    assert result["failed_shards"] == []
    assert (result["fetched"], result["confirmed"]) == (expect_fetched, 12 - expect_fetched)
    # Shards that made it to their final names are confirmed by their sha256, not fetched again.
    assert result["verified"] == 12 - expect_fetched
    assert len(shard_server.requests()) - requests_before == expect_fetched
    assert visible(dest) == sorted(contents) and hidden_partials(dest) == []
    assert sorted(journaled(dest)) == sorted(contents)
    assert_whole(dest, contents)
