# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dest's lock held by another process (an earlier run's fetch): fail naming it, wait for it, or stop it."""
import os
import pathlib
import subprocess
import sys
import threading

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import LOCK_NAME
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.lock import DirectoryLock

COLLECTIONS = pathlib.Path(__file__).resolve().parents[5] / "collections"
# A stand-in for an earlier run's fetch: takes dest's lock as the engine does, says so, and holds it until its stdin
# closes (or it is signalled). Its command line names shard_fetch, as the engine's does.
HOLDER = """# shard_fetch stand-in
import sys
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.lock import DirectoryLock
lock = DirectoryLock(sys.argv[1])
lock.acquire()
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               env=dict(os.environ, PYTHONPATH=str(COLLECTIONS)), text=True)
    assert process.stdout.readline() == "locked\n"
    yield process
    process.kill()
    process.wait()


def test_fail_names_the_lock_the_holders_pid_and_the_variable(tmp_path, holder):
    with pytest.raises(StagingError) as raised:
        DirectoryLock(str(tmp_path)).acquire()
    message = str(raised.value)
    assert message.startswith("%s is locked by another shard_fetch run (%s, pid %d)" % (tmp_path, tmp_path / LOCK_NAME, holder.pid))
    assert "shard_staging_running_fetch: wait" in message


def test_wait_takes_the_lock_once_the_earlier_run_ends_and_says_what_it_cost(tmp_path, holder):
    lock = DirectoryLock(str(tmp_path), "wait")
    taken = threading.Event()
    waiter = threading.Thread(target=lambda: lock.acquire() and taken.set())
    waiter.start()
    # Held for as long as the earlier run holds it, however long that is.
    assert not taken.wait(1.5)
    holder.stdin.close()
    waiter.join(60)
    assert taken.is_set()
    assert lock.earlier["pid"] == holder.pid and lock.earlier["stopped"] is False and lock.earlier["waited"] > 0
    lock.release()


def test_stop_ends_the_earlier_run_and_takes_the_lock(tmp_path, holder):
    lock = DirectoryLock(str(tmp_path), "stop")
    assert lock.acquire()
    assert holder.wait(60) == -15  # SIGTERM
    assert lock.earlier["pid"] == holder.pid and lock.earlier["stopped"] is True
    lock.release()


def test_stop_never_signals_a_process_that_is_not_a_shard_fetch(tmp_path):
    # A process holding the lock whose command line does not name shard_fetch: waited for, never signalled.
    code = HOLDER.replace("# shard_fetch stand-in", "# some other tool")
    process = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               env=dict(os.environ, PYTHONPATH=str(COLLECTIONS)), text=True)
    try:
        assert process.stdout.readline() == "locked\n"
        lock = DirectoryLock(str(tmp_path), "stop", grace=0.0)
        waiter = threading.Thread(target=lock.acquire)
        waiter.start()
        waiter.join(1.5)
        assert waiter.is_alive() and process.poll() is None
        process.stdin.close()
        waiter.join(60)
        assert process.wait(60) == 0 and lock.earlier["stopped"] is False
        lock.release()
    finally:
        process.kill()
        process.wait()


def test_an_unknown_choice_is_refused():
    with pytest.raises(StagingError, match="if_locked is 'later'; choose one of wait, stop, fail"):
        DirectoryLock("/tmp", "later")
