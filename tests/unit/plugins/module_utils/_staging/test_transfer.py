# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard transfer engine against real files and a real local HTTP server with injected faults."""

import hashlib
import json
import os
import tempfile
import time

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import JOURNAL_NAME
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.last_run import LAST_RUN_NAME
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage
from engine_helpers import FAST, KIB, MIB, assert_staged, hidden_partials, read_journal, snapshot, visible


# Fetching
# ---------------------------------------------------------------------------------------------

def test_happy_path_stages_every_shard_and_journals_it(tmp_path, make_shards):
    shards, contents = make_shards({"a-000.tar": 300 * KIB, "a-001.tar": 1, "a-002.tar": 0, "a-003.tar": 2 * MIB + 7})
    dest = str(tmp_path / "dest")

    result = stage(shards, dest, concurrency=3, **FAST)

    assert result["changed"] is True
    assert (result["fetched"], result["confirmed"], result["failed_shards"]) == (4, 0, [])
    assert result["fetched_bytes"] == sum(len(data) for data in contents.values())
    assert result["throughput"] > 0
    assert visible(dest) == sorted(contents)
    assert hidden_partials(dest) == []
    assert_staged(dest, contents)
    with open(os.path.join(dest, JOURNAL_NAME)) as handle:
        journal = json.load(handle)
    assert journal["dest"] == os.path.realpath(dest)
    entries = read_journal(os.path.join(dest, JOURNAL_NAME))
    assert sorted(entries) == sorted(contents)
    size, mtime_ns, digest, validator = entries["a-000.tar"]
    assert (size, mtime_ns, digest) == (300 * KIB, os.stat(os.path.join(dest, "a-000.tar")).st_mtime_ns, shards[0]["sha256"])
    assert validator.startswith('"')


def test_works_without_size_or_sha256(tmp_path, make_shards):
    shards, contents = make_shards({"x.tar": 50 * KIB}, with_size=False, with_sha=False)
    result = stage(shards, str(tmp_path), **FAST)
    assert result["fetched"] == 1
    assert_staged(str(tmp_path), contents)


def test_noop_rerun_fetches_nothing_and_reports_unchanged(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"s-%03d.tar" % index: 10 * KIB for index in range(20)})
    stage(shards, str(tmp_path), **FAST)
    requests_before = len(shard_server.requests())
    before = snapshot(str(tmp_path))

    result = stage(shards, str(tmp_path), **FAST)

    assert result["changed"] is False
    assert (result["fetched"], result["confirmed"], result["verified"]) == (0, 20, 0)
    assert len(shard_server.requests()) == requests_before
    # Nothing changes but the run's record (see last_run), which says when this run ended.
    after = snapshot(str(tmp_path))
    assert after.pop(LAST_RUN_NAME) != before.pop(LAST_RUN_NAME)
    assert after == before


def test_workers_reuse_keep_alive_connections(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"k-%03d.tar" % index: 4 * KIB for index in range(30)})
    stage(shards, str(tmp_path), concurrency=2, **FAST)
    assert len(shard_server.requests()) == 30
    assert len(set(entry["client"] for entry in shard_server.requests())) <= 2


def test_follows_redirects(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"real.tar": 20 * KIB})
    shards[0]["url"] = shard_server.redirect("moved.tar", "/real.tar")
    result = stage(shards, str(tmp_path), **FAST)
    assert result["fetched"] == 1
    assert_staged(str(tmp_path), contents)


def test_bandwidth_limit_paces_the_whole_run(tmp_path, make_shards):
    shards, contents = make_shards({"b-0.tar": MIB, "b-1.tar": MIB})
    started = time.monotonic()
    stage(shards, str(tmp_path), concurrency=2, bandwidth_limit=8 * MIB, **FAST)
    assert time.monotonic() - started >= 0.2
    assert_staged(str(tmp_path), contents)


# Existing files, verification and the journal
# ---------------------------------------------------------------------------------------------

