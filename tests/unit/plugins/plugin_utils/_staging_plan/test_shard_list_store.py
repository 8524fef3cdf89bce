# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's file store: lists stored by content, and lists no run names pruned."""
import json
import os
import pathlib
import time

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.list_store import LIST_KEEP_SECONDS, prune_lists, write_list


def test_node_lists_are_stored_by_content(tmp_path):
    first = write_list(str(tmp_path), [{"name": "a.tar", "url": "u", "size": 1, "sha256": None}])
    again = write_list(str(tmp_path), [{"name": "a.tar", "url": "u", "size": 1, "sha256": None}])
    other = write_list(str(tmp_path), [])
    assert first == again != other
    assert json.loads(pathlib.Path(first).read_text()) == [{"name": "a.tar", "sha256": None, "size": 1, "url": "u"}]


def test_lists_no_run_names_for_an_hour_are_pruned_and_a_list_named_again_is_kept(tmp_path, plan_signed):
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
