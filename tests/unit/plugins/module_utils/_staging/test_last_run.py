# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run record a run leaves in dest for monitoring: written at the run's start and end by stage(), with its result,
and the shards and bytes of its list that dest held against those listed; never in check mode; and read back only
when it is whole."""

import json
import os

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.input import ShardListFile
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.last_run import (
    LAST_RUN_NAME, LastRun, parse_last_run, run_result)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import _Run, stage
from engine_helpers import FAST, KIB


def record_of(dest):
    with open(os.path.join(dest, LAST_RUN_NAME)) as handle:
        return parse_last_run(handle.read())


def test_a_run_records_its_start_then_its_end(tmp_path, make_shards, monkeypatch):
    shards, _contents = make_shards({"a.tar": KIB, "b.tar": 3 * KIB})
    dest = str(tmp_path / "ds")
    seen = []
    start = LastRun.start

    def start_and_read(self, counts):
        start(self, counts)
        seen.append(record_of(dest))

    monkeypatch.setattr(LastRun, "start", start_and_read)
    stage(shards, dest, progress_id="ds-1", **FAST)

    (running,) = seen
    assert (running["result"], running["ended"], running["run_id"], running["pid"]) == ("running", None, "ds-1", os.getpid())
    assert (running["shards_planned"], running["bytes_planned"], running["shards_held"], running["bytes_held"]) == (2, 4 * KIB, 0, 0)
    done = record_of(dest)
    assert (done["result"], done["shards_held"], done["bytes_held"], done["shards_failed"]) == ("succeeded", 2, 4 * KIB, 0)
    assert running["started"] == done["started"] <= done["ended"]


def test_a_run_with_a_failed_shard_is_recorded_as_failed(tmp_path, make_shards, shard_server):
    shards, _contents = make_shards({"a.tar": KIB})
    gone = {"name": "gone.tar", "url": shard_server.url("gone.tar")}
    result = stage(shards + [gone], str(tmp_path), retries=0, **dict(FAST))
    assert len(result["failed_shards"]) == 1
    record = record_of(str(tmp_path))
    # gone.tar has no size: the bytes planned are unknown.
    assert (record["result"], record["shards_planned"], record["bytes_planned"], record["shards_held"], record["shards_failed"]) == (
        "failed", 2, None, 1, 1)


def test_a_run_that_raises_after_its_start_is_recorded_as_failed(tmp_path, make_shards, monkeypatch):
    shards, _contents = make_shards({"a.tar": KIB})

    def no_room(self, tasks, partials):
        raise StagingError("not enough free space")

    monkeypatch.setattr(_Run, "check_space", no_room)
    with pytest.raises(StagingError):
        stage(shards, str(tmp_path), **FAST)
    assert record_of(str(tmp_path))["result"] == "failed"


def test_a_rerun_from_the_journal_alone_counts_its_shards_without_the_list(tmp_path, make_shards):
    shards, _contents = make_shards({"a.tar": KIB, "b.tar": 2 * KIB})
    list_file = tmp_path / "shards.json"
    list_file.write_text(json.dumps(shards))
    dest = str(tmp_path / "ds")
    stage(ShardListFile(str(list_file)), dest, **FAST)
    result = stage(ShardListFile(str(list_file)), dest, **FAST)
    assert result["confirmed"] == 2
    record = record_of(dest)
    assert (record["shards_planned"], record["bytes_planned"], record["shards_held"], record["bytes_held"]) == (2, 3 * KIB, 2, 3 * KIB)


def test_check_mode_writes_no_record(tmp_path, make_shards):
    shards, _contents = make_shards({"a.tar": KIB})
    stage(shards, str(tmp_path), check_mode=True, **FAST)
    assert not os.path.exists(os.path.join(str(tmp_path), LAST_RUN_NAME))


@pytest.mark.parametrize("text", [
    "", "{\"version\": 1, \"result\": \"succ", "[]", json.dumps({"version": 2, "result": "succeeded", "started": 1, "ended": 2}),
    json.dumps({"version": 1, "result": "won", "started": 1, "ended": 2}),
    json.dumps({"version": 1, "result": "succeeded", "started": 1, "ended": None}),
    json.dumps({"version": 1, "result": "running", "started": "yesterday"}),
    json.dumps({"version": 1, "result": "running", "started": 1, "shards_held": True}),
])
def test_anything_but_a_whole_record_is_refused(text):
    assert parse_last_run(text) is None


def test_a_running_record_whose_writer_is_gone_is_interrupted():
    record = parse_last_run(json.dumps({"version": 1, "result": "running", "started": 1, "pid": 12345}))
    assert run_result(record, lambda pid: True) == "running"
    assert run_result(record, lambda pid: False) == "interrupted"
    assert run_result(dict(record, result="failed", ended=2), lambda pid: False) == "failed"
