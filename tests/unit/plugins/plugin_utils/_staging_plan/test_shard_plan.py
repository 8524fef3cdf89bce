# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the shard_staging planner: source patterns, indexes, mode choice and plans."""

from __future__ import annotations

import collections
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.placement import choose_mode, node_capacity
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import (
    changes_by_node,
    host_shards,
    host_streamed,
    make_plan,
    node_changes,
    node_shards,
    node_streamed,
    peer_roles,
    seeders,
    shard_nodes,
    summarize,
)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.byte_units import human_bytes as human
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.sources import (
    expand_source,
    parse_index,
    shard_name,
    shard_records,
)

FIXTURES = Path(__file__).parent / "fixtures" / "shard_plan"
COLLECTIONS_ROOT = Path(__file__).resolve().parents[5] / "collections"
GB = 10 ** 9


def shard_names(count, prefix="chunks-"):
    return [f"{prefix}{number:06d}.tar" for number in range(count)]


def equal_sizes(count, size=1):
    return {name: size for name in shard_names(count)}


def records(sizes):
    return [{"name": name, "url": f"http://store/ds/{name}", "size": size, "sha256": None} for name, size in sizes.items()]


def per_host_counts(assignment):
    return Counter(host for hosts in assignment.values() for host in hosts)


# ---------------------------------------------------------------------------------------------------------------
# expand_source


@pytest.mark.parametrize(
    "source, expected",
    [
        ("http://s/a-{000..003}.tar", ["http://s/a-000.tar", "http://s/a-001.tar", "http://s/a-002.tar", "http://s/a-003.tar"]),
        ("https://s/a-{8..11}.tar", ["https://s/a-8.tar", "https://s/a-9.tar", "https://s/a-10.tar", "https://s/a-11.tar"]),
        ("file:///d/a-{08..10}.tar", ["file:///d/a-08.tar", "file:///d/a-09.tar", "file:///d/a-10.tar"]),
        ("http://s/a-{9..100}.tar", [f"http://s/a-{n}.tar" for n in range(9, 101)]),
        ("http://s/a-{01..100}.tar", [f"http://s/a-{n:03d}.tar" for n in range(1, 101)]),
        ("http://s/{train,val,test}.tar", ["http://s/train.tar", "http://s/val.tar", "http://s/test.tar"]),
        ("http://s/{a,b}-{0..1}-{x,y}.tar",
         [f"http://s/{a}-{n}-{x}.tar" for a in "ab" for n in "01" for x in "xy"]),
        ("http://s/only.tar", ["http://s/only.tar"]),
        ("http://s/a-{0..1}.tar :: https://t/b-{0..1}.tar",
         ["http://s/a-0.tar", "http://s/a-1.tar", "https://t/b-0.tar", "https://t/b-1.tar"]),
        ("http://[::1]:8080/a-{0..1}.tar::http://[fe80::2]/b.tar",
         ["http://[::1]:8080/a-0.tar", "http://[::1]:8080/a-1.tar", "http://[fe80::2]/b.tar"]),
        ("http://s/{x,y}/a-{0..1}.tar?sig=1", ["http://s/x/a-0.tar?sig=1", "http://s/x/a-1.tar?sig=1", None]),
    ],
)
def test_expand_source_expands_in_order(source, expected):
    if expected[-1] is None:  # the same file names under two directories
        with pytest.raises(ShardPlanError, match=re.escape("shard name 'a-0.tar' appears twice")):
            expand_source(source)
        return
    assert expand_source(source) == expected


def test_expand_source_handles_a_100k_shard_pattern_fast():
    started = time.perf_counter()
    urls = expand_source("http://store/yt8m/chunks-{000000..099999}.tar")
    elapsed = time.perf_counter() - started
    assert len(urls) == 100_000
    assert urls[0] == "http://store/yt8m/chunks-000000.tar"
    assert urls[12345] == "http://store/yt8m/chunks-012345.tar"
    assert urls[-1] == "http://store/yt8m/chunks-099999.tar"
    assert elapsed < 2.0


