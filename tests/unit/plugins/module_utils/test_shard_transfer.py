# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard transfer engine against real files and a real local HTTP server with injected faults."""

import errno
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils import shard_transfer
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_transfer import JOURNAL_NAME, StagingError, stage

FAST = dict(backoff=0.001, backoff_max=0.01, timeout=5)
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
KIB = 1024
MIB = 1024 * 1024


def sha256_of(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def visible(dest):
    return sorted(name for name in os.listdir(dest) if not name.startswith("."))


def hidden_partials(dest):
    return sorted(name for name in os.listdir(dest) if name.endswith(".part") or name.endswith(".part.state"))


def snapshot(dest):
    result = {}
    for name in os.listdir(dest):
        info = os.lstat(os.path.join(dest, name))
        with open(os.path.join(dest, name), "rb") as handle:
            result[name] = (info.st_size, info.st_mtime_ns, hashlib.sha256(handle.read()).hexdigest())
    return result


def assert_staged(dest, contents):
    for name, data in contents.items():
        assert sha256_of(os.path.join(dest, name)) == hashlib.sha256(data).hexdigest(), name


# ---------------------------------------------------------------------------------------------
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
    assert sorted(journal["shards"]) == sorted(contents)
    size, mtime_ns, digest, validator = journal["shards"]["a-000.tar"]
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
    assert snapshot(str(tmp_path)) == before


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


# ---------------------------------------------------------------------------------------------
# Resume and restart
# ---------------------------------------------------------------------------------------------

def test_truncated_body_is_retried_with_a_range_request(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"t.tar": 400 * KIB})
    shard_server.inject("t.tar", "truncate", after=100 * KIB)

    result = stage(shards, str(tmp_path), retries=2, **FAST)

    assert result["fetched"] == 1 and result["failed_shards"] == []
    first, second = shard_server.requests("t.tar")
    assert (first["range"], first["sent"]) == (None, 100 * KIB)
    assert (second["range"], second["status"], second["sent"]) == ("bytes=%d-" % (100 * KIB), 206, 300 * KIB)
    assert_staged(str(tmp_path), contents)


def test_a_later_run_resumes_a_partial_with_range(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"r.tar": 512 * KIB, "other.tar": 10 * KIB})
    shard_server.inject("r.tar", "truncate", after=200 * KIB)
    dest = str(tmp_path)

    first = stage(shards, dest, retries=0, **FAST)

    assert [failure["name"] for failure in first["failed_shards"]] == ["r.tar"]
    assert visible(dest) == ["other.tar"]
    assert hidden_partials(dest) == [".r.tar.part", ".r.tar.part.state"]

    second = stage(shards, dest, retries=0, **FAST)

    assert (second["fetched"], second["resumed"], second["confirmed"]) == (1, 1, 1)
    resumed = shard_server.requests("r.tar")[-1]
    assert resumed["range"] == "bytes=%d-" % (200 * KIB)
    assert resumed["if_range"] == shard_server.blobs["/r.tar"][1]
    assert (resumed["status"], resumed["sent"]) == (206, 312 * KIB)
    assert second["fetched_bytes"] == 312 * KIB
    assert hidden_partials(dest) == []
    assert_staged(dest, contents)


@pytest.mark.parametrize("server_honours_if_range", [True, False], ids=["if-range-honoured", "if-range-ignored"])
def test_changed_source_restarts_from_zero(tmp_path, make_shards, shard_server, server_honours_if_range):
    shards, contents = make_shards({"v.tar": 256 * KIB})
    shard_server.honour_if_range = server_honours_if_range
    shard_server.inject("v.tar", "truncate", after=64 * KIB)
    stage(shards, str(tmp_path), retries=0, **FAST)
    new_data = os.urandom(256 * KIB)
    shards[0]["url"] = shard_server.add("v.tar", new_data)
    shards[0]["sha256"] = hashlib.sha256(new_data).hexdigest()

    result = stage(shards, str(tmp_path), retries=0, **FAST)

    assert result["fetched"] == 1 and result["resumed"] == 0 and result["failed_shards"] == []
    later = shard_server.requests("v.tar")[1:]
    assert later[0]["range"] == "bytes=%d-" % (64 * KIB)
    if server_honours_if_range:
        assert [(entry["status"], entry["sent"]) for entry in later] == [(200, 256 * KIB)]
    else:
        assert later[0]["status"] == 206
        assert (later[1]["range"], later[1]["status"], later[1]["sent"]) == (None, 200, 256 * KIB)
    assert_staged(str(tmp_path), {"v.tar": new_data})


