# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One shard's transfer: failures and retries (HTTP status, refused connections, checksum mismatches) and file:// sources."""

import errno
import hashlib
import os


from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage

from engine_helpers import FAST, KIB, MIB, assert_staged, hidden_partials, visible


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