@pytest.mark.parametrize(
    "source, message",
    [
        ("", "source '' is empty"),
        ("   ", "is empty"),
        (None, "source None is empty"),
        ("http://s/a-{0..3.tar", "pattern 'http://s/a-{0..3.tar' has a '{' without a matching '}' at position 11"),
        ("http://s/a-0..3}.tar", "has a '}' without a matching '{' at position 15"),
        ("http://s/a-{{0..3}}.tar", "nests braces at position 12"),
        ("http://s/a-{a..z}.tar", "bad range '{a..z}' in pattern 'http://s/a-{a..z}.tar'"),
        ("http://s/a-{1..}.tar", "bad range '{1..}'"),
        ("http://s/a-{-3..3}.tar", "bad range '{-3..3}'"),
        ("http://s/a-{0..10..2}.tar", "bad range '{0..10..2}'"),
        ("http://s/a-{10..01}.tar", "range '{10..01}' in pattern 'http://s/a-{10..01}.tar' is reversed: write {01..10}"),
        ("http://s/a-{abc}.tar", "brace group '{abc}' in pattern 'http://s/a-{abc}.tar' is neither a list"),
        ("http://s/a-{}.tar", "brace group '{}'"),
        ("ftp://s/a-{0..1}.tar", "URL 'ftp://s/a-0.tar' (pattern 'ftp://s/a-{0..1}.tar') has the unknown scheme 'ftp'"),
        ("store/a.tar", "URL 'store/a.tar' (pattern 'store/a.tar') has no scheme"),
        ("s3://bucket/a.tar", "unknown scheme 's3': use one of http://, https://, file://"),
        ("http://a/x.tar::http://b/x.tar", "shard name 'x.tar' appears twice, from 'http://a/x.tar' and 'http://b/x.tar'"),
        ("http://s/{a,b}/{0..1}.tar", "shard name '0.tar' appears twice"),
        ("http://s/a.tar::", "has an empty pattern (number 2)"),
        (":: http://s/a.tar", "has an empty pattern (number 1)"),
        ("http://s/my shard.tar", "pattern 'http://s/my shard.tar' contains whitespace"),
        ("http://s/dir/", "URL 'http://s/dir/' does not end in a file name"),
        ("http://s", "URL 'http://s' does not end in a file name"),
        ("http://s/a-{0..99999999}.tar", "has more than 2000000 values"),
        ("http://s/a-{0..9999}-{0..9999}.tar", "expands to 100000000 URLs"),
    ],
)
def test_expand_source_rejects_bad_patterns_with_a_clear_message(source, message):
    with pytest.raises(ShardPlanError, match=re.escape(message)):
        expand_source(source)


@pytest.mark.parametrize(
    "url, name",
    [
        ("http://s/yt8m/chunks-000001.tar", "chunks-000001.tar"),
        ("https://s/a/b.tar?X-Amz-Signature=1/2#frag", "b.tar"),
        ("file:///data/shards/x.tar.gz", "x.tar.gz"),
    ],
)
def test_shard_name_is_the_last_path_segment(url, name):
    assert shard_name(url) == name


# ---------------------------------------------------------------------------------------------------------------
# parse_index


def test_parse_index_reads_sha256sum_output_in_text_and_binary_mode():
    index = parse_index((FIXTURES / "SHA256SUMS").read_text(), "SHA256SUMS")
    assert index == {
        "train-000000.tar": {"size": None, "sha256": "63b21d093fe30f3b78f252742c17b567f042142d1199cf93d9a4a22814a418da", "samples": None},
        "train-000001.tar": {"size": None, "sha256": "d36fdd5816c081f3bd8e7df6094272267a1aaf1a3f6cbe874da91e563fdc8671", "samples": None},
        "train-000002.tar": {"size": None, "sha256": "52fdf7e969a0b623f3ec4b4c0926dbedf7a753beda9499aa8836fb20a1ab346b", "samples": None},
    }


def test_parse_index_unescapes_names_and_lowers_digests():
    # sha256sum marks a line with a leading backslash when the name holds a backslash or a newline.
    text = "\\" + "AB" * 32 + "  shards/odd\\\\name.tar\n\n" + "cd" * 32 + "  plain.tar\r\n"
    assert parse_index(text) == {
        "odd\\name.tar": {"size": None, "sha256": "ab" * 32, "samples": None},
        "plain.tar": {"size": None, "sha256": "cd" * 32, "samples": None},
    }


def test_parse_index_reads_a_wids_index_with_nested_datasets():
    index = parse_index((FIXTURES / "wids-index.json").read_text(), "wids-index.json")
    assert index == {
        "train-000000.tar": {"size": 10240, "sha256": "63b21d093fe30f3b78f252742c17b567f042142d1199cf93d9a4a22814a418da", "samples": 1},
        "train-000001.tar": {"size": 10240, "sha256": None, "samples": 1},
        "train-000002.tar": {"size": None, "sha256": None, "samples": 1},
    }