def test_kill_minus_9_mid_transfer_then_rerun_completes(tmp_path, make_shards, shard_server):
    sizes = {"small-%d.tar" % index: 64 * KIB for index in range(4)}
    sizes["big.tar"] = 24 * MIB
    shards, contents = make_shards(sizes)
    shard_server.inject("big.tar", "slow", rate=6 * MIB)
    dest = str(tmp_path / "dest")
    config = dict(shards=shards, dest=dest, concurrency=2, checkpoint_bytes=MIB, journal_interval=0.05, **FAST)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, "collections"))
    child = subprocess.Popen([sys.executable, "-m", shard_transfer.__name__, str(config_path)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    journal_path = os.path.join(dest, JOURNAL_NAME)

    def small_ones_journaled():
        try:
            with open(journal_path) as handle:
                journaled = json.load(handle)["shards"]
            return all(name in journaled for name in contents if name != "big.tar")
        except (OSError, ValueError):
            return False

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        big = shard_server.requests("big.tar")
        if big and big[0]["sent"] >= 4 * MIB and small_ones_journaled():
            break
        assert child.poll() is None, child.stderr.read()
        time.sleep(0.02)
    else:
        pytest.fail("the big shard never got under way")
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stderr.close()

    assert "big.tar" not in visible(dest)
    assert ".big.tar.part" in os.listdir(dest)
    served_before_kill = shard_server.requests("big.tar")[0]["sent"]

    result = stage(shards, dest, concurrency=2, checkpoint_bytes=MIB, **FAST)

    assert result["failed_shards"] == []
    assert (result["fetched"], result["resumed"], result["confirmed"]) == (1, 1, 4)
    assert visible(dest) == sorted(contents)
    assert hidden_partials(dest) == []
    assert_staged(dest, contents)
    for name in contents:
        if name != "big.tar":
            assert len(shard_server.requests(name)) == 1, name
    resumed = shard_server.requests("big.tar")[-1]
    start = int(resumed["range"].split("=")[1].rstrip("-"))
    assert MIB <= start <= served_before_kill
    assert resumed["sent"] == 24 * MIB - start


# ---------------------------------------------------------------------------------------------
# Failures and retries
# ---------------------------------------------------------------------------------------------

def test_404_fails_naming_shard_and_url_without_retrying(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"ok.tar": 10 * KIB})
    missing_url = shard_server.url("missing.tar")
    shards.append({"name": "missing.tar", "url": missing_url})

    result = stage(shards, str(tmp_path), **FAST)

    assert result["fetched"] == 1
    assert result["failed_shards"] == [{"name": "missing.tar", "url": missing_url, "reason": "HTTP 404 Not Found"}]
    assert len(shard_server.requests("missing.tar")) == 1
    assert visible(str(tmp_path)) == ["ok.tar"]


def test_server_errors_are_retried_until_success(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"flaky.tar": 30 * KIB})
    shard_server.inject("flaky.tar", "status", times=2, code=500)

    result = stage(shards, str(tmp_path), retries=5, **FAST)

    assert result["fetched"] == 1 and result["failed_shards"] == []
    assert [entry["status"] for entry in shard_server.requests("flaky.tar")] == [500, 500, 200]
    assert_staged(str(tmp_path), contents)


