# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A shard's part file across attempts and runs: Range resume, restart on a changed source, kill -9 and re-run; links
planted at the part's and the state's names."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import transfer
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import ChecksumError, LocalError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.input import Shard
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import JOURNAL_NAME
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.partial import Partial
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage

from engine_helpers import FAST, KIB, MIB, REPO_ROOT, assert_staged, fingerprint, hidden_partials, outside_target, plant_link, read_journal, visible


def test_truncated_body_is_retried_with_a_range_request(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"t.tar": 400 * KIB})
    shard_server.inject("t.tar", "truncate", after=100 * KIB)

    result = stage(shards, str(tmp_path), retries=2, **FAST)

    assert result["fetched"] == 1 and result["failed_shards"] == []
    first, second = shard_server.requests("t.tar")
    assert (first["range"], first["sent"]) == (None, 100 * KIB)
    assert (second["range"], second["status"], second["sent"]) == ("bytes=%d-" % (100 * KIB), 206, 300 * KIB)
    assert_staged(str(tmp_path), contents)


def test_a_later_run_resumes_a_partial_with_range(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"r.tar": 512 * KIB, "other.tar": 10 * KIB})
    shard_server.inject("r.tar", "truncate", after=200 * KIB)
    dest = str(tmp_path)

    first = stage(shards, dest, retries=0, **FAST)

    assert [failure["name"] for failure in first["failed_shards"]] == ["r.tar"]
    assert visible(dest) == ["other.tar"]
    assert hidden_partials(dest) == [".r.tar.part", ".r.tar.part.state"]

    second = stage(shards, dest, retries=0, **FAST)

    assert (second["fetched"], second["resumed"], second["confirmed"]) == (1, 1, 1)
    resumed = shard_server.requests("r.tar")[-1]
    assert resumed["range"] == "bytes=%d-" % (200 * KIB)
    assert resumed["if_range"] == shard_server.blobs["/r.tar"][1]
    assert (resumed["status"], resumed["sent"]) == (206, 312 * KIB)
    assert second["fetched_bytes"] == 312 * KIB
    assert hidden_partials(dest) == []
    assert_staged(dest, contents)


@pytest.mark.parametrize("server_honours_if_range", [True, False], ids=["if-range-honoured", "if-range-ignored"])
def test_changed_source_restarts_from_zero(tmp_path, make_shards, shard_server, server_honours_if_range):
    shards, contents = make_shards({"v.tar": 256 * KIB})
    shard_server.honour_if_range = server_honours_if_range
    shard_server.inject("v.tar", "truncate", after=64 * KIB)
    stage(shards, str(tmp_path), retries=0, **FAST)
    new_data = os.urandom(256 * KIB)
    shards[0]["url"] = shard_server.add("v.tar", new_data)
    shards[0]["sha256"] = hashlib.sha256(new_data).hexdigest()

    result = stage(shards, str(tmp_path), retries=0, **FAST)

    assert result["fetched"] == 1 and result["resumed"] == 0 and result["failed_shards"] == []
    later = shard_server.requests("v.tar")[1:]
    assert later[0]["range"] == "bytes=%d-" % (64 * KIB)
    if server_honours_if_range:
        assert [(entry["status"], entry["sent"]) for entry in later] == [(200, 256 * KIB)]
    else:
        assert later[0]["status"] == 206
        assert (later[1]["range"], later[1]["status"], later[1]["sent"]) == (None, 200, 256 * KIB)
    assert_staged(str(tmp_path), {"v.tar": new_data})