def wids(shardlist, **extra):
    document = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": shardlist}
    document.update(extra)
    return json.dumps(document, indent=2)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "idx is empty"),
        ("0" * 64 + "  a.tar\nnot a checksum line\n", "idx line 2: expected '<64 hex digits>  <file name>'"),
        ("0" * 63 + "  a.tar\n", "idx line 1: expected"),
        ("0" * 64 + "a.tar\n", "idx line 1: expected"),
        ("0" * 64 + "  d/a.tar\n" + "1" * 64 + "  e/a.tar\n", "idx line 2: shard 'a.tar' is listed again (first on line 1)"),
        ("0" * 64 + "  d/\n", "idx line 1: 'd/' is not a file name"),
        ('{\n  "__kind__": "wids-shard-index-v1",\n  "wids_version": 1\n  "shardlist": []\n}', "idx line 4 column 3: invalid JSON"),
        ("[1, 2]", "idx: a wids-shard-index-v1 index is a JSON object with a 'shardlist', not a list"),
        ('{"wids_version": 1,}', "idx line 1 column 20: invalid JSON"),
        ('{"wids_version": 1, "shardlist": []}', "the index lists no shards"),
        ('{"__kind__": "other-kind", "wids_version": 1}', "'__kind__' is 'other-kind'"),
        ('{"__kind__": "wids-shard-index-v1", "wids_version": 2, "shardlist": []}', "'wids_version' is 2, expected 1"),
        ('{"shardlist": []}', "'wids_version' is None"),
        (wids({"url": "a.tar"}), "'shardlist' must be a list"),
        (wids([{"nsamples": 3}]), "idx: shardlist[0] must be an object with a 'url' string"),
        (wids([{"url": "a.tar", "filesize": -1}]), "shardlist[0] (a.tar) has 'filesize' -1"),
        (wids([{"url": "a.tar", "filesize": "10"}]), "shardlist[0] (a.tar) has 'filesize' '10'"),
        (wids([{"url": "a.tar", "sha256": "abc"}]), "shardlist[0] (a.tar) has 'sha256' 'abc'; it must be 64 hex digits"),
        (wids([{"url": "x/a.tar"}, {"url": "y/a.tar"}]), "shardlist[1] repeats shard 'a.tar' (first at shardlist[0])"),
        (wids([{"url": "http://s/"}]), "url 'http://s/' does not end in a file name"),
        (wids([{"url": "a.tar"}], datasets=[{"source_url": "http://s/other.json"}]), "datasets[0] refers to another index file"),
        (wids([], datasets=[{"shardlist": [{"url": "b.tar", "filesize": 1.5}]}]), "datasets[0].shardlist[0] (b.tar) has 'filesize' 1.5"),
    ],
)
def test_parse_index_rejects_malformed_input_naming_the_place(text, message):
    with pytest.raises(ShardPlanError, match=re.escape(message)):
        parse_index(text, "idx")


def test_shard_records_join_urls_with_the_index():
    urls = expand_source("http://store/train/train-{000000..000003}.tar")
    index = parse_index((FIXTURES / "wids-index.json").read_text())
    assert shard_records(urls, index) == [
        {"name": "train-000000.tar", "url": urls[0], "size": 10240,
         "sha256": "63b21d093fe30f3b78f252742c17b567f042142d1199cf93d9a4a22814a418da", "samples": 1},
        {"name": "train-000001.tar", "url": urls[1], "size": 10240, "sha256": None, "samples": 1},
        {"name": "train-000002.tar", "url": urls[2], "size": None, "sha256": None, "samples": 1},
        {"name": "train-000003.tar", "url": urls[3], "size": None, "sha256": None, "samples": None},
    ]


# ---------------------------------------------------------------------------------------------------------------
# Capacity and mode


@pytest.mark.parametrize(
    "info, headroom, capacity",
    [
        ({"free_bytes": 1000}, 0.0, 1000),
        ({"free_bytes": 1000}, 0.05, 950),
        ({"free_bytes": 1000, "held_bytes": 500}, 0.1, 1350),
        ({"free_bytes": 1000, "held_bytes": 500, "total_bytes": 4000}, 0.1, 1100),
        ({"free_bytes": 100, "total_bytes": 4000}, 0.1, 0),
        ({"free_bytes": 999}, 0.001, 998),  # the reserve rounds up
        # ours_bytes (all that dest takes up) replaces held_bytes where a node reports it.
        ({"free_bytes": 1000, "held_bytes": 500, "ours_bytes": 800}, 0.1, 1620),
        ({"free_bytes": 1000, "held_bytes": 500, "ours_bytes": 800, "total_bytes": 4000}, 0.1, 1400),
        ({"free_bytes": 1000, "held_bytes": 500, "ours_bytes": None}, 0.1, 1350),
    ],
)
def test_node_capacity_counts_held_bytes_and_keeps_headroom(info, headroom, capacity):
    assert node_capacity("gpu1", info, headroom) == capacity


@pytest.mark.parametrize(
    "info, message",
    [
        ({}, "node 'gpu1' free_bytes is None"),
        ({"free_bytes": -1}, "node 'gpu1' free_bytes is -1"),
        ({"free_bytes": 1.5}, "node 'gpu1' free_bytes is 1.5"),
        ({"free_bytes": True}, "node 'gpu1' free_bytes is True"),
        ({"free_bytes": 1, "held_bytes": "2"}, "node 'gpu1' held_bytes is '2'"),
        ({"free_bytes": 1, "ours_bytes": -2}, "node 'gpu1' ours_bytes is -2"),
        ({"free_bytes": 1, "total_bytes": -5}, "node 'gpu1' total_bytes is -5"),
        ("lots", "node 'gpu1': capacity info must be a mapping"),
    ],
)
def test_node_capacity_rejects_bad_figures_naming_the_host(info, message):
    with pytest.raises(ShardPlanError, match=re.escape(message)):
        node_capacity("gpu1", info, 0.05)