def test_retries_run_out_on_a_persistent_server_error(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"down.tar": 1 * KIB})
    shard_server.inject("down.tar", "status", times=None, code=503)

    result = stage(shards, str(tmp_path), retries=2, **FAST)

    [failure] = result["failed_shards"]
    assert failure["reason"] == "HTTP 503 Service Unavailable (after 3 attempts)"
    assert len(shard_server.requests("down.tar")) == 3


def test_connection_refused_is_retried_then_reported(tmp_path):
    shards = [{"name": "gone.tar", "url": "http://127.0.0.1:9/gone.tar"}]
    result = stage(shards, str(tmp_path), retries=1, **FAST)
    [failure] = result["failed_shards"]
    assert failure["url"] == "http://127.0.0.1:9/gone.tar"
    assert "after 2 attempts" in failure["reason"]


def test_one_corrupt_transfer_is_retried(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"c.tar": 64 * KIB})
    shard_server.inject("c.tar", "corrupt", times=1)
    result = stage(shards, str(tmp_path), **FAST)
    assert result["fetched"] == 1 and len(shard_server.requests("c.tar")) == 2
    assert_staged(str(tmp_path), contents)


def test_repeated_checksum_mismatch_fails_and_leaves_no_file(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"bad.tar": 64 * KIB})
    shard_server.inject("bad.tar", "corrupt", times=None)

    result = stage(shards, str(tmp_path), retries=5, **FAST)

    [failure] = result["failed_shards"]
    assert failure["name"] == "bad.tar" and failure["url"] == shards[0]["url"]
    assert "sha256 is" in failure["reason"] and "expected %s" % shards[0]["sha256"] in failure["reason"]
    assert len(shard_server.requests("bad.tar")) == 2
    assert visible(str(tmp_path)) == [] and hidden_partials(str(tmp_path)) == []


def test_wrong_size_at_the_source_is_a_mismatch(tmp_path, make_shards):
    shards, contents = make_shards({"sz.tar": 10 * KIB}, with_sha=False)
    shards[0]["size"] = 11 * KIB
    result = stage(shards, str(tmp_path), **FAST)
    [failure] = result["failed_shards"]
    assert failure["reason"] == "the source has %d bytes, expected %d (on 2 attempts)" % (10 * KIB, 11 * KIB)


# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
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
    with open(os.path.join(dest, JOURNAL_NAME)) as handle:
        assert list(json.load(handle)["shards"]) == ["p-0.tar"]


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
    (tmp_path / ".notes.part").write_bytes(b"not the engine's: no state file")

    stage([], str(tmp_path), prune=True, **FAST)

    assert hidden_partials(str(tmp_path)) == [".notes.part"]


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


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only-mode directory anyway")
def test_read_only_dest_fails_up_front(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"a.tar": KIB})
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(StagingError, match="is not writable"):
            stage(shards, str(tmp_path), **FAST)
    finally:
        tmp_path.chmod(0o755)
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
    monkeypatch.setattr(shard_transfer._DirectoryScan, "ENTRIES_PER_WORKER", 50)
    scan = shard_transfer._DirectoryScan(str(tmp_path), 4)
    assert len(scan.workers) == 4
    found, states = scan.collect()
    assert found == _in_process_scan(tmp_path)
    assert states == {"s0001.tar"} and found[".s0001.tar.part"][1] == 5 and found["link.tar"][0] is False


def test_a_failed_scan_worker_changes_nothing_but_who_does_the_work(tmp_path, monkeypatch):
    _tree(tmp_path, 300)
    parent = os.getpid()
    real_lstat = shard_transfer._DirectoryScan._lstat

    def lstat_dies_in_workers(self, names):
        if os.getpid() != parent:
            raise OSError(errno.EIO, "simulated")
        return real_lstat(self, names)

    monkeypatch.setattr(shard_transfer._DirectoryScan, "ENTRIES_PER_WORKER", 50)
    monkeypatch.setattr(shard_transfer._DirectoryScan, "_lstat", lstat_dies_in_workers)
    scan = shard_transfer._DirectoryScan(str(tmp_path), 2)
    assert len(scan.workers) == 2
    assert scan.collect()[0] == _in_process_scan(tmp_path)


