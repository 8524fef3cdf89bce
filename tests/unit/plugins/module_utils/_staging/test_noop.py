# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A re-run given the same shard-list file as the last complete run: confirmed from the journal and the directory scan
without parsing the list, and back to the full plan the moment anything differs."""

import json
import os

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import input as engine_input
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.input import ShardListFile
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import JOURNAL_NAME
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage

from engine_helpers import FAST, KIB, assert_staged


@pytest.fixture
def staged(tmp_path, make_shards, shard_server):
    """A dest staged completely from a shard-list file: (list file path, dest, shards, contents)."""
    shards, contents = make_shards({"a.tar": KIB, "b.tar": 2 * KIB, "c.tar": 3 * KIB})
    list_file = tmp_path / "shards.json"
    list_file.write_text(json.dumps({"shards": shards}))
    dest = str(tmp_path / "dest")
    first = stage(ShardListFile(str(list_file)), dest, **FAST)
    assert (first["fetched"], first["failed_shards"]) == (3, [])
    return list_file, dest, shards, contents


@pytest.fixture
def list_reads(monkeypatch):
    """How many times a run parsed a shard-list file."""
    reads = []
    real_load = ShardListFile.load

    def load(self):
        reads.append(self.path)
        return real_load(self)

    monkeypatch.setattr(ShardListFile, "load", load)
    return reads


def journal_of(dest):
    with open(os.path.join(dest, JOURNAL_NAME)) as handle:
        return json.load(handle)


def test_the_complete_run_records_its_list(staged):
    list_file, dest, shards, contents = staged
    assert journal_of(dest)["complete_for"] == ShardListFile(str(list_file)).digest


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_same_list_again_is_confirmed_without_parsing_it(staged, list_reads, check_mode):
    list_file, dest, shards, contents = staged
    before = os.stat(os.path.join(dest, JOURNAL_NAME)).st_mtime_ns

    result = stage(ShardListFile(str(list_file)), dest, check_mode=check_mode, prune=True, **FAST)

    assert list_reads == []
    assert (result["confirmed"], result["total"], result["fetched"], result["changed"]) == (3, 3, 0, False)
    assert os.stat(os.path.join(dest, JOURNAL_NAME)).st_mtime_ns == before
    assert_staged(dest, contents)


@pytest.mark.parametrize("change", ["deleted", "resized", "touched", "partial left", "stray state file"])
def test_any_difference_in_dest_falls_back_to_the_full_plan(staged, list_reads, change):
    list_file, dest, shards, contents = staged
    path = os.path.join(dest, "b.tar")
    if change == "deleted":
        os.unlink(path)
    elif change == "resized":
        with open(path, "ab") as handle:
            handle.write(b"x")
    elif change == "touched":
        os.utime(path, ns=(1, 1))
    elif change == "partial left":
        open(os.path.join(dest, ".z.tar.part"), "wb").close()
    else:
        open(os.path.join(dest, ".z.tar.part.state"), "wb").close()

    result = stage(ShardListFile(str(list_file)), dest, prune=True, **FAST)

    assert list_reads == [str(list_file)]
    fixed = 0 if change in ("partial left", "stray state file") else 1
    assert (result["fetched"] + result["verified"], result["confirmed"], result["failed_shards"]) == (fixed, 3 - fixed + result["verified"], [])
    assert_staged(dest, contents)
    assert sorted(os.listdir(dest)) == [JOURNAL_NAME, ".shard_fetch.last_run", ".shard_fetch.lock", "a.tar", "b.tar", "c.tar"]
    assert journal_of(dest)["complete_for"] == ShardListFile(str(list_file)).digest


def test_another_list_is_parsed_and_the_record_follows_it(staged, list_reads, make_shards):
    list_file, dest, shards, contents = staged
    other = list_file.with_name("other.json")
    other.write_text(json.dumps({"shards": shards[:2]}))

    kept = stage(ShardListFile(str(other)), dest, **FAST)
    assert list_reads == [str(other)] and kept["confirmed"] == 2
    # c.tar is still journaled but not listed (no prune): the journal is not exactly this list.
    assert "complete_for" not in journal_of(dest)

    pruned = stage(ShardListFile(str(other)), dest, prune=True, **FAST)
    assert pruned["removed"] == 1 and journal_of(dest)["complete_for"] == ShardListFile(str(other)).digest
    assert stage(ShardListFile(str(other)), dest, **FAST)["confirmed"] == 2 and len(list_reads) == 2


def test_a_run_with_a_failed_shard_clears_the_record(staged, list_reads, shard_server):
    list_file, dest, shards, contents = staged
    broken = [dict(shards[0], name="gone.tar", url=shard_server.url("gone.tar"))] + shards
    other = list_file.with_name("broken.json")
    other.write_text(json.dumps(broken))

    assert stage(ShardListFile(str(other)), dest, retries=0, **FAST)["failed_shards"]
    assert "complete_for" not in journal_of(dest)
    assert stage(ShardListFile(str(list_file)), dest, **FAST)["confirmed"] == 3
    assert list_reads == [str(other), str(list_file)]


def test_an_inline_list_leaves_the_record_unless_it_changes_the_journal(staged, list_reads, make_shards):
    list_file, dest, shards, contents = staged
    digest = ShardListFile(str(list_file)).digest
    assert stage(shards, dest, **FAST)["confirmed"] == 3
    assert journal_of(dest)["complete_for"] == digest

    more = make_shards({"d.tar": KIB})[0]
    assert stage(shards + more, dest, **FAST)["fetched"] == 1
    assert "complete_for" not in journal_of(dest)


def test_an_unreadable_list_file_is_a_staging_error(tmp_path):
    with pytest.raises(engine_input.StagingError, match="cannot read shards_file"):
        ShardListFile(str(tmp_path / "absent.json"))
