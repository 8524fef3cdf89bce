# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The peer benchmark: the pieces that judge its results (its quick mode end to end in containers is
tests/integration/benchmarks/test_peer_bench_quick.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "peer" / "run.py"
# Loaded under a name of its own: the staging benchmark's tests import theirs as `run`.
_SPEC = importlib.util.spec_from_file_location("peer_bench_run", BENCH)
peer_bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(peer_bench)


def _rows(walls, store_ratio=1.0, dataset=100):
    measured = {(count, mode): [{"wall_s": walls[(count, mode)], "store_bytes": int(store_ratio * dataset) if mode == "peer"
                                 else count * dataset, "peer_bytes": 0}] for count in (1, 2, 4) for mode in ("direct", "peer")}
    return peer_bench.summarize(measured, dataset)


WALLS = {(1, "direct"): 10.0, (2, "direct"): 20.0, (4, "direct"): 40.0, (1, "peer"): 10.0, (2, "peer"): 11.0, (4, "peer"): 15.0}


@pytest.mark.parametrize("quick", [False, True])
def test_targets_pass_at_the_boundaries(quick):
    verdicts = {name: (verdict, enforced) for name, verdict, _evidence, enforced in peer_bench.evaluate_targets(
        _rows(WALLS, store_ratio=1.05), quick)}
    assert [verdict for verdict, enforced in verdicts.values() if enforced] == ["PASS"] * (3 if quick else 4)


def test_targets_fail_just_past_the_boundaries():
    slow = dict(WALLS)
    slow[(4, "peer")] = 15.1
    failed = [name for name, verdict, _evidence, _enforced in peer_bench.evaluate_targets(_rows(slow, store_ratio=1.06), False)
              if verdict == "FAIL"]
    assert len(failed) == 4
    assert "peer-assisted, 4 nodes: wall time <= 1.5x the 1-node time" in failed
    # Quick mode reports the wall time but does not fail on it.
    quick = {name: enforced for name, _verdict, _evidence, enforced in peer_bench.evaluate_targets(_rows(slow), True)}
    assert quick["peer-assisted, 4 nodes: wall time <= 1.5x the 1-node time"] is False
