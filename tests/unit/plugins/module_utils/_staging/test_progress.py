# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The staging run's progress file: written while a slow store is read, with numbers that grow; gone when the run ends;
and never taken for a live run's when a killed run left it behind."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import transfer
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.progress import (
    PROGRESS_NAME, Progress, in_flight_bytes, parse_progress, pid_alive, read_progress)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage
from engine_helpers import FAST, KIB, REPO_ROOT, assert_staged, visible

COUNTS = dict(fetched=0, fetched_bytes=0, resumed=0, confirmed=0, verified=0, repaired=0, removed=0, from_peers=0)


def watch(dest, run_id, until, period=0.05, seen_enough=None):
    """Every live progress document seen in dest (one per change) until until() is true; seen_enough.set() once
    seen_enough.wanted(seen) holds."""
    seen = []
    while not until():
        progress = read_progress(dest, run_id)
        if progress is not None and (not seen or progress["updated"] != seen[-1]["updated"]):
            seen.append(progress)
            if seen_enough is not None and seen_enough.wanted(seen):
                seen_enough.set()
        time.sleep(period)
    return seen


def test_a_slow_store_shows_progress_that_grows_then_the_file_is_gone(tmp_path, make_shards, shard_server, monkeypatch):
    last_words = []
    remove = Progress.remove

    def remove_after_reading(self):
        with open(self.path) as handle:
            last_words.append(json.load(handle))
        remove(self)

    monkeypatch.setattr(Progress, "remove", remove_after_reading)
    shards, contents = make_shards({"a.tar": 160 * KIB, "b.tar": 160 * KIB, "c.tar": 160 * KIB})
    # The store sends 16 KiB of each shard and then holds it until this test has read the documents it checks (four
    # while transferring, one with bytes inside a shard before any shard is done), the rest at 200 KiB/s: a watcher that
    # a busy machine lets look only now and then still sees them.
    release = threading.Event()
    release.wanted = lambda seen: (len([progress for progress in seen if progress["phase"] == "transfer"]) >= 4
                                   and any(0 < progress["bytes_done"] and progress["shards_done"] == 0 for progress in seen))
    for name in contents:
        shard_server.inject(name, "hold", times=None, after=16 * KIB, release=release, rate=200 * KIB)
    dest = str(tmp_path / "dest")
    results = []
    runner = threading.Thread(target=lambda: results.append(
        stage(shards, dest, concurrency=2, buffer_size=4096, progress_interval=0.2, progress_id="run-1", **FAST)))
    runner.start()
    try:
        seen = watch(dest, "run-1", lambda: not runner.is_alive(), seen_enough=release)
    finally:
        release.set()
    runner.join()
    assert release.wanted(seen), seen

    assert results and results[0]["failed_shards"] == []
    assert_staged(dest, contents)
    assert not os.path.exists(os.path.join(dest, PROGRESS_NAME))
    assert [name for name in os.listdir(dest) if name.startswith(PROGRESS_NAME)] == []
    transferring = [progress for progress in seen if progress["phase"] == "transfer"]
    assert len(transferring) >= 4, seen
    first, last = transferring[0], last_words[0]
    assert (first["shards_total"], first["bytes_total"], first["run_id"], first["pid"]) == (3, 480 * KIB, "run-1", os.getpid())
    # The bytes grow inside a shard (its part file), not only when a shard is done, and never go down.
    done = [progress["bytes_done"] for progress in transferring]
    assert done == sorted(done) and done[-1] > done[0]
    assert any(0 < progress["bytes_done"] and progress["shards_done"] == 0 for progress in transferring), done
    assert any(progress["rate"] > 0 for progress in transferring)
    # 2 streams of 200 KiB/s: the measured rate is of that order, not of the disk.
    assert max(progress["rate"] for progress in transferring) < 2 * 2 * 200 * KIB
    assert (last["phase"], last["shards_done"], last["bytes_done"], last["counts"]["fetched"]) == ("finishing", 3, 480 * KIB, 3)


def test_a_run_with_nothing_to_transfer_writes_no_progress_file(tmp_path, make_shards, monkeypatch):
    shards, _contents = make_shards({"a.tar": 10 * KIB})
    dest = str(tmp_path / "dest")
    stage(shards, dest, **FAST)
    writes = []
    monkeypatch.setattr(Progress, "write", lambda self, *args, **kwargs: writes.append(args))
    result = stage(shards, dest, progress_id="again", **FAST)
    assert (result["confirmed"], result["fetched"], writes) == (1, 0, [])


def test_a_failing_run_removes_its_progress_file(tmp_path, make_shards, shard_server):
    shards, _contents = make_shards({"a.tar": 10 * KIB, "gone.tar": 10 * KIB})
    shard_server.inject("gone.tar", "status", times=None, code=404)
    dest = str(tmp_path / "dest")
    result = stage(shards, dest, progress_interval=0.05, progress_id="r", **FAST)
    assert [failure["name"] for failure in result["failed_shards"]] == ["gone.tar"]
    assert not os.path.exists(os.path.join(dest, PROGRESS_NAME))


def test_a_run_that_raises_removes_its_progress_file(tmp_path, make_shards, monkeypatch):
    shards, _contents = make_shards({"a.tar": 10 * KIB})
    dest = str(tmp_path / "dest")

    def broken(run, *args):
        assert os.path.exists(os.path.join(dest, PROGRESS_NAME))
        raise RuntimeError("broken after the progress file was written")

    monkeypatch.setattr(transfer._Run, "prune", broken)
    with pytest.raises(RuntimeError):
        stage(shards, dest, prune=True, progress_interval=0.05, progress_id="r", **FAST)
    assert visible(dest) == ["a.tar"]
    assert not os.path.exists(os.path.join(dest, PROGRESS_NAME))