def test_a_run_that_got_further_plans_the_same_on_free_plus_ours():
    # Node a before a run, then after a killed run left 3000 bytes of unjournaled shards and partial files: free fell
    # by 3000, the journal did not grow, and what dest takes up grew by 3000.
    shards = [{"name": "s-%03d.tar" % i, "url": "http://s/s-%03d.tar" % i, "size": 100, "sha256": None} for i in range(200)]
    before = {"a": {"free_bytes": 12000, "held_bytes": 0, "ours_bytes": 0}, "b": {"free_bytes": 12000, "held_bytes": 0, "ours_bytes": 0}}
    after = {"a": {"free_bytes": 9000, "held_bytes": 0, "ours_bytes": 3000}, "b": before["b"]}
    settings = {"name": "ds", "mode": "partition", "headroom": 0.0}
    assert make_plan(settings, shards, after)["assignment"] == make_plan(settings, shards, before)["assignment"]
    held_only = {host: {"free_bytes": info["free_bytes"], "held_bytes": 0} for host, info in after.items()}
    assert make_plan(settings, shards, held_only)["assignment"] != make_plan(settings, shards, before)["assignment"]


@pytest.mark.parametrize(
    "mode, capacities, replicas, expected",
    [
        ("auto", {"a": 100, "b": 100}, 1, "replicate"),
        ("auto", {"a": 100, "b": 99}, 1, "partition"),
        ("auto", {"a": 100, "b": 100}, 2, "replicate"),
        ("auto", {"a": 60, "b": 60, "c": 80}, 2, "partition"),
        ("partition", {"a": 500, "b": 500}, 2, "partition"),
        ("replicate", {"a": 100, "b": 100, "c": 100}, 1, "replicate"),
    ],
)
def test_choose_mode(mode, capacities, replicas, expected):
    assert choose_mode("ds", mode, 100, capacities, replicas) == expected


@pytest.mark.parametrize(
    "mode, capacities, replicas, message",
    [
        ("auto", {"a": 60, "b": 60, "c": 70}, 2, "2 replica(s) of 100 B need 200 B but the 3 node(s) have 190 B usable; 10 B (10 bytes) are missing"),
        ("partition", {"a": 40, "b": 40}, 1, "20 B (20 bytes) are missing. Stream it from distributed storage instead"),
        ("auto", {"a": 10}, 1, "(e.g. WebDataset reading straight from the HTTP / AIStore source; allow_stream: true makes "
                               "mode auto plan that)"),
        ("replicate", {"a": 100, "b": 70, "c": 99}, 1, "dataset 'ds' (100 B) cannot be replicated: b short by 30 B (30 bytes), c short by 1 B (1 bytes)"),
        ("replicate", {"a": 100}, 2, "dataset 'ds': replicas is 2 but only 1 node(s) are targeted"),
        ("partition", {"a": 1000, "b": 1000}, 3, "replicas is 3 but only 2 node(s) are targeted"),
    ],
)
def test_choose_mode_fails_saying_what_is_missing(mode, capacities, replicas, message):
    with pytest.raises(ShardPlanError, match=re.escape(message)):
        choose_mode("ds", mode, 100, capacities, replicas)


# ---------------------------------------------------------------------------------------------------------------
# Placement across processes (its own properties are in test_shard_placement.py)


PLAN_SCRIPT = """
import hashlib, json, sys
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import make_plan
shards = [{"name": f"s-{n:05d}.tar", "url": f"http://s/s-{n:05d}.tar", "size": 1000 + n % 7, "sha256": None} for n in range(5000)]
nodes = {f"gpu{n}": {"free_bytes": 2_000_000 + 150_000 * n, "ranks": 1 + n % 3} for n in range(10)}
plan = make_plan({"name": "ds", "mode": "partition", "replicas": 2}, shards, nodes)
print(hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest())
"""


def test_plans_are_identical_across_processes_with_different_hash_seeds():
    digests = set()
    for seed in ("1", "4242", "977"):
        environment = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(COLLECTIONS_ROOT))
        result = subprocess.run([sys.executable, "-c", PLAN_SCRIPT], env=environment, capture_output=True, text=True, check=True)
        digests.add(result.stdout.strip())
    assert len(digests) == 1
    assert len(next(iter(digests))) == 64


# ---------------------------------------------------------------------------------------------------------------
# Plans


def eight_nodes(free=10 ** 6, **overrides):
    nodes = {f"gpu{number}": {"free_bytes": free} for number in range(8)}
    nodes.update(overrides)
    return nodes


