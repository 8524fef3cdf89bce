# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_handoff import write_handoff

SHARDS = [{"name": "c-%d.tar" % i, "url": "http://store/ds/c-%d.tar" % i} for i in range(5)]


def read(path):
    return path.read_text().splitlines()


def test_lists_for_training(tmp_path):
    changed = write_handoff(str(tmp_path), SHARDS, ranks=2)
    assert changed == ["ranks/rank-0000.txt", "ranks/rank-0001.txt", "shards.txt", "sources.txt"]
    local = [str(tmp_path / shard["name"]) for shard in SHARDS]
    assert read(tmp_path / "shards.txt") == local
    assert read(tmp_path / "sources.txt") == [shard["url"] for shard in SHARDS]
    assert read(tmp_path / "ranks" / "rank-0000.txt") == local[0::2]
    assert read(tmp_path / "ranks" / "rank-0001.txt") == local[1::2]


def test_rewrites_only_what_changed_and_drops_extra_ranks(tmp_path):
    write_handoff(str(tmp_path), SHARDS, ranks=3)
    assert write_handoff(str(tmp_path), SHARDS, ranks=3) == []
    assert write_handoff(str(tmp_path), SHARDS, ranks=2) == ["ranks/rank-0000.txt", "ranks/rank-0001.txt", "ranks/rank-0002.txt"]
    assert sorted(p.name for p in (tmp_path / "ranks").iterdir()) == ["rank-0000.txt", "rank-0001.txt"]


def test_check_mode_writes_nothing(tmp_path):
    assert write_handoff(str(tmp_path), SHARDS, ranks=1, check_mode=True) == ["ranks/rank-0000.txt", "shards.txt", "sources.txt"]
    assert list(tmp_path.iterdir()) == []


def test_more_ranks_than_shards_gives_empty_lists(tmp_path):
    write_handoff(str(tmp_path), SHARDS[:1], ranks=3)
    assert read(tmp_path / "ranks" / "rank-0002.txt") == []


@pytest.mark.parametrize("ranks", [0, -1])
def test_needs_a_rank(tmp_path, ranks):
    with pytest.raises(StagingError, match="1 or more training ranks"):
        write_handoff(str(tmp_path), SHARDS, ranks=ranks)