def test_an_uncollected_scan_is_closed_without_waiting_on_full_pipes(tmp_path, monkeypatch):
    # 20,000 entries marshal to far more than a pipe holds: close() must not wait for a worker stuck writing.
    for index in range(20000):
        os.close(os.open(str(tmp_path / ("%05d-a-longer-shard-name.tar" % index)), os.O_CREAT | os.O_WRONLY))
    scan = shard_transfer._DirectoryScan(str(tmp_path), 2)
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


@pytest.mark.parametrize("bad, problem", [
    ({"name": "../escape.tar", "url": "http://127.0.0.1/x"}, "without '/'"),
    ({"name": ".hidden.tar", "url": "http://127.0.0.1/x"}, "must not start with '.'"),
    ({"name": "a.tar", "url": "ftp://127.0.0.1/x"}, "url must be an http://"),
    ({"name": "a.tar", "url": "http://127.0.0.1/x", "sha256": "abc"}, "sha256 must be 64 hex digits"),
    ({"name": "a.tar", "url": "http://127.0.0.1/x", "size": -1}, "size must be a non-negative integer"),
    ({"name": "a.tar", "url": "http://127.0.0.1/x", "md5": "x"}, "unknown keys md5"),
    ("a.tar", "is not a mapping"),
])
def test_invalid_shards_are_rejected_before_anything_happens(tmp_path, bad, problem):
    with pytest.raises(StagingError, match="invalid shard list") as raised:
        stage([bad], str(tmp_path / "dest"), **FAST)
    assert problem in str(raised.value)
    assert not (tmp_path / "dest").exists()


GOOD_DIGEST = "ab" * 32


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("bad, problem", [
    ({"name": "", "url": "http://127.0.0.1/x"}, "non-empty string"),
    ({"name": "a\0.tar", "url": "http://127.0.0.1/x"}, "without '/'"),
    ({"name": "dir/a.tar", "url": "http://127.0.0.1/x"}, "without '/'"),
    ({"name": ".hidden.tar", "url": "http://127.0.0.1/x"}, "must not start with '.'"),
    ({"name": "x" * 300, "url": "http://127.0.0.1/x"}, "is longer than"),
    ({"name": 7, "url": "http://127.0.0.1/x"}, "non-empty string"),
    ({"name": "bad.tar", "url": None}, "url must be"),
    ({"name": "bad.tar", "url": "http://127.0.0.1/x", "size": True}, "size must be"),
    ({"name": "bad.tar", "url": "http://127.0.0.1/x", "size": 1.5}, "size must be"),
    ({"name": "bad.tar", "url": "http://127.0.0.1/x", "sha256": "g" * 64}, "sha256 must be"),
    ({"name": "bad.tar", "url": "http://127.0.0.1/x", "sha256": GOOD_DIGEST + "\n"}, "sha256 must be"),
    ({"name": "good.tar", "url": "http://127.0.0.1/x"}, "duplicate name"),
])
def test_a_bad_shard_anywhere_in_a_long_list_is_named(tmp_path, bad, problem, position):
    # Valid lists take a list-wide fast path; a bad shard at the start, middle or end must still be caught by it.
    shards = [{"name": "s%03d.tar" % i, "url": "http://127.0.0.1/%d" % i, "size": i, "sha256": GOOD_DIGEST} for i in range(50)]
    shards.insert({0: 0, 1: 25, 2: 50}[position], dict(bad))
    shards.append({"name": "good.tar", "url": "http://127.0.0.1/good"})
    with pytest.raises(StagingError, match="invalid shard list") as raised:
        shard_transfer.normalize_shards(shards)
    assert problem in str(raised.value)


