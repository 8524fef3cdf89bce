# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import json
import os

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.handoff import write_handoff

from engine_helpers import fingerprint, outside_target, plant_link

SHARDS = [{"name": "c-%d.tar" % i, "url": "http://store/ds/c-%d.tar" % i} for i in range(5)]


def read(path):
    return path.read_text().splitlines()


def test_lists_for_training(tmp_path):
    changed = write_handoff(str(tmp_path), SHARDS, ranks=2)
    assert changed == ["ranks.json", "ranks/rank-0000.txt", "ranks/rank-0001.txt", "shards.txt", "sources.txt"]
    local = [str(tmp_path / shard["name"]) for shard in SHARDS]
    assert read(tmp_path / "shards.txt") == local
    assert read(tmp_path / "sources.txt") == [shard["url"] for shard in SHARDS]
    assert read(tmp_path / "ranks" / "rank-0000.txt") == local[0::2]
    assert read(tmp_path / "ranks" / "rank-0001.txt") == local[1::2]
    # Without the planner's ranks the split is round-robin, and the counts say so (no sizes given: bytes unknown).
    assert json.loads((tmp_path / "ranks.json").read_text()) == {"split": "round-robin", "ranks": [
        {"rank": 0, "shards": 3, "bytes": None, "samples": None}, {"rank": 1, "shards": 2, "bytes": None, "samples": None}]}


def test_the_planners_ranks_decide_the_lists_and_the_counts_say_each_ranks_samples(tmp_path):
    shards = [dict(shard, size=100 * (i + 1), samples=10 * (i + 1), rank=rank)
              for i, (shard, rank) in enumerate(zip(SHARDS, [1, 0, 1, 0, 1]))]
    write_handoff(str(tmp_path), shards, ranks=2)
    local = [str(tmp_path / shard["name"]) for shard in SHARDS]
    assert read(tmp_path / "ranks" / "rank-0000.txt") == [local[1], local[3]]
    assert read(tmp_path / "ranks" / "rank-0001.txt") == [local[0], local[2], local[4]]
    assert json.loads((tmp_path / "ranks.json").read_text()) == {"split": "planned", "ranks": [
        {"rank": 0, "shards": 2, "bytes": 600, "samples": 60}, {"rank": 1, "shards": 3, "bytes": 900, "samples": 90}]}


def test_a_rank_beyond_the_nodes_ranks_falls_back_to_round_robin(tmp_path):
    shards = [dict(shard, rank=5) for shard in SHARDS]
    write_handoff(str(tmp_path), shards, ranks=2)
    assert json.loads((tmp_path / "ranks.json").read_text())["split"] == "round-robin"


def test_rewrites_only_what_changed_and_drops_extra_ranks(tmp_path):
    write_handoff(str(tmp_path), SHARDS, ranks=3)
    assert write_handoff(str(tmp_path), SHARDS, ranks=3) == []
    assert write_handoff(str(tmp_path), SHARDS, ranks=2) == ["ranks.json", "ranks/rank-0000.txt", "ranks/rank-0001.txt",
                                                             "ranks/rank-0002.txt"]
    assert sorted(p.name for p in (tmp_path / "ranks").iterdir()) == ["rank-0000.txt", "rank-0001.txt"]


def test_check_mode_writes_nothing(tmp_path):
    changed = write_handoff(str(tmp_path), SHARDS, ranks=1, check_mode=True)
    assert changed == ["ranks.json", "ranks/rank-0000.txt", "shards.txt", "sources.txt"]
    assert list(tmp_path.iterdir()) == []


def test_more_ranks_than_shards_gives_empty_lists(tmp_path):
    write_handoff(str(tmp_path), SHARDS[:1], ranks=3)
    assert read(tmp_path / "ranks" / "rank-0002.txt") == []


@pytest.mark.parametrize("ranks", [0, -1])
def test_needs_a_rank(tmp_path, ranks):
    with pytest.raises(StagingError, match="1 or more training ranks"):
        write_handoff(str(tmp_path), SHARDS, ranks=ranks)


