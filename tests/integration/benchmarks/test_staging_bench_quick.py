# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The staging benchmark's quick mode end to end over a real nginx (the pieces that judge its results are
tests/unit/benchmarks/test_staging_bench.py)."""

from __future__ import annotations

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

from _server import find_command  # noqa: E402  pylint: disable=wrong-import-position,import-error

# Safety nets only: the quick mode took 46 s here (plus ~10 s to install nginx the first time), and up to TBD s beside
# two busy loops on this 2-core machine.
QUICK_TIMEOUT_S = 600
STOP_TIMEOUT_S = 30


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
        pytest.fail(reason)  # a test that needs a tool gets it or fails, never skips
    work = tmp_path_factory.mktemp("staging-bench")
    result_path = work / "quick.json"
    returncode, out, err = _finish_bench(_start_bench("--json", str(result_path), "--workdir", str(work)), QUICK_TIMEOUT_S)
    if returncode == 3:
        pytest.fail("nginx could not be installed or started: %s" % err.strip()[-300:])
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
        pytest.fail(reason)  # a test that needs a tool gets it or fails, never skips

    def pid_files():
        return list(tmp_path.glob("staging-bench-*/nginx/nginx.pid"))

    bench = _start_bench("--cases", "big", "--workdir", str(tmp_path))
    try:
        if not _wait_for(lambda: bench.poll() is not None or any(path.read_text().strip() for path in pid_files()), QUICK_TIMEOUT_S):
            pytest.fail("nginx did not start within %d s" % QUICK_TIMEOUT_S)
        if bench.poll() is not None:
            out, err = bench.communicate()
            if bench.returncode == 3:
                pytest.fail("nginx could not be installed or started: %s" % err.strip()[-300:])
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
