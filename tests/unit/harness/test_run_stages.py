# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/harness/stages/run_stages.py: the machine's CPU use it prints after each group and at the end; --help starts nothing."""
import pathlib
import re
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "harness" / "stages"))
import run_stages  # noqa: E402  pylint: disable=wrong-import-position


def test_cpu_times_count_busy_within_total():
    busy, total = run_stages.cpu_times()
    assert 0 < busy <= total


def test_cpu_use_says_how_busy_and_how_much_was_idle():
    before = run_stages.cpu_times()
    sum(i * i for i in range(200000))
    assert re.fullmatch(r"machine CPU \d+% busy, \d+ core-seconds idle", run_stages.cpu_use(before))


def test_help_prints_the_usage_and_starts_nothing(capsys, monkeypatch):
    monkeypatch.setattr(run_stages.subprocess, "call", lambda *args, **kwargs: pytest.fail("a stage started"))
    assert run_stages.main(["--help"]) == 0
    assert "run_stages.py --only NAME" in capsys.readouterr().out


def test_a_failed_stage_shows_its_error_lines_and_its_end_again(capsys, monkeypatch, tmp_path):
    log = tmp_path / "airgap.log"
    log.write_text("\n".join(["TASK [x]", "fatal: [sim-gpu1]: FAILED! => {\"msg\": \"apt timed out\"}"]
                             + ["ok: [sim-gpu1] line %d" % i for i in range(100)] + ["airgap-lab: FAILED: site.yml failed"]))
    monkeypatch.setitem(run_stages.LOGGED, "airgap", log)
    run_stages.why_failed("airgap")
    out = capsys.readouterr().out
    assert "===== why airgap failed" in out and "apt timed out" in out
    assert out.rstrip().endswith("airgap-lab: FAILED: site.yml failed") and "line 60" not in out and "line 61" in out


def guarded_run(monkeypatch, record, limit, steps):
    """run_stages.main over the given stages (each `true`), with its own record and budget."""
    monkeypatch.setattr(run_stages, "GUARD", run_stages.Guard(run_stages.time_budget.Budget(record, limit=limit)))
    monkeypatch.setattr(run_stages, "stages", lambda: iter(steps))
    monkeypatch.setattr(run_stages, "LOGS", pathlib.Path(run_stages.time_budget.RECORD).parent.parent.parent / ".cache"
                        / "stages-test")
    return run_stages.main([])


def test_the_time_guard_stops_a_run_whose_stages_left_cannot_fit_and_fails_it(capsys, monkeypatch):
    monkeypatch.setattr(run_stages.time_budget, "MEASURED_FROM", 0)
    monkeypatch.setattr(run_stages.time_budget, "JUDGED_FROM", 0)
    # lint takes ten times its record, so the lab's 700 s would take 7000: past the 5400 s budget
    steps = [("lint", ["sleep", "0.5"]),
             ("lab", [("group", [("as-a-user", ["true"]), ("rolling", ["true"])]), ("m", ["true"])])]
    record = {"lint": 0.05, "as-a-user": 400, "rolling": 300, "m": 10}
    assert guarded_run(monkeypatch, record, 5400, steps) == 1
    out = capsys.readouterr().out
    assert "time guard: STOPPING make test" in out and "as-a-user, rolling, m" in out
    assert "===== stage lint: passed" in out and "===== stage as-a-user" not in out
    assert out.rstrip().endswith("1 passed, 1 failed")


def test_the_time_guard_lets_a_run_that_fits_pass_and_prints_each_stages_share(capsys, monkeypatch):
    steps = [("lint", ["true"]), ("lab", [("group", [("as-a-user", ["true"]), ("rolling", ["true"])]), ("m", ["true"])])]
    record = {"lint": 1, "as-a-user": 40, "rolling": 30, "m": 10}
    assert guarded_run(monkeypatch, record, 5400, steps) == 0
    out = capsys.readouterr().out
    assert "time guard" not in out and out.rstrip().endswith("4 passed, 0 failed")
    assert re.search(r"===== stage rolling: passed in \d+ s \(0% of the 90 min budget; 0% used, about \d+ s left", out)


def test_the_time_guard_stops_a_stage_still_running_when_the_budget_is_spent(capsys, monkeypatch):
    monkeypatch.setattr(run_stages, "WATCH_SECONDS", 0.2)
    monkeypatch.setattr(run_stages.time_budget, "RESERVE", 0)
    steps = [("slow", ["sleep", "60"])]
    assert guarded_run(monkeypatch, {"slow": 1}, 2, steps) == 1
    out = capsys.readouterr().out
    assert "Stopped while running: slow." in out
    assert re.search(r"^slow +\d+  stopped by the time guard$", out, re.M) and "why slow failed" not in out
    assert re.search(r"^time guard +\d+  FAILED$", out, re.M) and out.rstrip().endswith("0 passed, 2 failed")


def test_a_stage_the_guard_stops_beside_one_that_cannot_fit_is_shown_as_stopped_not_failed(capsys, monkeypatch):
    # a1 takes ten times its record, so a2 would take 10000 s: a2 is refused while b1 runs in the other lane, and the
    # guard stops b1. The run fails on the guard; b1 itself did not fail, and its log's end says nothing about why.
    monkeypatch.setattr(run_stages.time_budget, "MEASURED_FROM", 0)
    monkeypatch.setattr(run_stages.time_budget, "JUDGED_FROM", 0)
    steps = [("lab", [("lane", [("a1", ["sleep", "0.5"]), ("a2", ["true"])]), ("b1", ["sleep", "30"])])]
    record = {"a1": 0.05, "a2": 1000, "b1": 0.05}
    assert guarded_run(monkeypatch, record, 5400, steps) == 1
    out = capsys.readouterr().out
    assert "===== stage a1: passed" in out and "===== stage a2" not in out
    assert re.search(r"^===== stage b1: stopped by the time guard in \d+ s", out, re.M)
    assert "===== b1 was stopped by the time guard while it ran" in out and "why b1 failed" not in out
    assert re.search(r"^b1 +\d+  stopped by the time guard$", out, re.M)
    assert out.rstrip().endswith("1 passed, 2 failed")