def corrupt_in_place(path):
    info = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(info.st_size // 2)
        byte = handle.read(1)
        handle.seek(info.st_size // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def test_verify_full_detects_a_corrupted_staged_file_and_refetches_it(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"f-0.tar": 64 * KIB, "f-1.tar": 64 * KIB})
    dest = str(tmp_path)
    stage(shards, dest, **FAST)
    corrupt_in_place(os.path.join(dest, "f-0.tar"))

    quick = stage(shards, dest, **FAST)
    assert (quick["confirmed"], quick["fetched"]) == (2, 0)  # quick trusts size + mtime by design

    full = stage(shards, dest, verify="full", **FAST)

    assert full["changed"] is True
    assert (full["verified"], full["repaired"], full["fetched"], full["confirmed"]) == (2, 1, 1, 1)
    assert full["fetched_names"] == ["f-0.tar"]
    assert len(shard_server.requests("f-0.tar")) == 2 and len(shard_server.requests("f-1.tar")) == 1
    assert_staged(dest, contents)


def test_verify_full_without_sha256_uses_the_journal_hash(tmp_path, make_shards):
    shards, contents = make_shards({"j.tar": 32 * KIB}, with_sha=False)
    stage(shards, str(tmp_path), **FAST)
    corrupt_in_place(str(tmp_path / "j.tar"))
    result = stage(shards, str(tmp_path), verify="full", **FAST)
    assert result["repaired"] == 1
    assert_staged(str(tmp_path), contents)


def test_unjournaled_file_with_matching_sha256_is_adopted_without_fetching(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"pre.tar": 32 * KIB})
    (tmp_path / "pre.tar").write_bytes(contents["pre.tar"])

    result = stage(shards, str(tmp_path), **FAST)

    assert (result["confirmed"], result["verified"], result["fetched"], result["changed"]) == (1, 1, 0, False)
    assert shard_server.requests() == []
    again = stage(shards, str(tmp_path), **FAST)
    assert (again["confirmed"], again["verified"]) == (1, 0)


@pytest.mark.parametrize("with_sha", [True, False], ids=["wrong-content", "no-sha256-known"])
def test_unjournaled_file_is_refetched_when_it_cannot_be_confirmed(tmp_path, make_shards, shard_server, with_sha):
    shards, contents = make_shards({"pre.tar": 32 * KIB}, with_sha=with_sha)
    (tmp_path / "pre.tar").write_bytes(os.urandom(32 * KIB))
    result = stage(shards, str(tmp_path), **FAST)
    assert result["fetched"] == 1 and len(shard_server.requests("pre.tar")) == 1
    assert_staged(str(tmp_path), contents)


def test_a_changed_sha256_in_the_assignment_refetches(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"u.tar": 16 * KIB})
    stage(shards, str(tmp_path), **FAST)
    new_data = os.urandom(16 * KIB)
    shards[0]["url"] = shard_server.add("u.tar", new_data)
    shards[0]["sha256"] = hashlib.sha256(new_data).hexdigest()
    result = stage(shards, str(tmp_path), **FAST)
    assert result["fetched"] == 1
    assert_staged(str(tmp_path), {"u.tar": new_data})


def test_a_directory_under_a_shard_name_fails_that_shard_only(tmp_path, make_shards):
    shards, contents = make_shards({"dir.tar": KIB, "fine.tar": KIB})
    (tmp_path / "dir.tar").mkdir()
    result = stage(shards, str(tmp_path), **FAST)
    [failure] = result["failed_shards"]
    assert failure["name"] == "dir.tar" and "not a regular file" in failure["reason"]
    assert result["fetched"] == 1


# Prune
# ---------------------------------------------------------------------------------------------

def test_prune_removes_only_journal_known_unassigned_shards(tmp_path, make_shards):
    shards, contents = make_shards({"p-0.tar": KIB, "p-1.tar": 2 * KIB, "p-2.tar": KIB})
    dest = str(tmp_path)
    stage(shards, dest, **FAST)
    (tmp_path / "mine.tar").write_bytes(b"placed by a person")

    result = stage(shards[:1], dest, prune=True, **FAST)

    assert result["changed"] is True
    assert (result["removed"], result["removed_bytes"]) == (2, 3 * KIB)
    assert sorted(result["removed_names"]) == ["p-1.tar", "p-2.tar"]
    assert visible(dest) == ["mine.tar", "p-0.tar"]
    assert list(read_journal(os.path.join(dest, JOURNAL_NAME))) == ["p-0.tar"]


def test_prune_keeps_a_staged_file_that_someone_changed(tmp_path, make_shards):
    shards, contents = make_shards({"keep.tar": KIB, "stay.tar": KIB})
    stage(shards, str(tmp_path), **FAST)
    (tmp_path / "keep.tar").write_bytes(b"edited by hand")

    result = stage(shards[1:], str(tmp_path), prune=True, **FAST)

    assert result["removed"] == 0
    assert "keep.tar" in visible(str(tmp_path))
    assert any("kept" in warning and "keep.tar" in warning for warning in result["warnings"])


def test_prune_waits_for_a_fully_successful_fetch(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"old.tar": KIB})
    stage(shards, str(tmp_path), **FAST)
    replacement = [{"name": "new.tar", "url": shard_server.url("absent.tar")}]

    result = stage(replacement, str(tmp_path), prune=True, **FAST)

    assert result["removed"] == 0 and len(result["failed_shards"]) == 1
    assert visible(str(tmp_path)) == ["old.tar"]
    assert any("prune skipped" in warning for warning in result["warnings"])


def test_prune_removes_leftover_partials_of_unassigned_shards(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"half.tar": 128 * KIB})
    shard_server.inject("half.tar", "truncate", after=32 * KIB)
    stage(shards, str(tmp_path), retries=0, **FAST)
    assert hidden_partials(str(tmp_path)) == [".half.tar.part", ".half.tar.part.state"]
    # What a run killed before its first checkpoint leaves: a part file without a state file.
    (tmp_path / ".early.tar.part").write_bytes(b"first bytes")
    (tmp_path / ".notes").write_bytes(b"not the engine's")

    stage([], str(tmp_path), prune=True, **FAST)

    assert hidden_partials(str(tmp_path)) == []
    assert (tmp_path / ".notes").read_bytes() == b"not the engine's"


