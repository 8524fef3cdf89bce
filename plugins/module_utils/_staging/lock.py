# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dest's lock: one staging run at a time, and what a run does when an earlier one is still at work there.

An interrupted play (Ctrl-C, a lost controller) leaves its node-side fetch running as an async job. The next run finds
dest locked and, by ``if_locked``, waits for that fetch to end (``wait``, then goes on from where it left dest), ends it
(``stop``: SIGTERM, then SIGKILL after a grace period; the journal is safe against either) or stops at once (``fail``).
The holder is found in /proc/locks (the lock file is never written: a no-op run changes nothing in dest), and a pid is
only signalled while it holds the lock and its command line names shard_fetch.
"""

import fcntl
import os
import signal
import time

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import LOCK_NAME, UnsafeFileError, open_nofollow

IF_LOCKED = ("wait", "stop", "fail")
STOP_GRACE_SECONDS = 30.0
_POLL_SECONDS = 0.5


class DirectoryLock(object):
    """An exclusive flock on dest so two runs never stage into the same directory at once. After acquire(), ``earlier``
    says what an earlier run's fetch cost this one: None, or {"pid", "waited" (seconds), "stopped" (bool)}."""

    def __init__(self, dest, if_locked="fail", grace=STOP_GRACE_SECONDS, sleep=time.sleep, clock=time.monotonic):
        if if_locked not in IF_LOCKED:
            raise StagingError("if_locked is %r; choose one of %s" % (if_locked, ", ".join(IF_LOCKED)))
        self.path = os.path.join(dest, LOCK_NAME)
        self.if_locked = if_locked
        self.grace = grace
        self.sleep = sleep
        self.clock = clock
        self.fd = None
        self.earlier = None

    def acquire(self, if_possible=False):
        """Take the lock (see the module's description for a lock already held), or raise StagingError naming the run
        that holds it. With if_possible, a dest that does not exist yet or refuses the lock file returns False instead
        (prepare_dest() then explains the problem).

        A symbolic link (or anything but a regular file) at the lock's name raises StagingError naming it, if_possible
        or not: the lock file is never created or opened through a link."""
        if self.fd is not None:
            return True
        try:
            fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT, shown="the lock %s" % self.path)
        except UnsafeFileError as exc:
            raise StagingError("cannot lock %s: %s" % (os.path.dirname(self.path), exc))
        except OSError:
            if if_possible:
                return False
            raise
        try:
            if not _try_lock(fd):
                self._wait_for_holder(fd)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return True

    def _wait_for_holder(self, fd):
        pid = _holder_pid(fd)
        shown = "pid %d" % pid if pid else "its pid unknown"
        if self.if_locked == "fail":
            raise StagingError("%s is locked by another shard_fetch run (%s, %s): wait for it to finish, or let the run wait "
                               "for it (shard_staging_running_fetch: wait) or stop it (stop)"
                               % (os.path.dirname(self.path), self.path, shown))
        started = self.clock()
        stopped = False
        if self.if_locked == "stop" and _is_shard_fetch(pid):
            os.kill(pid, signal.SIGTERM)
            stopped = True
        killed = False
        while not _try_lock(fd):
            if stopped and not killed and self.clock() - started > self.grace and _is_shard_fetch(pid):
                os.kill(pid, signal.SIGKILL)
                killed = True
            self.sleep(_POLL_SECONDS)
        self.earlier = {"pid": pid, "waited": round(self.clock() - started, 1), "stopped": stopped}

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _try_lock(fd):
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder_pid(fd, locks="/proc/locks"):
    """The pid holding the flock on fd's file, as the kernel lists it in /proc/locks
    ("1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF"), or None where it does not say."""
    info = os.fstat(fd)
    where = "%02x:%02x:%d" % (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino)
    try:
        with open(locks) as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where and fields[4].isdigit():
                    return int(fields[4])
    except OSError:
        pass
    return None


def _is_shard_fetch(pid):
    """Whether pid is a live shard_fetch (its command line names it): the only process this module ever signals."""
    if not pid:
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return b"shard_fetch" in handle.read()
    except OSError:
        return False
