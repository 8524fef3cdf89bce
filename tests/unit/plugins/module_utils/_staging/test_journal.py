# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's files in dest: the journal (another dest's, unreadable, malformed), the forked directory scan, the lock,
and links planted in dest (never followed)."""

import errno
import fcntl
import json
import os
import signal
import threading
import time

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import journal as engine_journal
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import (
    JOURNAL_NAME, LOCK_NAME, UnsafeFileError, open_nofollow, write_atomically)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage

from engine_helpers import FAST, KIB, fingerprint, outside_target, plant_link, read_journal, visible


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


def _as_version1(journal_path):
    """Rewrite a journal in the version 1 layout ({"shards": {name: [size, mtime_ns, sha256, validator]}})."""
    entries = read_journal(str(journal_path))
    data = json.loads(journal_path.read_text())
    journal_path.write_text(json.dumps({"version": 1, "dest": data["dest"], "shards": entries}))
    return entries


def test_a_version1_journal_is_read_and_saved_as_version2(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"a.tar": KIB, "b.tar": KIB})
    stage(shards, str(tmp_path), **FAST)
    journal_path = tmp_path / JOURNAL_NAME
    entries = _as_version1(journal_path)

    assert stage(shards, str(tmp_path), **FAST)["confirmed"] == 2
    more = make_shards({"c.tar": KIB})[0]
    result = stage(shards + more, str(tmp_path), **FAST)

    assert (result["confirmed"], result["fetched"], result["warnings"]) == (2, 1, [])
    now = read_journal(str(journal_path))
    assert {name: now[name] for name in entries} == entries and sorted(now) == ["a.tar", "b.tar", "c.tar"]


def test_malformed_version1_entries_are_dropped_and_reverified(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"a.tar": KIB, "b.tar": KIB})
    stage(shards, str(tmp_path), **FAST)
    journal_path = tmp_path / JOURNAL_NAME
    _as_version1(journal_path)
    journal = json.loads(journal_path.read_text())
    journal["shards"]["a.tar"] = "garbage"
    journal_path.write_text(json.dumps(journal))

    result = stage(shards, str(tmp_path), **FAST)

    assert (result["verified"], result["confirmed"], result["fetched"]) == (1, 2, 0)
    assert any("malformed" in warning for warning in result["warnings"])
    assert read_journal(str(journal_path))["a.tar"][2] == shards[0]["sha256"]


@pytest.mark.parametrize("damage", ["short column", "name not a string", "column missing"])
def test_a_malformed_version2_journal_is_not_trusted(tmp_path, make_shards, shard_server, damage):
    shards, contents = make_shards({"a.tar": KIB, "b.tar": KIB})
    stage(shards, str(tmp_path), **FAST)
    journal_path = tmp_path / JOURNAL_NAME
    journal = json.loads(journal_path.read_text())
    if damage == "short column":
        journal["sizes"].pop()
    elif damage == "name not a string":
        journal["names"][0] = 7
    else:
        del journal["validators"]
    journal_path.write_text(json.dumps(journal))

    result = stage(shards, str(tmp_path), prune=True, **FAST)

    assert (result["verified"], result["confirmed"], result["fetched"], result["removed"]) == (2, 2, 0, 0)
    assert any("unknown format" in warning for warning in result["warnings"])
    assert sorted(read_journal(str(journal_path))) == ["a.tar", "b.tar"]


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
    monkeypatch.setattr(engine_journal.DirectoryScan, "ENTRIES_PER_WORKER", 50)
    scan = engine_journal.DirectoryScan(str(tmp_path), 4)
    assert len(scan.workers) == 4
    found, states = scan.collect()
    assert found == _in_process_scan(tmp_path)
    assert states == {"s0001.tar"} and found[".s0001.tar.part"][1] == 5 and found["link.tar"][0] is False


def test_a_failed_scan_worker_changes_nothing_but_who_does_the_work(tmp_path, monkeypatch):
    _tree(tmp_path, 300)
    parent = os.getpid()
    real_lstat = engine_journal.DirectoryScan._lstat

    def lstat_dies_in_workers(self, names):
        if os.getpid() != parent:
            raise OSError(errno.EIO, "simulated")
        return real_lstat(self, names)

    monkeypatch.setattr(engine_journal.DirectoryScan, "ENTRIES_PER_WORKER", 50)
    monkeypatch.setattr(engine_journal.DirectoryScan, "_lstat", lstat_dies_in_workers)
    scan = engine_journal.DirectoryScan(str(tmp_path), 2)
    assert len(scan.workers) == 2
    assert scan.collect()[0] == _in_process_scan(tmp_path)


def test_an_uncollected_scan_is_closed_without_waiting_on_full_pipes(tmp_path, monkeypatch):
    # 20,000 entries marshal to far more than a pipe holds: close() must not wait for a worker stuck writing.
    for index in range(20000):
        os.close(os.open(str(tmp_path / ("%05d-a-longer-shard-name.tar" % index)), os.O_CREAT | os.O_WRONLY))
    scan = engine_journal.DirectoryScan(str(tmp_path), 2)
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


# ---------------------------------------------------------------------------------------------
# Links planted in dest (dest may be writable by others; the engine runs as root)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, what", [(JOURNAL_NAME, "the journal"), (LOCK_NAME, "the lock")])
def test_a_link_at_the_journal_or_lock_name_stops_the_run_and_its_target_is_untouched(tmp_path, make_shards, name, what):
    shards, contents = make_shards({"a.tar": KIB})
    dest = tmp_path / "dest"
    dest.mkdir()
    target = outside_target(tmp_path)
    before = fingerprint(target)
    link = plant_link(dest / name, target)

    with pytest.raises(StagingError) as raised:
        stage(shards, str(dest), **FAST)

    assert "%s %s is a symbolic link" % (what, link) in str(raised.value)
    assert "remove it" in str(raised.value)
    assert fingerprint(target) == before
    assert os.path.islink(str(link)) and visible(str(dest)) == []


def test_a_dangling_link_at_the_lock_name_creates_nothing_outside_dest(tmp_path, make_shards):
    shards, contents = make_shards({"a.tar": KIB})
    dest = tmp_path / "dest"
    dest.mkdir()
    target = tmp_path / "outside-new-file"
    link = plant_link(dest / LOCK_NAME, target)

    with pytest.raises(StagingError, match="the lock %s is a symbolic link" % link):
        stage(shards, str(dest), **FAST)

    assert not os.path.lexists(str(target))


def test_a_link_at_the_old_temporary_name_is_not_followed(tmp_path):
    # Before: the temporary file was PATH.tmp.PID.THREAD, a name anyone could guess and plant a link at.
    target = outside_target(tmp_path)
    before = fingerprint(target)
    path = tmp_path / "list.txt"
    plant_link("%s.tmp.%d.%d" % (path, os.getpid(), threading.get_ident()), target)

    write_atomically(str(path), b"new\n")

    assert path.read_bytes() == b"new\n"
    assert fingerprint(target) == before


def test_a_link_planted_at_the_temporary_name_itself_is_skipped_not_followed(tmp_path, monkeypatch):
    target = outside_target(tmp_path)
    before = fingerprint(target)
    path = tmp_path / "list.txt"
    plant_link("%s.tmp.guessed" % path, target)
    tokens = iter(["guessed", "fresh"])
    monkeypatch.setattr(engine_journal, "_temp_token", lambda: next(tokens))

    write_atomically(str(path), b"new\n")

    assert path.read_bytes() == b"new\n"
    assert fingerprint(target) == before
    assert os.path.islink("%s.tmp.guessed" % path)


def test_write_atomically_replaces_a_link_at_its_path_and_never_writes_through_it(tmp_path):
    target = outside_target(tmp_path)
    before = fingerprint(target)
    path = plant_link(tmp_path / "list.txt", target)

    write_atomically(str(path), b"new\n")

    assert not os.path.islink(str(path)) and path.read_bytes() == b"new\n"
    assert fingerprint(target) == before


def test_open_nofollow_refuses_a_hard_link_before_truncating_it(tmp_path):
    target = outside_target(tmp_path)
    before = fingerprint(target)
    os.link(str(target), str(tmp_path / "part"))

    with pytest.raises(UnsafeFileError, match="has 2 hard links"):
        open_nofollow(str(tmp_path / "part"), os.O_RDWR | os.O_CREAT | os.O_TRUNC)

    assert fingerprint(target) == before


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_RDWR | os.O_CREAT, os.O_RDWR | os.O_CREAT | os.O_TRUNC])
def test_open_nofollow_names_a_link_and_leaves_its_target(tmp_path, flags):
    target = outside_target(tmp_path)
    before = fingerprint(target)
    link = plant_link(tmp_path / "file", target)

    with pytest.raises(UnsafeFileError) as raised:
        open_nofollow(str(link), flags)

    assert raised.value.errno == errno.ELOOP
    assert str(raised.value).startswith("%s is a symbolic link" % link)
    assert fingerprint(target) == before