# ---------------------------------------------------------------------------------------------
# Up-front failures and input
# ---------------------------------------------------------------------------------------------

def test_dest_that_cannot_be_created_fails_up_front(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"a.tar": KIB})
    (tmp_path / "file").write_text("")
    dest = str(tmp_path / "file" / "dest")
    with pytest.raises(StagingError, match="dest %s is not writable" % dest):
        stage(shards, dest, **FAST)
    assert shard_server.requests() == []


NOBODY = 65534


def stage_error_bound_by_modes(shards, dest):
    """The message of the StagingError that stage(shards, dest) raises for a user whom file modes bind ("" if none):
    this process, or, as root (whom they do not bind), a child process that became nobody first."""
    if os.geteuid() != 0:
        try:
            stage(shards, dest, **FAST)
        except StagingError as exc:
            return str(exc)
        return ""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child leaves only through os._exit, so that pytest never goes on in two processes
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            assert os.path.isdir(dest), "nobody cannot reach %s" % dest  # the failure must be dest's own mode
            try:
                stage(shards, dest, **FAST)
                answer = ""
            except StagingError as exc:
                answer = str(exc)
            os.write(write_end, answer.encode())
            code = 0
        except BaseException as exc:  # pylint: disable=broad-except  # said to the parent, which fails the test
            os.write(write_end, ("the child failed: %r" % exc).encode())
        finally:
            os._exit(code)  # pylint: disable=protected-access
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        answer = reader.read().decode()
    _pid, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, answer
    return answer


def test_read_only_dest_fails_up_front(make_shards, shard_server):
    """A dest whose mode refuses writes to its owner. Root writes into it anyway, so as root the dest is nobody's and
    the stage runs as nobody, as a play's become_user would. The dest lies in the temporary directory, where nobody
    can reach it (not under tmp_path, whose parent only its owner may enter)."""
    shards, contents = make_shards({"a.tar": KIB})
    dest = tempfile.mkdtemp(prefix="read-only-dest-")
    if os.geteuid() == 0:
        os.chown(dest, NOBODY, NOBODY)  # nobody's own directory: only its mode refuses the writes
    os.chmod(dest, 0o555)
    try:
        message = stage_error_bound_by_modes(shards, dest)
    finally:
        os.chmod(dest, 0o755)
        os.rmdir(dest)
    assert "dest %s is not writable" % dest in message
    assert shard_server.requests() == []


def test_not_enough_space_fails_up_front_saying_by_how_much(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"small.tar": KIB})
    shards.append({"name": "huge.tar", "url": shard_server.url("huge.tar"), "size": 1 << 60})
    with pytest.raises(StagingError) as raised:
        stage(shards, str(tmp_path), **FAST)
    message = str(raised.value)
    assert "not enough free space for %s" % tmp_path in message
    assert "need %d bytes" % ((1 << 60) + KIB) in message and "short by" in message
    assert shard_server.requests() == []
    assert visible(str(tmp_path)) == []


@pytest.mark.parametrize("setting, value", [("concurrency", 0), ("retries", -1), ("verify", "paranoid"), ("bandwidth_limit", 0)])
def test_bad_settings_are_rejected(tmp_path, setting, value):
    with pytest.raises(StagingError, match=setting):
        stage([], str(tmp_path), **dict(FAST, **{setting: value}))


# Check mode
# ---------------------------------------------------------------------------------------------

def test_check_mode_reports_and_changes_nothing(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"c-0.tar": KIB, "c-1.tar": 2 * KIB, "c-2.tar": 3 * KIB, "c-3.tar": 4 * KIB})
    dest = str(tmp_path)
    stage(shards[:2], dest, **FAST)
    corrupt_in_place(os.path.join(dest, "c-0.tar"))
    before = snapshot(dest)
    requests_before = len(shard_server.requests())

    result = stage(shards[1:], dest, prune=True, verify="full", check_mode=True, report_limit=1, **FAST)

    assert snapshot(dest) == before
    assert len(shard_server.requests()) == requests_before
    assert result["changed"] is True
    assert (result["fetched"], result["fetched_bytes"], result["confirmed"]) == (2, 7 * KIB, 1)
    assert (result["removed"], result["removed_bytes"], result["removed_names"]) == (1, KIB, ["c-0.tar"])
    assert len(result["fetched_names"]) == 1


def test_check_mode_on_a_missing_dest_creates_nothing(tmp_path, make_shards):
    shards, contents = make_shards({"a.tar": KIB})
    result = stage(shards, str(tmp_path / "new"), check_mode=True, **FAST)
    assert result["fetched"] == 1 and result["changed"] is True
    assert not (tmp_path / "new").exists()
    assert any("would be created" in warning for warning in result["warnings"])