def test_replicated_plan():
    shards = records({"a.tar": 1024, "b.tar": 2048, "c.tar": 1024})
    nodes = {"n1": {"free_bytes": 8192, "held_bytes": 2048}, "n2": {"free_bytes": 100_000, "total_bytes": 200_000}}
    plan = make_plan({"name": "tiny", "headroom": 0.1}, shards, nodes)
    assert json.loads(json.dumps(plan)) == plan
    # The training world (tests/unit/plugins/plugin_utils/_staging_plan/test_shard_world.py), apart from the placement asserted below.
    world = plan.pop("world")
    assert world["plan_digest"].startswith("sha256:") and dict(world, plan_digest=None) == {
        "nodes": 2, "size": 2, "rendezvous": "n1", "epoch": {"unit": "bytes", "per_rank": 4096, "unread": 0},
        "plan_digest": None}
    assert [(plan["nodes"][host].pop("node_rank"), plan["nodes"][host].pop("first_rank"),
             plan["nodes"][host].pop("world")["world_size"]) for host in ("n1", "n2")] == [(0, 0, 2), (1, 1, 2)]
    assert plan == {
        "plan_version": 1,
        "dataset": "tiny",
        "mode": "replicate",
        "requested_mode": "auto",
        "mode_reason": "4.0 KiB fits on every node (smallest has 9.0 KiB usable)",
        "replicas": 2,
        "headroom": 0.1,
        "shard_count": 3,
        "total_bytes": 4096,
        "stored_bytes": 8192,
        "shards": {"a.tar": 1024, "b.tar": 2048, "c.tar": 1024},
        "assignment": None,
        "replicated_on": ["n1", "n2"],
        "cached": None,
        "nodes": {
            "n1": {"capacity": 9216, "ranks": 1, "ranks_from": "default", "fair_bytes": 4096, "capped": False,
                   "shards": 3, "bytes": 4096, "free_after": 6144, "rank_bytes": [4096], "rank_samples": None,
                   "fetch_shards": 3, "fetch_bytes": 4096, "remove_shards": 0, "remove_bytes": 0,
                   "streamed_shards": 0, "streamed_bytes": 0},
            "n2": {"capacity": 80_000, "ranks": 1, "ranks_from": "default", "fair_bytes": 4096, "capped": False,
                   "shards": 3, "bytes": 4096, "free_after": 95904, "rank_bytes": [4096], "rank_samples": None,
                   "fetch_shards": 3, "fetch_bytes": 4096, "remove_shards": 0, "remove_bytes": 0,
                   "streamed_shards": 0, "streamed_bytes": 0},
        },
        # A replicated plan has no balance to speak of: every node holds everything.
        "balance": None,
        "rank_split_by": "bytes",
        "changes": {"fetch_copies": 6, "fetch_bytes": 8192, "remove_copies": 0, "remove_bytes": 0,
                    "moved_shards": 3, "dropped_nodes": []},
        # Each shard once from the source (by its first node), its second copy from that node.
        "transfer": {"peer_assist": True, "source_bytes": 4096, "peer_bytes": 4096},
        "summary": "dataset tiny: replicate (on every node), 3 shards, 4.0 KiB (8.0 KiB stored) on 2 nodes, "
                   "fullest n1 at 44.4% of usable space; fetch 6 copies (8.0 KiB: 4.0 KiB from the source, 4.0 KiB between peers), "
                   "remove 0 copies (0 B); replicate because 4.0 KiB fits on every node (smallest has 9.0 KiB usable)",
    }
    assert node_shards(plan, "n2") == ["a.tar", "b.tar", "c.tar"]
    assert node_shards(plan, "elsewhere") == []
    assert shard_nodes(plan, "b.tar") == ["n1", "n2"]
    assert shard_nodes(plan, "zzz.tar") == []


@pytest.mark.parametrize(
    "settings, shard_count, nodes",
    [
        ({"mode": "replicate"}, 300, eight_nodes()),
        ({"mode": "partition", "replicas": 1}, 2_000, eight_nodes(gpu8={"free_bytes": 0})),
        ({"mode": "partition", "replicas": 2}, 2_000, eight_nodes(gpu8={"free_bytes": 0})),
        ({"mode": "partition", "replicas": 2}, 3, eight_nodes()),
        ({"mode": "stream", "stream_cache_fraction": 0.5}, 2_000, eight_nodes(free=30_000, gpu8={"free_bytes": 0})),
        ({"mode": "stream", "stream_cache_fraction": 1.0}, 3, eight_nodes()),
    ],
    ids=["replicate", "partition-1", "partition-2", "partition-few-shards", "stream", "stream-few-shards"],
)
def test_host_shards_and_host_streamed_equal_the_per_node_lists(settings, shard_count, nodes):
    rng = random.Random(shard_count)
    sizes = {name: rng.randint(100, 900) for name in shard_names(shard_count)}
    plan = make_plan(dict(settings, name="ds", headroom=0.0), records(sizes), nodes)
    assert plan["mode"] == settings["mode"]
    # As make_plan returns it, as read back from its file, and with the assignment out of name order.
    shuffled = dict(plan, assignment=plan["assignment"] and dict(reversed(list(plan["assignment"].items()))))
    for current in (plan, json.loads(json.dumps(plan, sort_keys=True)), shuffled):
        held, streamed = host_shards(current), host_streamed(current)
        assert list(held) == list(streamed) == list(current["nodes"])
        assert held == {host: node_shards(current, host) for host in current["nodes"]}
        assert streamed == {host: node_streamed(current, host) for host in current["nodes"]}
    placed = {host for hosts in (plan["assignment"] or {}).values() for host in hosts}
    if settings["mode"] == "replicate":
        assert len({id(names) for names in host_shards(plan).values()}) == 1  # one list object, shared by every node
    elif shard_count == 3:
        assert len(placed) < len(nodes) and [] in host_shards(plan).values()  # nodes that get nothing have an empty list
    else:  # gpu8 has no room: it keeps nothing (and in stream mode streams its share)
        assert host_shards(plan)["gpu8"] == []
        assert ("gpu8" in placed) == (settings["mode"] == "stream") == bool(host_streamed(plan)["gpu8"])
    if settings["mode"] == "stream":
        assert sum(map(len, host_shards(plan).values())) == len(plan["cached"])
        assert sum(map(len, host_streamed(plan).values())) == shard_count - len(plan["cached"])


