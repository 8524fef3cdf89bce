# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The staging benchmark: the pieces that judge its results (its quick mode end to end over a real nginx is
tests/integration/benchmarks/test_staging_bench_quick.py)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[3] / "benchmarks" / "staging"
sys.path.insert(0, str(BENCH_DIR))

import run as staging_bench  # noqa: E402  pylint: disable=wrong-import-position,import-error
from _dataset import check_copy  # noqa: E402  pylint: disable=wrong-import-position,import-error

BIG, SMALL, NOOP = "(a) big", "(b) small", "no-op"
LIMIT_TARGET = "(a) engine >= 0.8x the physical limit, on >= 8 CPUs"


def _verdicts(rows, cpus=8):
    staging_bench.add_ratios(rows)
    return {name: verdict for name, verdict, _evidence in staging_bench.evaluate_targets(rows, BIG, SMALL, NOOP, cpus=cpus)}


# Every target exactly met: (a) as fast as aria2c and 8/10 = 0.8 of the disk; (b) as fast as curl and 20x get_url;
# the no-op re-run 10 s, a little faster than rsync.
AT_THE_BOUNDARIES = {
    (BIG, "engine"): 10.0, (BIG, "role"): 10.0, (SMALL, "role"): 10.0, (BIG, "aria2c"): 10.0, (BIG, "aria2c-sha256"): 11.0,
    (BIG, "rclone"): 12.0, (BIG, "stream-null"): 4.0,
    (BIG, "disk-write"): 8.0, (SMALL, "engine"): 10.0, (SMALL, "curl"): 10.0, (SMALL, "get_url"): 200.0,
    (NOOP, "engine"): 10.0, (NOOP, "rsync"): 10.5, ("plan", "engine"): 5.0, ("plan task", "engine"): 5.0,
}


def _rows(changes=None, without=()):
    seconds = dict(AT_THE_BOUNDARIES)
    seconds.update(changes or {})
    return [{"case": case, "tool": tool, "seconds": value, "files": 1000000 if case == NOOP else 0}
            for (case, tool), value in seconds.items() if tool not in without]


def test_targets_pass_at_the_boundaries():
    assert set(_verdicts(_rows()).values()) == {"PASS"}


@pytest.mark.parametrize("changes, failing", [
    ({(BIG, "role"): 10.1}, "(a) the role (ansible-playbook) >= the fastest peer"),
    ({(SMALL, "role"): 10.1}, "(b) the role (ansible-playbook) >= the fastest peer"),
    ({(BIG, "aria2c"): 9.9}, ("(a) engine >= the fastest peer", "(a) the role (ansible-playbook) >= the fastest peer")),
    ({(BIG, "aria2c-sha256"): 9.9}, ("(a) engine >= the fastest peer", "(a) the role (ansible-playbook) >= the fastest peer")),
    ({(BIG, "disk-write"): 7.9}, LIMIT_TARGET),
    ({(SMALL, "curl"): 9.9}, ("(b) engine >= the fastest peer", "(b) the role (ansible-playbook) >= the fastest peer")),
    ({(SMALL, "get_url"): 199.0}, "(b) engine >= 20x the get_url loop"),
    ({(NOOP, "rsync"): 10.0}, "no-op re-run faster than rsync -a --dry-run"),
    ({(NOOP, "engine"): 10.01, (NOOP, "rsync"): 11.0}, "no-op re-run <= 10 s"),
    ({("plan", "engine"): 5.01}, "plan <= 5 s"),
    ({("plan task", "engine"): 5.01}, "the role's whole plan task <= 5 s"),
])
def test_targets_fail_just_past_the_boundaries(changes, failing):
    verdicts = _verdicts(_rows(changes))
    failing = (failing,) if isinstance(failing, str) else failing
    assert sorted(name for name, verdict in verdicts.items() if verdict == "FAIL") == sorted(failing)


def test_the_physical_limit_is_judged_only_from_8_cpus():
    assert _verdicts(_rows({(BIG, "disk-write"): 7.9}), cpus=2)[LIMIT_TARGET] == "n/a"
    assert _verdicts(_rows({(BIG, "disk-write"): 7.9}), cpus=16)[LIMIT_TARGET] == "FAIL"
    evidence = dict((name, text) for name, _verdict, text in staging_bench.evaluate_targets(_rows(), BIG, SMALL, NOOP, cpus=2))
    assert evidence[LIMIT_TARGET] == "engine/disk-write = 0.80 (needs >= 0.8); not judged on 2 CPUs"


def test_targets_without_a_figure_are_not_judged():
    verdicts = _verdicts(_rows(without=("get_url", "rsync")))
    assert verdicts["(b) engine >= 20x the get_url loop"] == "n/a"
    assert verdicts["no-op re-run faster than rsync -a --dry-run"] == "n/a"
    assert verdicts["(b) engine >= the fastest peer"] == "PASS"


def test_check_copy_names_missing_wrong_size_wrong_hash_and_extra_files(tmp_path):
    shards = []
    for number, data in enumerate((b"alpha", b"beta", b"gamma")):
        name = "shard-%d.tar" % number
        (tmp_path / name).write_bytes(data)
        shards.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    (tmp_path / ".journal").write_text("{}")
    assert not check_copy(str(tmp_path), shards)
    (tmp_path / "shard-0.tar").unlink()
    (tmp_path / "shard-1.tar").write_bytes(b"bet")
    (tmp_path / "shard-2.tar").write_bytes(b"GAMMA")
    (tmp_path / "stray.tar").write_bytes(b"")
    problems = check_copy(str(tmp_path), shards)
    assert problems == ["shard-0.tar is missing", "shard-1.tar has 3 bytes, expected 4", "shard-2.tar has the wrong sha256",
                        "1 unexpected files, e.g. stray.tar"]
    assert check_copy(str(tmp_path), shards, hashed="none")[-1] == "1 unexpected files, e.g. stray.tar"
