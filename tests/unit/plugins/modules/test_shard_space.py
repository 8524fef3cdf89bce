# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_transfer import stage
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
    assert (result["held_bytes"], result["held_shards"]) == (0, 0)


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