def test_partitioned_plan_accounts_for_every_copy():
    rng = random.Random(1)
    sizes = {name: rng.randint(1_000, 9_000) for name in shard_names(2_000)}
    total = sum(sizes.values())
    nodes = eight_nodes(free=total // 3)
    plan = make_plan({"name": "ds", "mode": "auto", "replicas": 2, "headroom": 0.0}, records(sizes), nodes)
    assert plan["mode"] == "partition"
    assert plan["replicas"] == 2
    assert plan["replicated_on"] is None
    assert plan["total_bytes"] == total
    assert plan["stored_bytes"] == 2 * total
    assert sorted(plan["assignment"]) == sorted(sizes)
    assert sum(info["bytes"] for info in plan["nodes"].values()) == 2 * total
    assert sum(info["shards"] for info in plan["nodes"].values()) == 4_000
    for host, info in plan["nodes"].items():
        assert info["bytes"] <= info["capacity"] == total // 3
        assert info["free_after"] == total // 3 - info["bytes"]
        assert info["bytes"] == sum(sizes[name] for name in node_shards(plan, host))
    assert plan["changes"]["fetch_copies"] == 4_000
    assert plan["summary"].startswith("dataset ds: partition (2 copies per shard), 2000 shards, ")


def test_replanning_the_same_inputs_changes_nothing():
    sizes = equal_sizes(3_000, size=100)
    plan = make_plan({"name": "ds", "mode": "partition", "replicas": 2}, records(sizes), eight_nodes())
    again = make_plan({"name": "ds", "mode": "partition", "replicas": 2}, records(sizes), eight_nodes(), previous=json.loads(json.dumps(plan)))
    assert again["assignment"] == plan["assignment"]
    assert again["changes"] == {"fetch_copies": 0, "fetch_bytes": 0, "remove_copies": 0, "remove_bytes": 0, "moved_shards": 0, "dropped_nodes": []}
    assert "fetch 0 copies (0 B), remove 0 copies (0 B); partition because mode partition requested; balance 1.000" in again["summary"]


def test_a_new_node_fetches_what_the_others_remove():
    sizes = equal_sizes(9_000, size=100)
    settings = {"name": "ds", "mode": "partition", "replicas": 2}
    before = make_plan(settings, records(sizes), eight_nodes())
    after = make_plan(settings, records(sizes), eight_nodes(gpu8={"free_bytes": 10 ** 6}), previous=before)
    new_node = after["nodes"]["gpu8"]
    assert new_node["fetch_shards"] == new_node["shards"] > 0
    assert new_node["remove_shards"] == 0
    assert all(after["nodes"][host]["fetch_shards"] == 0 for host in eight_nodes())
    changes = after["changes"]
    assert changes["fetch_copies"] == changes["remove_copies"] == changes["moved_shards"] == new_node["shards"]
    assert changes["fetch_bytes"] == changes["remove_bytes"] == 100 * new_node["shards"]
    assert abs(new_node["shards"] / (18_000 / 9) - 1) < 0.08
    gpu0 = node_changes(after, before, "gpu0")
    assert gpu0["fetch"] == []
    assert len(gpu0["remove"]) == after["nodes"]["gpu0"]["remove_shards"]
    assert set(gpu0["remove"]) <= set(node_shards(after, "gpu8"))
    every_node = changes_by_node(after, before)
    assert sorted(every_node) == sorted(after["nodes"])
    assert all(every_node[host] == node_changes(after, before, host) for host in every_node)
    assert sum(len(change["fetch"]) for change in every_node.values()) == changes["fetch_copies"]


def test_dropped_shards_and_nodes_are_removed_with_their_old_sizes():
    settings = {"name": "ds", "mode": "replicate"}
    before = make_plan(settings, records({"a.tar": 10, "b.tar": 20, "c.tar": 40}), {"n1": {"free_bytes": 1000}, "n2": {"free_bytes": 1000}})
    after = make_plan(settings, records({"a.tar": 10, "d.tar": 5}), {"n1": {"free_bytes": 1000}}, previous=before)
    assert after["nodes"]["n1"]["fetch_shards"] == 1
    assert after["nodes"]["n1"]["remove_bytes"] == 60
    assert after["changes"] == {"fetch_copies": 1, "fetch_bytes": 5, "remove_copies": 5, "remove_bytes": 130,
                                "moved_shards": 1, "dropped_nodes": ["n2"]}
    assert node_changes(after, before, "n2") == {"fetch": [], "remove": ["a.tar", "b.tar", "c.tar"]}
    assert node_changes(after, None, "n1") == {"fetch": ["a.tar", "d.tar"], "remove": []}
    assert changes_by_node(after, before) == {
        "n1": {"fetch": ["d.tar"], "remove": ["b.tar", "c.tar"]},
        "n2": {"fetch": [], "remove": ["a.tar", "b.tar", "c.tar"]},
    }


def test_switching_from_replicate_to_partition_removes_the_extra_copies():
    sizes = equal_sizes(1_000, size=100)
    replicated = make_plan({"name": "ds", "headroom": 0.0}, records(sizes), eight_nodes(free=100_000))
    assert replicated["mode"] == "replicate"
    partitioned = make_plan({"name": "ds", "headroom": 0.0}, records(sizes), eight_nodes(free=99_999), previous=replicated)
    assert partitioned["mode"] == "partition"
    assert partitioned["changes"]["fetch_copies"] == 0
    assert partitioned["changes"]["remove_copies"] == 7_000
    assert partitioned["changes"]["remove_bytes"] == 700_000


@pytest.mark.parametrize(
    "dataset, message",
    [
        ("yt8m", "dataset settings must be a mapping"),
        ({}, "dataset 'name' must be a non-empty string, got None"),
        ({"name": "ds", "mode": "copy"}, "dataset 'ds': mode is 'copy'; choose one of auto, replicate, partition, stream"),
        ({"name": "ds", "allow_stream": "yes"}, "dataset 'ds': allow_stream is 'yes'; it must be true or false"),
        ({"name": "ds", "stream_cache_fraction": 1.5}, "dataset 'ds': stream_cache_fraction is 1.5; it must be a fraction"),
        ({"name": "ds", "replicas": 0}, "dataset 'ds': replicas is 0"),
        ({"name": "ds", "replicas": "2"}, "dataset 'ds': replicas is '2'"),
        ({"name": "ds", "replicas": True}, "dataset 'ds': replicas is True"),
        ({"name": "ds", "headroom": 1.0}, "dataset 'ds': headroom is 1.0"),
        ({"name": "ds", "headroom": -0.01}, "dataset 'ds': headroom is -0.01"),
        ({"name": "ds", "replicas": 9}, "dataset 'ds': replicas is 9 but only 8 node(s) are targeted"),
    ],
)
def test_make_plan_rejects_bad_settings(dataset, message):
    with pytest.raises(ShardPlanError, match=re.escape(message)):
        make_plan(dataset, records(equal_sizes(4)), eight_nodes())


@pytest.mark.parametrize(
    "shards, nodes, message",
    [
        ([{"name": "a.tar", "url": "http://s/a.tar", "size": None, "sha256": None}], None,
         "dataset 'ds': shard 'a.tar' has no known size: give an index with sizes (wids 'filesize')"),
        ([{"name": "a.tar", "size": -1}], None, "dataset 'ds' shard 'a.tar' size is -1"),
        ([{"name": "a.tar", "size": 1}, {"name": "a.tar", "size": 1}], None, "dataset 'ds': shard 'a.tar' is listed twice"),
        (["a.tar"], None, "dataset 'ds': shard entry 'a.tar' must be a mapping"),
        ([], None, "dataset 'ds' has no shards"),
        ([{"name": "a.tar", "size": 1}], {}, "dataset 'ds': no target nodes given"),
        ([{"name": "a.tar", "size": 1}], {"gpu7": {"free": 10}}, "node 'gpu7' free_bytes is None"),
        ([{"name": "a.tar", "size": 10 ** 7}], None, "are missing. Stream it from distributed storage"),
    ],
)
def test_make_plan_rejects_bad_shards_and_nodes(shards, nodes, message):
    with pytest.raises(ShardPlanError, match=re.escape(message)):
        make_plan({"name": "ds"}, shards, eight_nodes() if nodes is None else nodes)


@pytest.mark.parametrize(
    "previous, message",
    [
        ({"mode": "partition"}, "previous plan for dataset 'ds' is not a shard_staging plan (missing plan_version, dataset, shards"),
        ("plan", "is not a shard_staging plan"),
        ("other-dataset", "previous plan is for dataset 'other', not 'ds'"),
        ("version-0", "previous plan for dataset 'ds' has plan_version 0"),
    ],
)
def test_make_plan_rejects_an_unusable_previous_plan(previous, message):
    shards = records(equal_sizes(4))
    if previous == "other-dataset":
        previous = make_plan({"name": "other"}, shards, eight_nodes())
    elif previous == "version-0":
        previous = dict(make_plan({"name": "ds"}, shards, eight_nodes()), plan_version=0)
    with pytest.raises(ShardPlanError, match=re.escape(message)):
        make_plan({"name": "ds"}, shards, eight_nodes(), previous=previous)


@pytest.mark.parametrize(
    "count, text",
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 * 2 ** 40, "5.0 TiB"), (90 * 2 ** 50, "90.0 PiB")],
)
def test_byte_counts_read_naturally(count, text):
    assert human(count) == text


