# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""shard_fetch_wait's controller half: the progress, total and summary lines, when they are shown, and the board where
the nodes' waits (separate processes under forks) leave their numbers for the cluster total."""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail
from ansible.playbook.play_context import PlayContext

from ansible_collections.dlinfra.gpu_cluster.plugins.action import shard_fetch_wait
from ansible_collections.dlinfra.gpu_cluster.plugins.action.shard_fetch_wait import ActionModule
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_progress.board import Board
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_progress.lines import final_progress
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_progress.watch import wait_for

TB = 10 ** 12
RUNNING = dict(phase="transfer", shards_done=1234, shards_total=10000, bytes_done=int(1.2 * TB), bytes_total=int(9.8 * TB),
               rate=1.1 * 10 ** 9, failed=0)


class FakeClock(object):
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fake_job(clock, finish_at, looks):
    """A job that ends at finish_at; a look waits for its end up to the time it is given, as the command on the node does."""
    def status(wait):
        assert wait >= 0
        looks.append((clock.now, wait))
        clock.now = max(clock.now, min(clock.now + wait, finish_at))
        return {"finished": 1, "fetched": 3} if clock.now >= finish_at else {"finished": 0}
    return status


def test_progress_is_shown_every_interval_and_each_look_waits_at_most_poll():
    clock, looks, shown = FakeClock(), [], []
    state = wait_for(fake_job(clock, 100, looks), lambda: shown.append(clock.now), 10, 30, 3600, clock=clock)
    assert state == {"finished": 1, "fetched": 3}
    assert shown == [30, 60, 90]
    assert all(wait <= 10 for _at, wait in looks) and len(looks) == 10
    assert clock.now == 100


def test_the_end_is_seen_when_it_comes_not_at_the_next_poll():
    clock, looks = FakeClock(), []
    wait_for(fake_job(clock, 6.3, looks), None, 10, None, 3600, clock=clock)
    assert looks == [(0, 10)] and clock.now == 6.3


def test_a_short_interval_between_slow_polls():
    clock, looks, shown = FakeClock(), [], []
    wait_for(fake_job(clock, 25, looks), lambda: shown.append(clock.now), 10, 4, 3600, clock=clock)
    assert all(wait <= 4 for _at, wait in looks)
    assert shown == [4, 8, 12, 16, 20, 24] and clock.now == 25


def test_a_slow_look_at_the_node_skips_the_lines_it_missed():
    clock, looks, shown = FakeClock(), [], []

    def slow_show():
        shown.append(clock.now)
        clock.now += 70

    wait_for(fake_job(clock, 200, looks), slow_show, 10, 30, 3600, clock=clock)
    assert shown == [30, 120]


def test_no_progress_without_an_interval_and_a_timeout_fails():
    clock, looks = FakeClock(), []
    with pytest.raises(AnsibleActionFail, match="did not finish within 50 s"):
        wait_for(fake_job(clock, 100, looks), None, 10, None, 50, clock=clock)
    assert clock.now == 50 and all(wait <= 10 for _at, wait in looks)


def test_the_board_holds_every_nodes_numbers_and_gives_one_total_per_interval(tmp_path):
    one, two = Board("ds-abc", ["b", "a"], root=str(tmp_path)), Board("ds-abc", ["a", "b"], root=str(tmp_path))
    assert one.directory == two.directory and Board("ds-other", ["a"], root=str(tmp_path)).directory != one.directory
    one.post("a", dict(RUNNING))
    two.post("b", dict(RUNNING, failed=1))
    assert one.entries() == {"a": RUNNING, "b": dict(RUNNING, failed=1)}
    assert one.claim_total(30, now=1000.0) is True
    assert two.claim_total(30, now=1001.0) is False
    assert two.claim_total(30, now=1016.0) is True
    one.finish("a", final_progress(RUNNING, {}))
    assert one.entries()["a"]["done"] is True
    two.finish("b", final_progress(None, dict(fetched=1, confirmed=2, total=3)))
    assert not (tmp_path / one.directory).exists()


def make_action(args, host="gpu1"):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    connection._shell.quote = lambda text: "'%s'" % text
    connection._shell.join_path = lambda *parts: "/".join(parts)
    action = ActionModule(task, connection, PlayContext(), loader=None, templar=None, shared_loader_obj=None)
    action._async_dir = lambda: "/root/.ansible_async"
    # The job file cannot be read: async_status answers (tests of the job file give their own commands).
    action._low_level_execute_command = lambda command, *args, **kwargs: {"rc": 1, "stdout": ""}
    return action


