# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring benchmark's quick mode end to end (one round: the collector, Debian's node exporter and Prometheus from
the archive), so that it cannot rot unnoticed. It checks that every figure was measured, never the figures themselves:
those are the benchmark's to judge on a quiet machine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "monitoring" / "run.py"
QUICK_TIMEOUT_S = 600  # a safety net: one round took 5 s here, the two packages' first download 3 s


def test_one_round_measures_every_figure(tmp_path):
    # A test that needs a tool gets it or fails, never skips: the binaries come from Debian's archive.
    assert shutil.which("apt-get"), "the benchmark takes its binaries from apt-get download (Debian/Ubuntu)"
    result = tmp_path / "monitoring.json"
    run = subprocess.run([sys.executable, str(BENCH), "--rounds", "1", "--json", str(result)], capture_output=True,
                         text=True, timeout=QUICK_TIMEOUT_S, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    figures = json.loads(result.read_text())
    assert set(figures["collector"]) == {"8x A100 (DGX A100)", "1x H200"}
    for row in figures["collector"].values():
        assert row["cpu_ms_median"] > 0 and row["peak_rss_mib"] > 0
    assert figures["node_exporter_rss_mib"] > 0
    assert {nodes: row["targets"] for nodes, row in figures["prometheus"].items()} == {"3": 4, "1000": 1001}
    assert all(row["ready_s_median"] > 0 for row in figures["prometheus"].values())
    assert "target < 5 s" in run.stdout and "target < 50 MiB" in run.stdout