# ---------------------------------------------------------------------------------------------
# Links planted at the lists' names: refused, naming the link, before any list is written
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
@pytest.mark.parametrize("relative", ["shards.txt", "sources.txt", "ranks/rank-0001.txt"])
def test_a_link_at_a_list_name_is_refused_and_its_target_is_untouched(tmp_path, relative, check_mode):
    dest = tmp_path / "dest"
    (dest / "ranks").mkdir(parents=True)
    target = outside_target(tmp_path)
    before = fingerprint(target)
    link = plant_link(dest / relative, target)

    with pytest.raises(StagingError) as raised:
        write_handoff(str(dest), SHARDS, ranks=2, check_mode=check_mode)

    assert str(raised.value).startswith("the hand-off list %s is a symbolic link" % link)
    assert fingerprint(target) == before
    assert os.path.islink(str(link))
    # Refused before any list was written.
    planted_in_ranks = relative.startswith("ranks/")
    assert sorted(os.listdir(str(dest))) == (["ranks"] if planted_in_ranks else sorted(["ranks", relative]))
    assert os.listdir(str(dest / "ranks")) == (["rank-0001.txt"] if planted_in_ranks else [])


def test_a_link_at_a_list_whose_target_already_holds_the_list_is_refused(tmp_path):
    dest = tmp_path / "dest"
    write_handoff(str(dest), SHARDS, ranks=1)
    target = outside_target(tmp_path)
    target.write_bytes((dest / "shards.txt").read_bytes())
    (dest / "shards.txt").unlink()
    link = plant_link(dest / "shards.txt", target)

    with pytest.raises(StagingError, match="the hand-off list %s is a symbolic link" % link):
        write_handoff(str(dest), SHARDS, ranks=1)


def test_a_dangling_link_at_a_list_name_creates_nothing_outside_dest(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    link = plant_link(dest / "sources.txt", tmp_path / "new-outside")

    with pytest.raises(StagingError, match="the hand-off list %s is a symbolic link" % link):
        write_handoff(str(dest), SHARDS, ranks=1)

    assert not os.path.lexists(str(tmp_path / "new-outside"))


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
def test_a_ranks_directory_that_is_a_link_is_refused_and_what_it_points_to_is_untouched(tmp_path, check_mode):
    dest = tmp_path / "dest"
    dest.mkdir()
    outside = tmp_path / "outside-ranks"
    outside.mkdir()
    files = {}
    for name in ("rank-0000.txt", "rank-0007.txt"):  # one the lists would rewrite, one a prune of stale ranks would remove
        (outside / name).write_bytes(os.urandom(100))
        os.utime(str(outside / name), ns=(10 ** 18, 10 ** 18))
        files[name] = fingerprint(outside / name)
    link = plant_link(dest / "ranks", outside)

    with pytest.raises(StagingError) as raised:
        write_handoff(str(dest), SHARDS, ranks=2, check_mode=check_mode)

    assert str(raised.value).startswith("the hand-off directory %s is a symbolic link" % link)
    assert dict((name, fingerprint(outside / name)) for name in sorted(os.listdir(str(outside)))) == files
    assert sorted(os.listdir(str(dest))) == ["ranks"]


def test_a_ranks_that_is_not_a_directory_is_refused(tmp_path):
    (tmp_path / "ranks").write_text("not a directory")
    with pytest.raises(StagingError, match="ranks is not a directory; move it away"):
        write_handoff(str(tmp_path), SHARDS, ranks=1)


WORLD = {"dataset": "ds", "node": "gpu-b", "node_rank": 1, "nodes": 2, "world_size": 4, "rendezvous": "gpu-a",
         "ranks": [{"local_rank": 0, "global_rank": 2, "list": "ranks/rank-0000.txt"},
                   {"local_rank": 1, "global_rank": 3, "list": "ranks/rank-0001.txt"}],
         "epoch": {"unit": "samples", "per_rank": 40, "unread": 6}, "plan_digest": "sha256:" + "ab" * 32}


def test_the_world_of_the_plan_is_written_beside_the_lists_and_only_when_it_changes(tmp_path):
    assert "world.json" in write_handoff(str(tmp_path), SHARDS, ranks=2, world=WORLD)
    assert json.loads((tmp_path / "world.json").read_text()) == WORLD
    assert write_handoff(str(tmp_path), SHARDS, ranks=2, world=WORLD) == []
    moved = dict(WORLD, plan_digest="sha256:" + "cd" * 32)
    assert write_handoff(str(tmp_path), SHARDS, ranks=2, world=moved, check_mode=True) == ["world.json"]
    assert json.loads((tmp_path / "world.json").read_text()) == WORLD


def test_a_world_that_gives_the_node_other_ranks_than_the_lists_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(StagingError, match="gives this node 2 ranks, the hand-off 3"):
        write_handoff(str(tmp_path), SHARDS, ranks=3, world=WORLD)
    assert list(tmp_path.iterdir()) == []