class _ClockBoard(Board):
    """A board whose lock reads this test's clock instead of the wall clock."""

    def __init__(self, clock, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.clock = clock

    def claim_total(self, interval, now=None):
        return super().claim_total(interval, now=self.clock.now)


def test_two_nodes_that_report_in_each_interval_print_one_cluster_total_per_interval_not_one_each(tmp_path, monkeypatch):
    """The cluster total once per interval, whichever node reports first (two waits in separate forks, one board)."""
    lines = []
    monkeypatch.setattr(shard_fetch_wait.display, "display", lambda msg, *args, **kwargs: lines.append(msg))
    clock = FakeClock()
    watches = {}
    for host in ("a", "b"):
        action = make_action(dict(dest="/srv/ds", progress_id="ds-1", progress_interval=30, label="ds"), host=host)
        action._read_progress = lambda dest, run_id, task_vars: dict(RUNNING, run_id="ds-1")
        board = _ClockBoard(clock, "ds-1", ["a", "b"], root=str(tmp_path))
        watches[host] = action._watch({}, host, action._task.args, board)
    # Four intervals of 30 s; in each, both nodes report, less than half an interval apart, in either order.
    for start, (first, second) in zip((0, 30, 60, 90), ((("a", 0.5), ("b", 9.0)), (("b", 1.0), ("a", 12.0)),
                                                        (("a", 3.0), ("b", 14.0)), (("a", 7.0), ("b", 7.5)))):
        for host, offset in (first, second):
            clock.now = 1000.0 + start + offset
            watches[host].show()
    totals = [line for line in lines if line.startswith("all ")]
    assert len([line for line in lines if not line.startswith("all ")]) == 8
    assert len(totals) == 4
    assert totals[0].endswith("(1 of 2 nodes reporting, 0 done)") and all(line.endswith("(2 nodes reporting, 0 done)") for line in totals[1:])


def test_the_action_shows_progress_a_placeholder_and_the_summary_without_polling_lines(tmp_path, monkeypatch):
    lines = []
    monkeypatch.setattr(shard_fetch_wait.display, "display", lambda msg, *args, **kwargs: lines.append(msg))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    action = make_action(dict(jid="1.2", poll=0.01, dest="/srv/ds", progress_id="ds-1", progress_interval=0.05, label="ds",
                              hosts=["gpu1"]))
    looks = []

    def async_status(jid, mode, task_vars):
        looks.append(mode)
        if mode == "cleanup" or len(looks) < 25:
            return {"finished": 0}
        return {"finished": 1, "ansible_job_id": jid, "changed": True, "fetched": 4, "resumed": 1, "confirmed": 0, "removed": 0,
                "failed_shards": [], "elapsed": 0.3, "fetched_bytes": 2 * 10 ** 6, "throughput": 10 ** 7, "total": 4}

    reads = iter([None, dict(RUNNING, run_id="ds-1")] + [dict(RUNNING, run_id="ds-1", shards_done=2000)] * 100)
    monkeypatch.setattr(action, "_async_status", async_status)
    monkeypatch.setattr(action, "_read_progress", lambda dest, run_id, task_vars: next(reads))
    result = action.run(task_vars={"inventory_hostname": "gpu1"})

    assert result["fetched"] == 4 and "ansible_job_id" not in result and looks[-1] == "cleanup"
    assert lines[0] == "gpu1 ds: preparing (reading dest and the journal, planning the transfers)"
    assert lines[1] == "gpu1 ds: 1,234/10,000 shards, 1.1 TiB/8.9 TiB, 1.0 GiB/s, ETA 2h 10m"
    assert lines[-1] == "gpu1 ds: done in 0s, 4 fetched (1 resumed), 0 confirmed, 0 removed, 0 failed, 1.9 MiB at 9.5 MiB/s"
    # One node: no cluster total; the board is gone with the last node.
    assert not [line for line in lines if line.startswith("all ")]
    assert list(tmp_path.rglob("*.json")) == []


def test_a_node_whose_progress_file_went_at_its_end_shows_nothing_more(tmp_path, monkeypatch):
    lines = []
    monkeypatch.setattr(shard_fetch_wait.display, "display", lambda msg, *args, **kwargs: lines.append(msg))
    action = make_action(dict(dest="/srv/ds", progress_id="ds-1", progress_interval=30, label="ds"))
    reads = iter([None, dict(RUNNING, run_id="ds-1"), None])
    action._read_progress = lambda dest, run_id, task_vars: next(reads)
    watch = action._watch({}, "gpu1", action._task.args, Board("ds-1", ["gpu1"], root=str(tmp_path)))
    for _look in range(3):
        watch.show()
    assert lines == ["gpu1 ds: preparing (reading dest and the journal, planning the transfers)",
                     "gpu1 ds: 1,234/10,000 shards, 1.1 TiB/8.9 TiB, 1.0 GiB/s, ETA 2h 10m"]


def test_the_action_without_a_progress_id_only_waits(monkeypatch):
    lines = []
    monkeypatch.setattr(shard_fetch_wait.display, "display", lambda msg, *args, **kwargs: lines.append(msg))
    action = make_action(dict(jid="1.2", poll=0.01, progress_interval=0.01))
    states = iter([{"finished": 0}] * 5 + [{"finished": 1, "failed": True, "msg": "dest is not writable"}, {}])
    monkeypatch.setattr(action, "_async_status", lambda jid, mode, task_vars: next(states))
    monkeypatch.setattr(action, "_read_progress", mock.Mock(side_effect=AssertionError("no progress without progress_id")))
    result = action.run(task_vars={"inventory_hostname": "gpu1"})
    assert result["failed"] is True and lines == []


@pytest.mark.parametrize("option", ["poll", "timeout", "progress_interval"])
def test_intervals_must_be_positive(option):
    with pytest.raises(AnsibleActionFail, match="positive"):
        make_action({"jid": "1.2", option: 0}).run(task_vars={})


def test_looks_read_the_job_file_on_the_node_and_async_status_never_runs(monkeypatch):
    action = make_action(dict(jid="1.2", poll=0.01, progress_interval=0.01))
    running = '{"started": true, "finished": false, "ansible_job_id": "1.2"}'
    seen = iter([{"rc": 0, "stdout": running}] * 6 + [{"rc": 0, "stdout": '{"changed": true, "fetched": 4}'}, {"rc": 0}])
    commands = []

    def low_level(command, *args, **kwargs):
        commands.append(command)
        return next(seen)

    monkeypatch.setattr(action, "_low_level_execute_command", low_level)
    monkeypatch.setattr(action, "_async_status", mock.Mock(side_effect=AssertionError("async_status ran")))

    result = action.run(task_vars={"inventory_hostname": "gpu1"})

    assert result["fetched"] == 4 and result["changed"] is True and "finished" not in result
    assert all(command.startswith("f='/root/.ansible_async/1.2'; n=1; while ") for command in commands[:7])
    assert commands[7:] == ["rm -f '/root/.ansible_async/1.2'"]


def run_on_this_machine(command, *args, **kwargs):
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=False)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def test_a_look_on_the_node_returns_when_the_job_ends_or_after_the_wait(tmp_path):
    action = make_action({"jid": "1.2"})
    action._async_dir = lambda: str(tmp_path)
    action._low_level_execute_command = run_on_this_machine
    job = tmp_path / "1.2"
    job.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "1.2"}))

    began = time.monotonic()
    assert action._job_status("1.2", 0.6, {}) == {"finished": 0, "started": 1}
    assert 0.5 <= time.monotonic() - began < 3

    def finish():
        time.sleep(0.5)
        job.with_name("1.2.tmp").write_text(json.dumps({"changed": True, "fetched": 4}))
        os.replace(str(job.with_name("1.2.tmp")), str(job))

    ender = threading.Thread(target=finish)
    began = time.monotonic()
    ender.start()
    state = action._job_status("1.2", 30, {})
    ender.join()
    assert state == {"changed": True, "fetched": 4, "finished": 1, "ansible_job_id": "1.2"}
    assert time.monotonic() - began < 15  # at the job's end (0.5 s), not after the 30 s wait: half of it, for a busy machine


