# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's file store: lists stored by content, and lists no run names pruned."""
import json
import os
import pathlib
import time

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.cluster_plans import plan_dataset
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.list_store import LIST_KEEP_SECONDS, prune_lists, write_list


def test_node_lists_are_stored_by_content(tmp_path):
    first = write_list(str(tmp_path), [{"name": "a.tar", "url": "u", "size": 1, "sha256": None}])
    again = write_list(str(tmp_path), [{"name": "a.tar", "url": "u", "size": 1, "sha256": None}])
    other = write_list(str(tmp_path), [])
    assert first == again != other
    assert json.loads(pathlib.Path(first).read_text()) == [{"name": "a.tar", "sha256": None, "size": 1, "url": "u"}]


def signed_shards(signature):
    return [{"name": "s-%d.tar" % i, "url": "https://store/s-%d.tar?X-Amz-Expires=600&X-Amz-Signature=%s" % (i, signature),
             "size": 100, "sha256": "%064x" % i} for i in range(4)]


def plan_signed(tmp_path, signature):
    """Plan four signed shards over two nodes in tmp_path."""
    nodes = {"n%d" % i: {"free_bytes": 10 ** 6, "held_bytes": 0, "total_bytes": 10 ** 6} for i in range(2)}
    settings = {"name": "ds", "mode": "partition", "replicas": 1, "headroom": 0.0, "peer_assist": False}
    return plan_dataset(settings, signed_shards(signature), nodes, str(tmp_path), {}, check_mode=False)


def test_lists_no_run_names_for_an_hour_are_pruned_and_a_list_named_again_is_kept(tmp_path):
    old = set(plan_signed(tmp_path, "old")["lists"].values())
    stale = time.time() - LIST_KEEP_SECONDS - 10
    for path in old:
        os.utime(path, (stale, stale))
    kept = plan_signed(tmp_path, "kept")["lists"].values()
    for path in kept:
        os.utime(path, (stale, stale))
    new = set(plan_signed(tmp_path, "new")["lists"].values())
    again = set(plan_signed(tmp_path, "kept")["lists"].values())
    assert again == set(kept) and not old & again and not new & again

    assert prune_lists(str(tmp_path), new) == len(old)  # an hour old and not named; "kept" was named again just now
    left = {str(path) for path in (tmp_path / "lists").iterdir()}
    assert left == new | again
    assert prune_lists(str(tmp_path), new, now=time.time() + LIST_KEEP_SECONDS + 1) == len(again)
    assert {str(path) for path in (tmp_path / "lists").iterdir()} == new