def test_progress_interval_must_be_positive(tmp_path):
    with pytest.raises(StagingError, match="progress_interval"):
        stage([], str(tmp_path / "dest"), progress_interval=0)


def test_a_killed_run_leaves_a_file_that_is_never_shown_as_current(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"big.tar": 400 * KIB})
    # 128 KiB, then nothing until the child is dead: it cannot finish before the kill, however slowly this test looks.
    release = threading.Event()
    shard_server.inject("big.tar", "hold", times=1, after=128 * KIB, release=release)
    dest = str(tmp_path / "dest")
    config = dict(shards=shards, dest=dest, buffer_size=4096, checkpoint_bytes=16 * KIB, progress_interval=0.1, progress_id="killed",
                  **FAST)
    (tmp_path / "config.json").write_text(json.dumps(config))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, "collections"))
    child = subprocess.Popen([sys.executable, "-m", transfer.__name__, str(tmp_path / "config.json")], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        progress = read_progress(dest, "killed")
        if progress is not None and progress["bytes_done"] > 64 * KIB:
            break
        assert child.poll() is None
        time.sleep(0.02)
    else:
        pytest.fail("the child never showed progress")
    assert progress["pid"] == child.pid
    child.send_signal(signal.SIGKILL)
    child.wait()
    release.set()

    path = os.path.join(dest, PROGRESS_NAME)
    with open(path) as handle:
        left = handle.read()
    assert parse_progress(left, "killed")["bytes_done"] > 0
    # Its writer is gone: not live, whatever id is asked for; and another run's poller never takes it for its own.
    assert read_progress(dest) is None and read_progress(dest, "killed") is None
    assert parse_progress(left, "next") is None

    # The next run (its store fast again) drops the file as soon as it holds dest, and shows only its own progress.
    shard_server.inject("big.tar", "slow", times=1, rate=400 * KIB)
    results = []
    runner = threading.Thread(target=lambda: results.append(
        stage(shards, dest, buffer_size=4096, checkpoint_bytes=16 * KIB, progress_interval=0.1, progress_id="next", **FAST)))
    runner.start()
    seen = watch(dest, None, lambda: not runner.is_alive(), period=0.01)
    runner.join()
    assert results[0]["failed_shards"] == [] and results[0]["resumed"] == 1
    assert seen and {progress["run_id"] for progress in seen} == {"next"}
    assert not os.path.exists(path)
    assert_staged(dest, contents)


def test_in_flight_bytes_count_only_what_this_run_received(tmp_path):
    class Shard(object):
        def __init__(self, name):
            self.name = name

    (tmp_path / ".a.tar.part").write_bytes(b"x" * 700)
    (tmp_path / ".b.tar.part").write_bytes(b"x" * 300)
    active = [Shard("a.tar"), None, Shard("b.tar"), Shard("not-started.tar")]
    # b.tar resumed from 250 bytes found before the run; a shard whose part file is not there yet counts 0.
    assert in_flight_bytes(str(tmp_path), active, {"b.tar": 250}) == 700 + 50
    assert in_flight_bytes(str(tmp_path), active, {"a.tar": 900}) == 300


def test_the_rate_is_measured_over_the_recent_window(tmp_path):
    now = [100.0]
    progress = Progress(str(tmp_path / PROGRESS_NAME), 5, "r", 10, 10 ** 9, clock=lambda: now[0])
    counts = dict(COUNTS)
    rates = []
    for step in range(20):
        counts["fetched_bytes"] = step * 5 * 10 ** 6 if step < 10 else 45 * 10 ** 6 + (step - 9) * 50 * 10 ** 6
        now[0] = 100.0 + 5 * step
        progress.write(counts, [])
        rates.append(json.loads((tmp_path / PROGRESS_NAME).read_text())["rate"])
    assert rates[0] == 0 and rates[9] == pytest.approx(10 ** 6)
    # 30 s after the speed-up only the fast samples remain in the window.
    assert rates[-1] == pytest.approx(10 ** 7)
    progress.remove()
    assert not (tmp_path / PROGRESS_NAME).exists()


@pytest.mark.parametrize("text, run_id, expected", [
    ('{"version": 1, "run_id": "a", "bytes_done": 5}', "a", 5),
    ('{"version": 1, "run_id": "a", "bytes_done": 5}', None, 5),
    ('{"version": 1, "run_id": "a", "bytes_done": 5}', "b", None),
    ('{"version": 2, "run_id": "a", "bytes_done": 5}', "a", None),
    ('{"version": 1, "run_id": "a", "bytes_d', "a", None),
    ('[1, 2]', None, None),
])
def test_parse_progress(text, run_id, expected):
    progress = parse_progress(text, run_id)
    assert (progress and progress["bytes_done"]) == expected


OWN_PID = object()  # this process (a parameter id that is the same in every pytest-xdist worker)


@pytest.mark.parametrize("pid, alive", [(OWN_PID, True), (None, False), (0, False), (-1, False), (True, False), (2 ** 62, False)])
def test_pid_alive(pid, alive):
    assert pid_alive(os.getpid() if pid is OWN_PID else pid) is alive
