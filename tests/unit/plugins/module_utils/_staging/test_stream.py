"""Stream mode, end to end on the controller and a local HTTP store: the planner's per-node shares, the hand-off lists
shard_fetch writes from them, and WebDataset reading those lists over HTTP (and from disk for the cached part)."""
from __future__ import annotations

import functools
import hashlib
import http.server
import os
import pathlib
import shutil
import sys
import threading

import pytest
import webdataset

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import (
    ShardPlanError, make_plan, node_shards, node_streamed)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.handoff import write_handoff

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[4] / "fixtures"))
import make_dataset  # noqa: E402  (the tests' dataset fixture)

SHARDS, SAMPLES = 24, 5
NODES = {"gpu1": {"free_bytes": 60_000}, "gpu2": {"free_bytes": 90_000}, "gpu3": {"free_bytes": 30_000}}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The dataset on an HTTP server: (base URL, directory, shard records)."""
    root = tmp_path_factory.mktemp("store")
    make_dataset.main(str(root), "ds", SHARDS, SAMPLES)
    directory = root / "ds"
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = "http://127.0.0.1:%d" % server.server_address[1]
    records = []
    for i in range(SHARDS):
        name = "chunks-%06d.tar" % i
        data = (directory / name).read_bytes()
        records.append({"name": name, "url": "%s/%s" % (base, name), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    yield base, directory, records
    server.shutdown()


def test_auto_streams_what_fits_nowhere_only_when_allowed(store):
    records = store[2]
    total = sum(r["size"] for r in records)
    small = {host: {"free_bytes": total // 10} for host in NODES}
    with pytest.raises(ShardPlanError, match="allow_stream: true makes mode auto plan that"):
        make_plan({"name": "ds", "headroom": 0.0}, records, small)
    plan = make_plan({"name": "ds", "headroom": 0.0, "allow_stream": True}, records, small)
    assert plan["mode"] == "stream"
    assert "fits neither on one node nor 1 copy across the 3 nodes" in plan["mode_reason"]
    assert plan["summary"].startswith("dataset ds: stream (each node streams its share, 0 shard(s) cached locally)")
    assert plan["stored_bytes"] == 0 and plan["changes"]["fetch_copies"] == 0


def test_each_shard_is_streamed_by_exactly_one_node_and_cached_within_room(store):
    records = store[2]
    plan = make_plan({"name": "ds", "mode": "stream", "stream_cache_fraction": 0.5, "headroom": 0.0}, records, NODES)
    streamed = {host: node_streamed(plan, host) for host in NODES}
    cached = {host: node_shards(plan, host) for host in NODES}
    everything = [shard for host in NODES for shard in streamed[host] + cached[host]]
    assert sorted(everything) == sorted(r["name"] for r in records)  # each shard once, on one node
    sizes = {r["name"]: r["size"] for r in records}
    for host in NODES:
        share = sum(sizes[s] for s in streamed[host] + cached[host])
        kept = sum(sizes[s] for s in cached[host])
        assert kept <= 0.5 * share and kept <= NODES[host]["free_bytes"]
        assert plan["nodes"][host]["bytes"] == kept and plan["nodes"][host]["streamed_bytes"] == share - kept
    assert plan["stored_bytes"] == sum(plan["nodes"][h]["bytes"] for h in NODES) > 0
    again = make_plan({"name": "ds", "mode": "stream", "stream_cache_fraction": 0.5, "headroom": 0.0}, records, NODES,
                      previous=plan)
    assert again["changes"]["fetch_copies"] == again["changes"]["remove_copies"] == 0


@pytest.mark.parametrize("fraction", [0.0, 0.5])
def test_webdataset_reads_every_sample_exactly_once_from_the_rank_lists(store, tmp_path, fraction):
    base, directory, records = store
    by_name = {r["name"]: r for r in records}
    plan = make_plan({"name": "ds", "mode": "stream", "stream_cache_fraction": fraction, "headroom": 0.0}, records, NODES)
    lists = []
    for host in NODES:
        dest = tmp_path / host
        dest.mkdir()
        local = [by_name[name] for name in node_shards(plan, host)]
        for shard in local:  # what shard_fetch stages for the cached part
            shutil.copyfile(directory / shard["name"], dest / shard["name"])
        streamed = [{"name": name, "url": by_name[name]["url"]} for name in node_streamed(plan, host)]
        write_handoff(str(dest), local, 2, streamed=streamed)
        for rank in ("rank-0000.txt", "rank-0001.txt"):
            lists.append((dest / "ranks" / rank).read_text().split())
    entries = [entry for rank in lists for entry in rank]
    assert len(entries) == len(set(os.path.basename(e) for e in entries)) == SHARDS  # disjoint, covering
    assert any(e.startswith(base) for e in entries)
    assert any(not e.startswith("http") for e in entries) == (fraction > 0)
    keys = []
    for rank in lists:
        if rank:
            keys.extend(sample["__key__"] for sample in webdataset.WebDataset(rank, shardshuffle=False))
    assert sorted(keys) == ["sample%07d" % n for n in range(SHARDS * SAMPLES)]
