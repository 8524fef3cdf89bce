# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/harness/run_stages.py: the machine's CPU use it prints after each group and at the end; --help starts nothing."""
import pathlib
import re
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "harness"))
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