@pytest.mark.parametrize("seen", [{"rc": 1, "stdout": ""}, {"rc": 0, "stdout": "{half a file"}, {"rc": 0, "stdout": "[]"}])
def test_a_job_file_that_cannot_be_read_leaves_the_answer_to_async_status(seen, monkeypatch):
    action = make_action({"jid": "1.2"})
    action._low_level_execute_command = lambda command, *args, **kwargs: seen
    action._async_status = lambda jid, mode, task_vars: {"finished": 0, "started": 1}
    naps = []
    monkeypatch.setattr(shard_fetch_wait.time, "sleep", naps.append)
    assert action._job_status("1.2", 7, {}) == {"finished": 0, "started": 1}
    assert naps == [7]


def test_an_earlier_runs_fetch_is_shown_once_it_moves_then_this_runs_own(tmp_path, monkeypatch):
    # An interrupted play left a fetch running: this run's engine waits for it. Its file (another run id) is shown once
    # its time stamp moves; a file a killed run left behind never moves, and stays "preparing".
    lines = []
    monkeypatch.setattr(shard_fetch_wait.display, "display", lambda msg, *args, **kwargs: lines.append(msg))
    action = make_action(dict(dest="/srv/ds", progress_id="ds-2", progress_interval=30, label="ds"))
    earlier = dict(RUNNING, run_id="ds-1", updated=100.0)
    reads = iter([earlier, earlier, dict(earlier, updated=105.0, shards_done=2000), dict(RUNNING, run_id="ds-2")])
    action._read_progress = lambda dest, run_id, task_vars: next(reads)
    watch = action._watch({}, "gpu1", action._task.args, Board("ds-2", ["gpu1"], root=str(tmp_path)))
    for _look in range(4):
        watch.show()
    assert lines == ["gpu1 ds: preparing (reading dest and the journal, planning the transfers)"] * 2 + [
        "gpu1 ds: waiting for an earlier run's fetch, still at work here: 2,000/10,000 shards, 1.1 TiB/8.9 TiB, 1.0 GiB/s, ETA 2h 10m",
        "gpu1 ds: 1,234/10,000 shards, 1.1 TiB/8.9 TiB, 1.0 GiB/s, ETA 2h 10m"]