def test_kill_minus_9_mid_transfer_then_rerun_completes(tmp_path, make_shards, shard_server):
    sizes = {"small-%d.tar" % index: 64 * KIB for index in range(4)}
    sizes["big.tar"] = 24 * MIB
    shards, contents = make_shards(sizes)
    shard_server.inject("big.tar", "slow", rate=6 * MIB)
    dest = str(tmp_path / "dest")
    config = dict(shards=shards, dest=dest, concurrency=2, checkpoint_bytes=MIB, journal_interval=0.05, **FAST)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, "collections"))
    child = subprocess.Popen([sys.executable, "-m", transfer.__name__, str(config_path)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    journal_path = os.path.join(dest, JOURNAL_NAME)

    def small_ones_journaled():
        try:
            journaled = read_journal(str(journal_path))
            return all(name in journaled for name in contents if name != "big.tar")
        except (OSError, ValueError):
            return False

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        big = shard_server.requests("big.tar")
        if big and big[0]["sent"] >= 4 * MIB and small_ones_journaled():
            break
        assert child.poll() is None, child.stderr.read()
        time.sleep(0.02)
    else:
        pytest.fail("the big shard never got under way")
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stderr.close()

    assert "big.tar" not in visible(dest)
    assert ".big.tar.part" in os.listdir(dest)
    served_before_kill = shard_server.requests("big.tar")[0]["sent"]

    result = stage(shards, dest, concurrency=2, checkpoint_bytes=MIB, **FAST)

    assert result["failed_shards"] == []
    assert (result["fetched"], result["resumed"], result["confirmed"]) == (1, 1, 4)
    assert visible(dest) == sorted(contents)
    assert hidden_partials(dest) == []
    assert_staged(dest, contents)
    for name in contents:
        if name != "big.tar":
            assert len(shard_server.requests(name)) == 1, name
    resumed = shard_server.requests("big.tar")[-1]
    start = int(resumed["range"].split("=")[1].rstrip("-"))
    assert MIB <= start <= served_before_kill
    assert resumed["sent"] == 24 * MIB - start


# ---------------------------------------------------------------------------------------------
# The part file on its own
# ---------------------------------------------------------------------------------------------

def _part(dest, data, url="http://store/a.tar", checkpoint_bytes=MIB, has_state=False):
    shard = Shard("a.tar", url, len(data), hashlib.sha256(data).hexdigest())
    return Partial(str(dest), shard, checkpoint_bytes, has_state)


def test_a_checkpoint_records_only_durable_bytes_and_a_resume_rehashes_them(tmp_path):
    data = os.urandom(3 * KIB)
    part = _part(tmp_path, data, checkpoint_bytes=KIB)
    part.restart('"v1"', len(data))
    part.write(memoryview(data[:1500]))  # past checkpoint_bytes: fsync, then the state file
    part.close()
    with open(tmp_path / ".a.tar.part.state") as handle:
        state = json.load(handle)
    assert state == {"url": "http://store/a.tar", "validator": '"v1"', "size": len(data), "durable": 1500}

    again = _part(tmp_path, data, checkpoint_bytes=KIB, has_state=True)
    assert again.resume_offset(4096) == 1500
    again.write(memoryview(data[1500:]))
    assert again.complete(sync=True)[2] == hashlib.sha256(data).hexdigest()
    again.publish()
    assert (tmp_path / "a.tar").read_bytes() == data
    assert sorted(os.listdir(tmp_path)) == ["a.tar"]


def test_a_state_for_another_url_or_size_is_not_resumed(tmp_path):
    data = os.urandom(2 * KIB)
    part = _part(tmp_path, data, checkpoint_bytes=KIB)
    part.restart('"v1"', len(data))
    part.write(memoryview(data[:KIB + 1]))
    part.close()
    assert _part(tmp_path, data, url="http://other/a.tar", has_state=True).resume_offset(4096) == 0
    assert _part(tmp_path, data + b"x", has_state=True).resume_offset(4096) == 0
    assert _part(tmp_path, data, has_state=False).resume_offset(4096) == 0


def test_complete_refuses_wrong_bytes_and_publishes_nothing(tmp_path):
    data = os.urandom(KIB)
    part = _part(tmp_path, data)
    part.restart(None, len(data))
    part.write(memoryview(bytes([data[0] ^ 0xFF]) + data[1:]))  # never the same first byte
    with pytest.raises(ChecksumError, match="sha256 is"):
        part.complete(sync=True)
    part.discard()
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# Links planted at the part's and the state's names: that shard fails, naming the link; the others stage
# ---------------------------------------------------------------------------------------------

def _state_for(shard_server, shard, durable):
    return json.dumps({"url": shard["url"], "validator": shard_server.blobs["/" + shard["name"]][1], "size": shard["size"],
                       "durable": durable})


@pytest.mark.parametrize("with_state", [False, True], ids=["fresh", "resumable"])
def test_a_link_at_the_part_name_fails_that_shard_and_its_target_is_untouched(tmp_path, make_shards, shard_server, with_state):
    # The reproduction: 153,600 bytes of a file outside dest were replaced by the shard's.
    shards, contents = make_shards({"a.tar": 150 * KIB, "b.tar": 10 * KIB})
    dest = tmp_path / "dest"
    dest.mkdir()
    target = outside_target(tmp_path, size=150 * KIB)
    before = fingerprint(target)
    link = plant_link(dest / ".a.tar.part", target)
    if with_state:
        # Without the refusal, a resume would truncate the target to the durable offset and append to it.
        (dest / ".a.tar.part.state").write_text(_state_for(shard_server, shards[0], 100 * KIB))

    result = stage(shards, str(dest), retries=0, **FAST)

    assert fingerprint(target) == before
    assert [failure["name"] for failure in result["failed_shards"]] == ["a.tar"]
    assert "%s is a symbolic link" % link in result["failed_shards"][0]["reason"]
    assert visible(str(dest)) == ["b.tar"] and result["fetched"] == 1
    assert os.path.islink(str(link))


def test_a_link_at_the_state_name_fails_that_shard_and_its_target_is_untouched(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"a.tar": 150 * KIB, "b.tar": 10 * KIB})
    dest = tmp_path / "dest"
    dest.mkdir()
    target = outside_target(tmp_path)
    target.write_text(_state_for(shard_server, shards[0], 100 * KIB))
    os.utime(str(target), ns=(10 ** 18, 10 ** 18))
    before = fingerprint(target)
    (dest / ".a.tar.part").write_bytes(contents["a.tar"][:100 * KIB])
    link = plant_link(dest / ".a.tar.part.state", target)

    result = stage(shards, str(dest), retries=0, **FAST)

    assert fingerprint(target) == before
    assert [failure["name"] for failure in result["failed_shards"]] == ["a.tar"]
    assert "%s is a symbolic link" % link in result["failed_shards"][0]["reason"]
    assert visible(str(dest)) == ["b.tar"]


def test_a_link_at_the_old_state_temporary_name_is_not_followed(tmp_path, make_shards, shard_server):
    # Before: a checkpoint wrote .NAME.part.state.tmp, a fixed name, through whatever was there.
    shards, contents = make_shards({"r.tar": 200 * KIB})
    shard_server.inject("r.tar", "truncate", after=100 * KIB)
    dest = tmp_path / "dest"
    dest.mkdir()
    target = outside_target(tmp_path)
    before = fingerprint(target)
    plant_link(dest / ".r.tar.part.state.tmp", target)

    result = stage(shards, str(dest), retries=0, **FAST)

    assert [failure["name"] for failure in result["failed_shards"]] == ["r.tar"]
    assert fingerprint(target) == before
    state = dest / ".r.tar.part.state"
    assert not os.path.islink(str(state)) and json.loads(state.read_text())["durable"] == 100 * KIB


def test_a_hard_link_at_the_part_name_is_refused_before_it_is_truncated(tmp_path):
    data = os.urandom(KIB)
    target = outside_target(tmp_path)
    before = fingerprint(target)
    os.link(str(target), str(tmp_path / ".a.tar.part"))
    part = _part(tmp_path, data)

    with pytest.raises(LocalError, match="has 2 hard links"):
        part.restart(None, len(data))

    assert fingerprint(target) == before
