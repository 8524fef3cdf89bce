# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Learning a dataset's shards on the controller: the index, HEAD requests for the sizes it lacks, credentials, proxies."""
import hashlib
import time

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.discovery import learn_shards, probe_size
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError


def test_sizes_come_from_head_when_the_index_has_only_checksums(tmp_path, shard_server):
    blobs = {"d-%d.tar" % i: bytes([i]) * (1000 + i) for i in range(3)}
    for name, data in blobs.items():
        shard_server.add(name, data)
    sums = tmp_path / "SHA256SUMS"
    sums.write_text("".join("%s  %s\n" % (hashlib.sha256(data).hexdigest(), name) for name, data in blobs.items()))
    records = learn_shards({"name": "d", "source": shard_server.url("d-{0..2}.tar"), "index": str(sums)}, timeout=5)
    assert [(r["name"], r["size"], r["sha256"]) for r in records] == [
        (name, len(data), hashlib.sha256(data).hexdigest()) for name, data in blobs.items()]
    assert sorted(e["path"] for e in shard_server.requests() if e.get("method") == "HEAD") == ["/d-0.tar", "/d-1.tar", "/d-2.tar"]


def test_a_missing_shard_is_named_with_its_url(shard_server):
    with pytest.raises(ShardPlanError, match=r"shard http://127\.0\.0\.1:\d+/gone\.tar: HEAD request failed"):
        probe_size(shard_server.url("gone.tar"), timeout=5)


def test_an_unreadable_index_is_named(tmp_path):
    with pytest.raises(ShardPlanError, match=r"dataset 'd': cannot read its index .*/nowhere.json"):
        learn_shards({"name": "d", "source": "http://store/d-{0..1}.tar", "index": str(tmp_path / "nowhere.json")}, timeout=5)


def test_file_sources_take_their_size_from_the_controller(tmp_path):
    (tmp_path / "a.tar").write_bytes(b"x" * 1234)
    assert probe_size("file://%s/a.tar" % tmp_path, timeout=5) == 1234
    with pytest.raises(ShardPlanError, match="give the dataset an index with sizes"):
        probe_size("file://%s/missing.tar" % tmp_path, timeout=5)


PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY")


def test_the_planner_sends_the_sources_credentials_and_never_shows_them(shard_server):
    shard_server.add("d-0.tar", b"x" * 100)
    source = shard_server.url("d-{0..1}.tar").replace("http://", "http://reader:s3cret@")
    with pytest.raises(ShardPlanError) as raised:
        learn_shards({"name": "d", "source": source}, timeout=5)  # d-1.tar is missing: a HEAD fails
    assert "s3cret" not in str(raised.value) and "reader" not in str(raised.value)
    heads = shard_server.requests()
    assert {entry["authorization"] for entry in heads} == {"Basic cmVhZGVyOnMzY3JldA=="}
    records = learn_shards({"name": "d", "source": shard_server.url("d-0.tar").replace("http://", "http://reader:s3cret@")}, timeout=5)
    assert records[0]["url"] == shard_server.url("d-0.tar")  # what the plan and the lists hold: no user info


def test_the_planner_and_the_engine_choose_the_same_proxy(shard_server, forward_proxy, monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    shard_server.add("d-0.tar", b"x" * 100)
    monkeypatch.setenv("http_proxy", forward_proxy.url)
    monkeypatch.setenv("no_proxy", "localhost")  # not 127.0.0.1: curl compares names and addresses as written
    assert probe_size(shard_server.url("d-0.tar"), timeout=5) == 100
    assert forward_proxy.seen == ["HEAD %s HTTP/1.1" % shard_server.url("d-0.tar")]
    forward_proxy.seen.clear()
    monkeypatch.setenv("no_proxy", "127.0.0.0/8")
    assert probe_size(shard_server.url("d-0.tar"), timeout=5) == 100
    assert forward_proxy.seen == []


def test_a_dataset_too_large_to_plan_is_refused_at_once_without_expanding_it():
    started = time.monotonic()
    with pytest.raises(ShardPlanError, match="has more than 2000000 values"):
        learn_shards({"name": "d", "source": "http://store/d-{0000000..9999999}.tar"}, timeout=5)
    assert time.monotonic() - started < 1


def test_more_unknown_sizes_than_the_planner_asks_for_need_an_index(shard_server):
    with pytest.raises(ShardPlanError, match="10001 shards have no size in an index, and the planner asks at most 10000"):
        learn_shards({"name": "d", "source": shard_server.url("d-{00000..10000}.tar")}, timeout=5)
    assert shard_server.requests() == []


def test_the_first_failed_head_request_stops_the_others(shard_server):
    for number in range(1, 600):
        shard_server.add("d-%03d.tar" % number, b"x")
    with pytest.raises(ShardPlanError, match=r"d-000\.tar: HEAD request failed"):
        learn_shards({"name": "d", "source": shard_server.url("d-{000..599}.tar")}, timeout=5)
    assert len(shard_server.requests()) < 600 // 2
