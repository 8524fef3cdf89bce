# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/harness/run_stages.py: the machine's CPU use it prints after each group and at the end."""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "harness"))
import run_stages  # noqa: E402  pylint: disable=wrong-import-position


def test_cpu_times_count_busy_within_total():
    busy, total = run_stages.cpu_times()
    assert 0 < busy <= total


def test_cpu_use_says_how_busy_and_how_much_was_idle():
    before = run_stages.cpu_times()
    sum(i * i for i in range(200000))
    assert re.fullmatch(r"machine CPU \d+% busy, \d+ core-seconds idle", run_stages.cpu_use(before))