def test_uppercase_digests_are_accepted_and_lowered():
    shards = shard_transfer.normalize_shards([{"name": "a.tar", "url": "file:///a", "sha256": "AB" * 32},
                                              {"name": "b.tar", "url": "file:///b", "sha256": "ab" * 32}])
    assert [shard.sha256 for shard in shards] == ["ab" * 32, "ab" * 32]


def test_duplicate_names_are_rejected(tmp_path):
    shards = [{"name": "a.tar", "url": "http://127.0.0.1/1"}, {"name": "a.tar", "url": "http://127.0.0.1/2"}]
    with pytest.raises(StagingError, match="duplicate name"):
        stage(shards, str(tmp_path), **FAST)


@pytest.mark.parametrize("setting, value", [("concurrency", 0), ("retries", -1), ("verify", "paranoid"), ("bandwidth_limit", 0)])
def test_bad_settings_are_rejected(tmp_path, setting, value):
    with pytest.raises(StagingError, match=setting):
        stage([], str(tmp_path), **dict(FAST, **{setting: value}))


def test_shards_file_accepts_a_list_or_an_object(tmp_path):
    shards = [{"name": "a.tar", "url": "http://127.0.0.1/a.tar"}]
    (tmp_path / "list.json").write_text(json.dumps(shards))
    (tmp_path / "object.json").write_text(json.dumps({"shards": shards}))
    assert shard_transfer.load_shards_file(str(tmp_path / "list.json")) == shards
    assert shard_transfer.load_shards_file(str(tmp_path / "object.json")) == shards
    with pytest.raises(StagingError, match="cannot read shards_file"):
        shard_transfer.load_shards_file(str(tmp_path / "absent.json"))


# ---------------------------------------------------------------------------------------------
# file:// sources
# ---------------------------------------------------------------------------------------------

def file_shards(tmp_path, sizes):
    source = tmp_path / "nfs"
    source.mkdir()
    shards, contents = [], {}
    for name, size in sizes.items():
        data = os.urandom(size)
        (source / name).write_bytes(data)
        contents[name] = data
        shards.append({"name": name, "url": "file://%s/%s" % (source, name), "size": size, "sha256": hashlib.sha256(data).hexdigest()})
    return shards, contents


def test_file_sources_are_copied_atomically(tmp_path):
    shards, contents = file_shards(tmp_path, {"n-0.tar": 3 * MIB + 5, "n-1.tar": 0, "n-2.tar": 10 * KIB})
    dest = str(tmp_path / "dest")
    result = stage(shards, dest, **FAST)
    assert result["fetched"] == 3 and result["failed_shards"] == []
    assert_staged(dest, contents)
    assert hidden_partials(dest) == []
    assert stage(shards, dest, **FAST)["changed"] is False


def test_file_copy_falls_back_when_copy_file_range_cannot_serve(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    shards, contents = file_shards(tmp_path, {"x.tar": 2 * MIB + 1})
    result = stage(shards, str(tmp_path / "dest"), **FAST)
    assert result["fetched"] == 1
    assert_staged(str(tmp_path / "dest"), contents)


def test_missing_file_source_fails_naming_the_path(tmp_path):
    shards = [{"name": "lost.tar", "url": "file://%s/nowhere/lost.tar" % tmp_path}]
    result = stage(shards, str(tmp_path / "dest"), **FAST)
    [failure] = result["failed_shards"]
    assert failure["reason"] == "cannot open %s/nowhere/lost.tar: No such file or directory" % tmp_path


def test_file_source_with_wrong_checksum_fails(tmp_path):
    shards, contents = file_shards(tmp_path, {"w.tar": 4 * KIB})
    shards[0]["sha256"] = "0" * 64
    result = stage(shards, str(tmp_path / "dest"), **FAST)
    assert "sha256 is" in result["failed_shards"][0]["reason"]
    assert visible(str(tmp_path / "dest")) == []


# ---------------------------------------------------------------------------------------------
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
