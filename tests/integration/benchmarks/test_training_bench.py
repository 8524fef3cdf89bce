# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The training read benchmark's quick mode end to end (one round on four small shards), so that it cannot rot
unnoticed. It checks that every figure was measured and every sample read, never the rates: those are the benchmark's
to judge on a quiet machine."""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "training" / "run.py"


def test_one_round_measures_every_method(tmp_path):
    result = tmp_path / "training.json"
    run = subprocess.run([sys.executable, str(BENCH), "--rounds", "1", "--shards", "4", "--samples", "20",
                          "--workers", "2", "--json", str(result)], capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    figures = json.loads(result.read_text())
    assert set(figures["methods"]) == {"raw", "local", "streamed", "local x2 workers"}
    assert all(row["mb_per_s"] > 0 for row in figures["methods"].values())
    assert {name: row["samples_per_s"] is not None for name, row in figures["methods"].items()} == {
        "raw": False, "local": True, "streamed": True, "local x2 workers": True}
    assert figures["samples"] == 80 and figures["local_to_raw"] > 0 and figures["streamed_to_local"] > 0
    assert "local / raw:" in run.stdout and "streamed / local:" in run.stdout
