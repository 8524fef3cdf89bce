# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's files in dest: the journal (another dest's, unreadable, malformed), the forked directory scan, the lock."""

import errno
import fcntl
import json
import os
import signal
import time

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils import shard_dest
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_dest import JOURNAL_NAME
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_transfer import stage

from engine_helpers import FAST, KIB, visible


def test_a_journal_of_another_dest_is_refused(tmp_path, make_shards):
    shards, contents = make_shards({"a.tar": KIB})
    stage(shards, str(tmp_path / "one"), **FAST)
    with pytest.raises(StagingError, match="give each dest its own journal"):
        stage(shards, str(tmp_path / "two"), journal=str(tmp_path / "one" / JOURNAL_NAME), **FAST)


def test_an_unreadable_journal_means_reverify_and_no_prune(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"a.tar": KIB, "b.tar": KIB})
    stage(shards, str(tmp_path), **FAST)
    (tmp_path / JOURNAL_NAME).write_text("{not json")

    result = stage(shards[:1], str(tmp_path), prune=True, **FAST)

    assert result["verified"] == 1 and result["removed"] == 0
    assert any("unreadable" in warning for warning in result["warnings"])
    assert visible(str(tmp_path)) == ["a.tar", "b.tar"]


def test_malformed_journal_entries_are_dropped_and_reverified(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"a.tar": KIB, "b.tar": KIB})
    stage(shards, str(tmp_path), **FAST)
    journal_path = tmp_path / JOURNAL_NAME
    journal = json.loads(journal_path.read_text())
    journal["shards"]["a.tar"] = "garbage"
    journal_path.write_text(json.dumps(journal))

    result = stage(shards, str(tmp_path), **FAST)

    assert (result["verified"], result["confirmed"], result["fetched"]) == (1, 2, 0)
    assert any("malformed" in warning for warning in result["warnings"])
    assert json.loads(journal_path.read_text())["shards"]["a.tar"][2] == shards[0]["sha256"]


def _tree(path, count):
    for index in range(count):
        (path / ("s%04d.tar" % index)).write_bytes(b"x" * (index % 7))
    (path / ".s0001.tar.part").write_bytes(b"12345")
    (path / ".s0001.tar.part.state").write_bytes(b"{}")
    os.mkdir(path / "subdir")
    os.symlink("s0002.tar", path / "link.tar")


def _in_process_scan(path):
    found = {}
    for entry in os.scandir(path):
        if not entry.name.endswith(".part.state"):
            info = entry.stat(follow_symlinks=False)
            found[entry.name] = (entry.is_file(follow_symlinks=False), info.st_size, info.st_mtime_ns)
    return found


def test_the_forked_scan_finds_what_an_in_process_scan_finds(tmp_path, monkeypatch):
    _tree(tmp_path, 300)
    monkeypatch.setattr(shard_dest.DirectoryScan, "ENTRIES_PER_WORKER", 50)
    scan = shard_dest.DirectoryScan(str(tmp_path), 4)
    assert len(scan.workers) == 4
    found, states = scan.collect()
    assert found == _in_process_scan(tmp_path)
    assert states == {"s0001.tar"} and found[".s0001.tar.part"][1] == 5 and found["link.tar"][0] is False


def test_a_failed_scan_worker_changes_nothing_but_who_does_the_work(tmp_path, monkeypatch):
    _tree(tmp_path, 300)
    parent = os.getpid()
    real_lstat = shard_dest.DirectoryScan._lstat

    def lstat_dies_in_workers(self, names):
        if os.getpid() != parent:
            raise OSError(errno.EIO, "simulated")
        return real_lstat(self, names)

    monkeypatch.setattr(shard_dest.DirectoryScan, "ENTRIES_PER_WORKER", 50)
    monkeypatch.setattr(shard_dest.DirectoryScan, "_lstat", lstat_dies_in_workers)
    scan = shard_dest.DirectoryScan(str(tmp_path), 2)
    assert len(scan.workers) == 2
    assert scan.collect()[0] == _in_process_scan(tmp_path)


def test_an_uncollected_scan_is_closed_without_waiting_on_full_pipes(tmp_path, monkeypatch):
    # 20,000 entries marshal to far more than a pipe holds: close() must not wait for a worker stuck writing.
    for index in range(20000):
        os.close(os.open(str(tmp_path / ("%05d-a-longer-shard-name.tar" % index)), os.O_CREAT | os.O_WRONLY))
    scan = shard_dest.DirectoryScan(str(tmp_path), 2)
    pids = [worker[0] for worker in scan.workers]
    assert len(pids) == 2
    time.sleep(0.5)

    def hung(*_):
        raise AssertionError("close() waited on a worker blocked on its pipe")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        scan.close()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_second_run_on_a_locked_dest_is_refused(tmp_path, make_shards):
    shards, contents = make_shards({"a.tar": KIB})
    with open(tmp_path / ".shard_fetch.lock", "w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(StagingError, match="locked by another shard_fetch run"):
            stage(shards, str(tmp_path), **FAST)
