# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The staging benchmark: its quick mode end to end over a real nginx, and the pieces that judge its results."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[3] / "benchmarks" / "staging"
sys.path.insert(0, str(BENCH_DIR))

import run as staging_bench  # noqa: E402  pylint: disable=wrong-import-position,import-error
from _dataset import check_copy  # noqa: E402  pylint: disable=wrong-import-position,import-error
from _server import find_command  # noqa: E402  pylint: disable=wrong-import-position,import-error

# Safety nets only: the quick mode took 46 s here (plus ~10 s to install nginx the first time), and up to TBD s beside
# two busy loops on this 2-core machine.
QUICK_TIMEOUT_S = 600
STOP_TIMEOUT_S = 30
BIG, SMALL, NOOP = "(a) big", "(b) small", "no-op"


def _nginx_unavailable():
    if find_command("nginx"):
        return None
    if os.geteuid() == 0 and shutil.which("apt-get"):
        return None
    return "nginx is not installed, and installing it needs root and apt-get"


def _start_bench(*args):
    """The benchmark in a process group of its own, so that whatever it started goes with it if the test must stop it."""
    return subprocess.Popen([sys.executable, str(BENCH_DIR / "run.py"), "--quick", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _stop_group(process):
    """SIGTERM to the benchmark's whole group (the benchmark stops nginx and removes its scratch directory), SIGKILL to
    what is left after STOP_TIMEOUT_S."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return process.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            continue
    return process.communicate()


def _finish_bench(process, timeout):
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = _stop_group(process)
        pytest.fail("the quick benchmark ran past %d s; stopped it and its servers:\n%s%s" % (timeout, out[-3000:], err[-3000:]))
    return process.returncode, out, err


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory):
    reason = _nginx_unavailable()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("staging-bench")
    result_path = work / "quick.json"
    returncode, out, err = _finish_bench(_start_bench("--json", str(result_path), "--workdir", str(work)), QUICK_TIMEOUT_S)
    if returncode == 3:
        pytest.skip("nginx could not be installed or started: %s" % err.strip()[-300:])
    assert returncode == 0, out + err
    assert "Targets (not enforced in quick mode):" in out
    return json.loads(result_path.read_text())


def _engine_rows(result):
    return {row["case"]: row for row in result["rows"] if row["tool"] == "engine"}


def test_quick_mode_engine_fetches_every_shard_verified(quick_result):
    rows = _engine_rows(quick_result)
    fetch_cases = [case for case in rows if case.startswith(("(a)", "(b)"))]
    assert len(fetch_cases) == 2
    for case in fetch_cases:
        row = rows[case]
        # "ok" means the copy was checked after the run: every shard present with its size and sha256.
        assert row["status"] == "ok", row
        assert row["seconds"] > 0
        assert row["details"]["fetched"] == row["files"]
        assert row["details"]["fetched_bytes"] == row["bytes"]


def test_quick_mode_engine_rerun_is_a_noop_and_plan_runs(quick_result):
    rows = _engine_rows(quick_result)
    noop = next(row for case, row in rows.items() if case.startswith("no-op"))
    assert noop["status"] == "ok", noop
    assert noop["details"]["fetched"] == 0
    assert noop["details"]["confirmed"] == noop["files"]
    assert noop["details"]["changed"] is False
    assert rows["plan"]["status"] == "ok"
    assert rows["plan"]["details"]["rerun_moves_nothing"] is True
    assert rows["plan"]["details"]["balance_met"] and rows["plan"]["details"]["churn_met"]


def test_quick_mode_every_tool_that_ran_made_a_whole_copy(quick_result):
    failed = [row for row in quick_result["rows"] if row["status"].startswith("failed")]
    assert not failed
    assert all(row["status"] == "ok" or row["status"].startswith("skipped: ") for row in quick_result["rows"])
    assert len(quick_result["targets"]) == 10


def _alive(pid):
    """Whether pid runs (a zombie that nobody reaped has stopped)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _wait_for(condition, limit_s):
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_or_killed_benchmark_leaves_no_nginx_behind(tmp_path, sig):
    """A timeout or a cancel ends the benchmark with SIGTERM (it cleans up) or SIGKILL (nginx dies with it)."""
    reason = _nginx_unavailable()
    if reason:
        pytest.skip(reason)

    def pid_files():
        return list(tmp_path.glob("staging-bench-*/nginx/nginx.pid"))

    bench = _start_bench("--cases", "big", "--workdir", str(tmp_path))
    try:
        if not _wait_for(lambda: bench.poll() is not None or any(path.read_text().strip() for path in pid_files()), QUICK_TIMEOUT_S):
            pytest.fail("nginx did not start within %d s" % QUICK_TIMEOUT_S)
        if bench.poll() is not None:
            out, err = bench.communicate()
            if bench.returncode == 3:
                pytest.skip("nginx could not be installed or started: %s" % err.strip()[-300:])
            pytest.fail("the benchmark ended before it could be stopped (exit %s): %s%s" % (bench.returncode, out, err))
        nginx = int(pid_files()[0].read_text())
        served = [line.split()[1].rstrip(";") for line in (pid_files()[0].parent / "nginx.conf").read_text().splitlines()
                  if line.split()[:1] == ["root"]]
        assert _alive(nginx) and len(served) == 1 and os.path.isdir(served[0]), served
        os.kill(bench.pid, sig)  # the benchmark alone, not its group
        _out, err = bench.communicate(timeout=STOP_TIMEOUT_S)
        assert _wait_for(lambda: not _alive(nginx), STOP_TIMEOUT_S), "nginx (pid %d) outlived the benchmark" % nginx
        if sig == signal.SIGTERM:
            assert bench.returncode == 130, err
            assert "staging benchmark: interrupted" in err
            assert not list(tmp_path.glob("staging-bench-*")), "the scratch directory is left"
            assert not os.path.exists(served[0]), "nginx's data is left in %s" % served[0]
        else:
            assert bench.returncode == -signal.SIGKILL
    finally:
        if bench.poll() is None:
            _stop_group(bench)
        try:
            os.killpg(bench.pid, signal.SIGKILL)  # whatever of its group is left when the test failed
        except ProcessLookupError:
            pass


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
