"""shard_verify's check of a node's staged shards against its plan, on real files written as shard_fetch leaves them."""
from __future__ import annotations

import hashlib
import random

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.handoff import write_handoff
from ansible_collections.dlinfra.gpu_cluster.plugins.modules.shard_verify import verify


@pytest.fixture
def staged(tmp_path):
    """Four planned shards staged in dest with shard_fetch's hand-off lists (two ranks), and one streamed shard."""
    dest = tmp_path / "ds"
    dest.mkdir()
    shards = []
    for index in range(4):
        name = "chunks-%06d.tar" % index
        data = bytes([index]) * (1000 + index)
        (dest / name).write_bytes(data)
        shards.append({"name": name, "url": "http://store/ds/" + name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    streamed = [{"name": "chunks-000009.tar", "url": "http://store/ds/chunks-000009.tar"}]
    write_handoff(str(dest), shards, 2, streamed=streamed)
    (dest / ".shard_fetch.journal").write_text("{}")
    return dest, shards, streamed


def test_a_node_staged_as_planned_has_nothing_to_report(staged):
    dest, shards, streamed = staged
    result = verify(str(dest), shards, 1.0, streamed=streamed)
    assert (result["missing"], result["wrong_size"], result["unplanned"], result["checksum_mismatch"]) == ([], [], [], [])
    assert result["present"] == result["planned"] == {"shards": 4, "bytes": sum(s["size"] for s in shards)}
    assert result["sampled"] == [s["name"] for s in shards]
    assert result["ranks"] == {"files": ["rank-0000.txt", "rank-0001.txt"], "missing": [], "unplanned": [], "duplicates": []}


def test_each_difference_is_named(staged):
    dest, shards, streamed = staged
    (dest / shards[0]["name"]).unlink()
    (dest / shards[1]["name"]).write_bytes(b"short")
    (dest / shards[2]["name"]).write_bytes(b"\xff" * shards[2]["size"])  # same size, other bytes
    (dest / "stray.tar").write_bytes(b"x")
    result = verify(str(dest), shards, 1.0, streamed=streamed)
    assert result["missing"] == [shards[0]["name"]]
    assert result["wrong_size"] == [{"name": shards[1]["name"], "expected": shards[1]["size"], "actual": 5}]
    assert result["unplanned"] == ["stray.tar"]
    assert result["checksum_mismatch"] == [shards[2]["name"]]


def test_rank_lists_must_cover_the_shards_once_and_name_nothing_else(staged):
    dest, shards, streamed = staged
    rank = dest / "ranks" / "rank-0001.txt"
    rank.write_text(rank.read_text() + str(dest / shards[0]["name"]) + "\n/elsewhere/x.tar\n")
    result = verify(str(dest), shards, 0.0, streamed=[])  # the streamed shard is no longer planned here
    assert result["ranks"]["duplicates"] == [str(dest / shards[0]["name"])]
    assert result["ranks"]["unplanned"] == ["/elsewhere/x.tar", streamed[0]["url"]]
    assert result["ranks"]["missing"] == []


def test_the_sample_is_a_fraction_of_the_good_shards_and_at_least_one(staged):
    dest, shards, _streamed = staged
    assert len(verify(str(dest), shards, 0.0, rng=random.Random(1))["sampled"]) == 1
    assert len(verify(str(dest), shards, 0.5, rng=random.Random(1))["sampled"]) == 2
    assert verify(str(dest / "absent"), shards, 1.0)["missing"] == sorted(s["name"] for s in shards)
