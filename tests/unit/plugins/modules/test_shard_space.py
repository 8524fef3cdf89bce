# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage
from ansible_collections.dlinfra.gpu_cluster.plugins.modules import shard_space


def run_module(capsys, dest):
    with patch_module_args({"dest": str(dest)}):
        with pytest.raises(SystemExit) as exit_info:
            shard_space.main()
    result = json.loads(capsys.readouterr().out)
    assert exit_info.value.code == 0, result
    return result


def test_a_missing_dest_is_measured_on_its_nearest_parent(tmp_path, capsys):
    result = run_module(capsys, tmp_path / "not" / "yet")
    stats = os.statvfs(tmp_path)
    assert result["exists"] is False and result["changed"] is False
    assert result["measured_path"] == str(tmp_path)
    assert result["total_bytes"] == stats.f_blocks * stats.f_frsize
    assert 0 < result["free_bytes"] <= result["total_bytes"]
    assert (result["held_bytes"], result["held_shards"], result["ours_bytes"]) == (0, 0, 0)


def test_held_bytes_come_from_the_staging_journal(tmp_path, capsys):
    source = tmp_path / "nfs"
    source.mkdir()
    shards = []
    for index, size in enumerate((1000, 2500)):
        (source / ("s%d.tar" % index)).write_bytes(b"x" * size)
        shards.append({"name": "s%d.tar" % index, "url": "file://%s/s%d.tar" % (source, index), "size": size})
    dest = tmp_path / "dest"
    stage(shards, str(dest))
    (dest / "not-staged.tar").write_bytes(b"y" * 777)  # a file the journal does not know is not the dataset's
    result = run_module(capsys, dest)
    assert result["exists"] is True and result["measured_path"] == str(dest)
    assert (result["held_bytes"], result["held_shards"]) == (3500, 2)


def _allocated(path):
    return os.lstat(str(path)).st_blocks * 512


def test_ours_bytes_count_everything_in_dest_journaled_or_not(tmp_path, capsys):
    source = tmp_path / "nfs"
    source.mkdir()
    (source / "s0.tar").write_bytes(os.urandom(70000))
    dest = tmp_path / "dest"
    stage([{"name": "s0.tar", "url": "file://%s/s0.tar" % source, "size": 70000}], str(dest))
    # What a kill -9 leaves: a whole shard renamed into place before the journal listed it, a partial file and its state.
    (dest / "s1.tar").write_bytes(os.urandom(50000))
    (dest / ".s2.tar.part").write_bytes(os.urandom(30000))
    (dest / ".s2.tar.part.state").write_text("{}")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(os.urandom(200000))
    os.symlink(str(outside), str(dest / "link.tar"))  # a link's target is not dest's
    os.link(str(dest / "s1.tar"), str(dest / "s1-again.tar"))  # one inode, counted once
    ranks = dest / "ranks"
    ranks.mkdir()
    (ranks / "rank-0000.txt").write_text("s0.tar\n" * 2000)
    entries = [dest, ranks / "rank-0000.txt"] + [dest / name for name in os.listdir(str(dest)) if name != "s1-again.tar"]
    expected = sum(_allocated(path) for path in entries)

    result = run_module(capsys, dest)

    assert (result["held_bytes"], result["held_shards"]) == (70000, 1)  # the journal's view is kept for other callers
    assert result["ours_bytes"] == expected
    assert result["ours_bytes"] >= 70000 + 50000 + 30000
    assert result["ours_bytes"] < 70000 + 50000 + 30000 + 200000


def test_ours_bytes_grow_by_the_blocks_a_partial_file_takes(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    part = dest / ".a.tar.part"
    part.write_bytes(b"")
    before = shard_space.ours_bytes(str(dest))
    with open(str(part), "ab") as handle:
        handle.write(os.urandom(1 << 20))
        handle.flush()
        os.fsync(handle.fileno())
    assert shard_space.ours_bytes(str(dest)) - before == _allocated(part) >= 1 << 20


def test_a_dest_that_does_not_exist_or_is_a_file_holds_nothing(tmp_path):
    (tmp_path / "file").write_bytes(b"x" * 5000)
    assert shard_space.ours_bytes(str(tmp_path / "missing")) == 0
    assert shard_space.ours_bytes(str(tmp_path / "file")) == 0
    assert shard_space.measure(str(tmp_path / "missing"))["ours_bytes"] == 0
