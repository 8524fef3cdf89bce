# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/harness/stages/time_budget.py: the slowness against the record, what is predicted left, and when the run must stop."""
import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "harness" / "stages"))
import time_budget  # noqa: E402  pylint: disable=wrong-import-position

RECORD = {"venv": 0, "unit": 100, "lint": 5, "as-a-user": 400, "rolling": 300, "molecule:a": 200, "molecule:b": 100}


class Clock(object):
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def budget(limit=5400):
    clock = Clock()
    return time_budget.Budget(dict(RECORD), limit=limit, clock=clock), clock


def test_the_record_in_the_tree_names_every_stage_of_make_test():
    sys.path.insert(0, str(time_budget.RECORD.parent))
    import run_stages  # pylint: disable=import-outside-toplevel
    names = {name for step in run_stages.chosen_steps([]) for name in ([step[0]] if not run_stages.holds_stages(step[1])
             else [s[0] for m in step[1] for s in (m[1] if run_stages.holds_stages(m[1]) else [m])])}
    assert names == set(time_budget.load_record())


def test_slowness_is_one_until_a_stage_says_otherwise_and_setup_and_short_stages_never_do():
    b = budget()[0]
    assert b.slowness() == 1.0
    b.end("venv", 60)  # a fresh machine builds its venv: that says nothing about its speed
    b.end("lint", 50)  # too short in the record to tell
    assert b.slowness() == 1.0
    b.end("unit", 300)
    b.end("as-a-user", 1200)
    assert b.slowness() == pytest.approx(3.0)


def test_a_group_takes_its_longest_lane_or_its_work_spread_over_the_workers():
    b = budget()[0]
    lab = [("as-a-user", 0.0), ("rolling", 0.0)]
    assert b.left([(2, [lab, [("molecule:a", 0.0)], [("molecule:b", 0.0)]])]) == 700  # the lab lane is longest
    assert b.left([(2, [[("molecule:a", 0.0)], [("molecule:b", 0.0)], [("unit", 0.0)]])]) == 200  # 400 over 2
    assert b.left(["unit", (2, [[("as-a-user", 150.0)]])]) == 100 + 250  # a running stage counts what it has left
    assert b.left([(2, [[("as-a-user", 900.0)]])]) == 0  # one past its record counts nothing more


def test_a_stage_the_record_lacks_counts_at_the_longest_recorded():
    b = budget()[0]
    assert b.left(["molecule:new"]) == 400


def test_it_fits_until_used_plus_left_at_todays_slowness_passes_the_budget_less_the_reserve():
    b, clock = budget(limit=3000)
    plan = [(2, [[("as-a-user", 0.0), ("rolling", 0.0)], [("molecule:a", 0.0)]])]
    assert b.fits(plan)  # 700 s of 3000
    clock.now += 2400
    b.end("as-a-user", 2400)
    b.end("molecule:a", 1200)  # 6x the record, measured over 600 s of it
    assert b.slowness() == pytest.approx(6.0)
    plan = [(2, [[("rolling", 0.0)]])]
    assert not b.fits(plan)  # 2400 used + 1800 left, 1530 even 15 % faster
    message = b.stop_message(plan, ["rolling"])
    assert "STOPPING" in message and "(rolling)" in message and "past the budget even 15% faster" in message
    assert "as-a-user 2400 s (recorded 400 s, 6.0x)" in message and "failure, not a skip" in message


def test_nothing_stops_on_a_prediction_before_enough_of_the_record_was_measured():
    # CI once stopped at 0 s: the record's own run had been slow, and with nothing measured the prediction is the record
    b, clock = budget(limit=600)
    plan = ["as-a-user", "rolling"]  # 700 s in the record: past the budget at 1.0x
    assert not b.judged() and b.fits(plan)
    clock.now += 300
    b.end("unit", 300)  # 3x, but 100 s of record say too little yet
    assert not b.judged() and b.fits(plan)
    b.end("as-a-user", 1200)
    assert not b.judged()  # 500 s of record
    b.end("molecule:a", 600)
    assert b.judged() and b.slowness() == pytest.approx(3.0) and not b.fits(plan)


def test_a_prediction_within_the_tolerance_of_the_budget_runs_on_and_one_beyond_it_stops():
    b, clock = budget(limit=1060)  # 1000 s, less the reserve
    clock.now += 300
    b.end("as-a-user", 400)
    b.end("molecule:a", 200)  # 1.0x, judged
    assert b.fits(["rolling", "molecule:b"] + ["unit"] * 4)  # 300 used + 800 predicted: 680 fits the 700 left
    assert not b.fits(["rolling", "molecule:b"] + ["unit"] * 6)  # 300 + 1000 predicted: 850 does not


def test_out_of_time_once_the_budget_less_the_reserve_is_spent():
    b, clock = budget(limit=1000)
    clock.now += 1000 - time_budget.RESERVE - 1
    assert not b.out_of_time()
    clock.now += 2
    assert b.out_of_time()


def test_share_says_the_stages_part_what_is_used_and_what_is_left():
    b, clock = budget(limit=5400)
    clock.now += 540
    b.end("unit", 200)
    assert b.share(540, ["rolling"]) == "10% of the 90 min budget; 10% used, about 10 min left at 2.0x the record"


def test_write_record_keeps_each_stage_and_where_it_was_measured(tmp_path):
    path = tmp_path / "record.json"
    time_budget.write_record([("unit", 0, 101.4), ("as-a-user", 0, 388.6)], "here", path=path)
    assert json.loads(path.read_text()) == {"measured": "here", "seconds": {"unit": 101, "as-a-user": 389}}
    assert time_budget.load_record(path) == {"unit": 101.0, "as-a-user": 389.0}
