# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A dataset planned per cluster: its plan, each node's lists and peer configuration written, the clusters merged."""
import json
import pathlib

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.cluster_plans import node_lists, plan_dataset
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.list_store import write_list
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import (
    make_plan, node_shards, node_streamed, peer_roles)


@pytest.mark.parametrize("settings", [
    {"mode": "replicate"},
    {"mode": "partition", "replicas": 1},
    {"mode": "partition", "replicas": 2},
    {"mode": "stream", "stream_cache_fraction": 0.5},
])
def test_plan_dataset_writes_the_files_one_pass_per_node_wrote(tmp_path, settings):
    shards = [{"name": "s-%03d.tar" % i, "url": "http://store/ds/s-%03d.tar" % i, "size": 1000 + i, "sha256": "%064x" % i}
              for i in range(60)]
    # n5 has no room (but for a replicated plan): it keeps nothing, and in stream mode streams its share.
    room = [10 ** 6] * 5 + [10 ** 6 if settings["mode"] == "replicate" else 0]
    nodes = {"n%d" % i: {"free_bytes": free, "held_bytes": 0, "total_bytes": 10 ** 6} for i, free in enumerate(room)}
    endpoints = {host: {"address": "10.0.0.%d" % (i + 1), "port": 8473} for i, host in enumerate(sorted(nodes))}
    new_dir, old_dir = tmp_path / "new", tmp_path / "old"
    planned = plan_dataset(dict(settings, name="ds", headroom=0.0), shards, nodes, str(new_dir), endpoints, check_mode=False)
    plan = json.loads((new_dir / "ds.plan.json").read_text())
    assert plan["mode"] == settings["mode"]
    assert planned["headroom"] == 0.0  # the plan's, for the node's dataset index (gpu_monitoring's headroom series)
    # The files as the action wrote them before, one pass over the plan for each node: the same names, the same bytes.
    # Each entry names the rank that reads it (one rank per node here: all 0).
    by_record = {record["name"]: dict(record, rank=0) for record in shards}
    expected_lists, expected_streamed = {}, {}
    for host in sorted(nodes):
        expected_lists[host] = write_list(str(old_dir), [by_record[shard] for shard in node_shards(plan, host)])
        if plan["mode"] == "stream":
            expected_streamed[host] = write_list(str(old_dir), [
                {"name": shard, "url": by_record[shard]["url"], "size": by_record[shard]["size"], "samples": None, "rank": 0}
                for shard in node_streamed(plan, host)])
    assert list(planned["lists"]) == sorted(nodes) and list(planned["stream_lists"]) == list(expected_streamed)
    for written, expected in ((planned["lists"], expected_lists), (planned["stream_lists"], expected_streamed)):
        for host, path in written.items():
            assert path == expected[host].replace(str(old_dir), str(new_dir))
            assert pathlib.Path(path).read_bytes() == pathlib.Path(expected[host]).read_bytes()
    assert list(planned["peer_lists"]) == list(peer_roles(plan))
    if plan["transfer"]["peer_assist"]:
        assert {json.loads(pathlib.Path(path).read_text())["node"] for path in planned["peer_lists"].values()} == set(nodes)
    assert planned["changed"] is True
    assert plan_dataset(dict(settings, name="ds", headroom=0.0), shards, nodes, str(new_dir), endpoints, check_mode=False)["changed"] is False


def test_a_cluster_starts_from_a_plan_written_before_plans_were_per_cluster_where_it_placed_only_there(tmp_path):
    shards = [{"name": "s-%d.tar" % i, "url": "http://store/s-%d.tar" % i, "size": 100, "sha256": "%064x" % i} for i in range(8)]
    settings = {"name": "ds", "mode": "partition", "replicas": 1, "headroom": 0.0, "peer_assist": False}
    room = {"free_bytes": 10 ** 6, "held_bytes": 0, "total_bytes": 10 ** 6}
    cluster = {"a1": room, "a2": room}
    plan_dataset(settings, shards, cluster, str(tmp_path), {}, check_mode=False)
    legacy = str(tmp_path / "ds.plan.json")
    kept = plan_dataset(settings, shards, cluster, str(tmp_path / "cluster_a"), {}, check_mode=False, earlier=legacy)
    assert kept["changed"] is False and kept["changes"]["fetch_copies"] == 0
    moved = json.loads((tmp_path / "cluster_a" / "ds.plan.json").read_text())
    assert moved["assignment"] == json.loads((tmp_path / "ds.plan.json").read_text())["assignment"]
    # A plan that also placed shards on another cluster's nodes is not this cluster's: it plans afresh.
    plan_dataset(settings, shards, dict(cluster, b1=room), str(tmp_path), {}, check_mode=False)
    fresh = plan_dataset(settings, shards, cluster, str(tmp_path / "cluster_b"), {}, check_mode=False, earlier=legacy)
    assert fresh["changed"] is True and fresh["_before"] == "dataset ds: no plan yet"


def test_signed_urls_reach_the_node_lists_only_and_a_new_signature_is_no_change(tmp_path, plan_signed):
    first = plan_signed(tmp_path, "c0ffee01")
    plan_text = (tmp_path / "ds.plan.json").read_text()
    assert "c0ffee01" not in plan_text and "X-Amz-Signature=***" in plan_text
    lists = [pathlib.Path(path) for path in first["lists"].values()]
    assert all("c0ffee01" in path.read_text() for path in lists)  # the nodes fetch with the signature
    assert all(path.stat().st_mode & 0o077 == 0 for path in lists)
    again = plan_signed(tmp_path, "c0ffee02")
    assert again["changed"] is False and "c0ffee02" in pathlib.Path(again["lists"]["n0"]).read_text()


def test_the_nodes_of_a_replicated_plan_share_one_rank_split_and_one_list():
    # Built once, written once: at 200 nodes x 20,000 shards a list per node took 21.9 s against 4.1 s.
    shards = [{"name": "s-%03d.tar" % i, "url": "http://store/ds/s-%03d.tar" % i, "size": 1000 + i, "sha256": None}
              for i in range(50)]
    nodes = {"n%d" % i: {"free_bytes": 10 ** 6, "ranks": 2} for i in range(5)}
    split = {}
    plan = make_plan({"name": "ds", "mode": "replicate"}, shards, nodes, rank_split_out=split)
    held, _streamed = node_lists(plan, shards, split)
    assert len({id(ranked) for ranked in split.values()}) == 1 and len({id(entries) for entries in held.values()}) == 1
    assert sorted({entry["rank"] for entry in held["n0"]}) == [0, 1]
    assert plan["nodes"]["n0"]["rank_bytes"] == plan["nodes"]["n4"]["rank_bytes"]
    assert plan["nodes"]["n0"]["rank_bytes"] is not plan["nodes"]["n4"]["rank_bytes"]