def test_summarize_reports_the_fullest_node():
    plan = make_plan({"name": "ds", "mode": "partition", "headroom": 0.0}, records({"a.tar": 3 * 2 ** 30, "b.tar": 2 ** 30}),
                     {"x": {"free_bytes": 4 * 2 ** 30}, "y": {"free_bytes": 2 * 2 ** 30}})
    fullest = max(plan["nodes"], key=lambda host: plan["nodes"][host]["bytes"] / plan["nodes"][host]["capacity"])
    share = plan["nodes"][fullest]["bytes"] / plan["nodes"][fullest]["capacity"]
    assert summarize(plan) == plan["summary"] == (
        f"dataset ds: partition (1 copy per shard), 2 shards, 4.0 GiB (4.0 GiB stored) on 2 nodes, fullest {fullest} at {share:.1%} "
        "of usable space; fetch 2 copies (4.0 GiB), remove 0 copies (0 B); partition because mode partition requested; "
        f"balance {plan['balance']:.3f} (max / average bytes per rank; 2 ranks from default; ranks split by bytes)"
    )
    # Two shards of 3 and 1 GiB on two equal nodes: one holds 3 of the 4 GiB, which is one shard above its share.
    assert plan["balance"] == 1.5


def test_summarize_names_the_capped_nodes_and_where_the_ranks_came_from():
    nodes = {"small": {"free_bytes": 100, "ranks": 8, "ranks_from": "nvidia_gpu_facts"},
             "big": {"free_bytes": 10 ** 6, "ranks": 8, "ranks_from": "nvidia_gpu_facts"}}
    plan = make_plan({"name": "ds", "mode": "partition", "headroom": 0.0}, records(equal_sizes(40, size=10)), nodes)
    assert plan["nodes"]["small"]["capped"] and plan["nodes"]["small"]["bytes"] == 100
    assert plan["nodes"]["big"]["bytes"] == 300 and not plan["nodes"]["big"]["capped"]
    assert "16 ranks from nvidia_gpu_facts" in plan["summary"]
    assert "capped: small at 100 B (fair 100 B by ranks, capped by its space)" in plan["summary"]


def test_peer_assist_fetches_each_shard_once_from_the_source():
    shards = records({"s-%03d.tar" % i: 1000 + i for i in range(200)})
    total = sum(1000 + i for i in range(200))
    plan = make_plan({"name": "ds", "mode": "replicate"}, shards, eight_nodes())
    assert plan["transfer"] == {"peer_assist": True, "source_bytes": total, "peer_bytes": 7 * total}
    roles = peer_roles(plan)
    seeder = seeders(plan)
    seeded = collections.Counter(seeder.values())
    assert len(seeded) == 8 and min(seeded.values()) >= 10  # every node seeds a share
    for host, role in roles.items():
        assert set(role["sources"]) == {shard for shard, first in seeder.items() if first != host}
        assert set(role["sources"].values()) <= set(roles) - {host}
        assert role["downstream"] == sorted(set(roles) - {host})
    # Adding a node: it takes everything from peers that already hold it, nothing new leaves the source.
    nine = make_plan({"name": "ds", "mode": "replicate"}, shards, eight_nodes(gpu8={"free_bytes": 10 ** 6}), previous=plan)
    assert nine["changes"]["fetch_bytes"] == total
    assert nine["transfer"]["source_bytes"] + nine["transfer"]["peer_bytes"] == total
    assert nine["transfer"]["peer_bytes"] >= total * 0.8


@pytest.mark.parametrize("settings", [{"mode": "partition", "replicas": 1}, {"mode": "replicate", "peer_assist": False}])
def test_without_a_second_copy_or_with_peer_assist_off_everything_comes_from_the_source(settings):
    shards = records({"s-%03d.tar" % i: 1000 for i in range(50)})
    plan = make_plan(dict(settings, name="ds"), shards, eight_nodes())
    assert plan["transfer"] == {"peer_assist": False, "source_bytes": plan["changes"]["fetch_bytes"], "peer_bytes": 0}
    assert peer_roles(plan) == {}
    assert "between peers" not in plan["summary"]


def test_peer_assist_must_be_a_boolean():
    with pytest.raises(ShardPlanError, match="peer_assist is 'yes'; it must be true or false"):
        make_plan({"name": "ds", "peer_assist": "yes"}, records({"a.tar": 1}), eight_nodes())
