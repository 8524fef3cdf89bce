# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's files in dest, beside the shards: their names, durable writes (atomic replace, fsync, syncfs), the
directory scan, the journal of staged shards, and the lock that keeps two runs apart."""

import fcntl
import hashlib
import json
import marshal
import os
import re
import stat
import sys
import threading

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_errors import StagingError

JOURNAL_NAME = ".shard_fetch.journal"
LOCK_NAME = ".shard_fetch.lock"
JOURNAL_VERSION = 1
PART_SUFFIX = ".part"
STATE_SUFFIX = ".part.state"
# Forked processes that lstat a large dest in parallel (see DirectoryScan).
SCAN_WORKERS = 4


def write_atomically(path, data):
    """Replace path with data so that a crash leaves either the old or the new content, never a mix."""
    directory = os.path.dirname(path) or "."
    temp = "%s.tmp.%d.%d" % (path, os.getpid(), threading.get_ident())
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        unlink_quietly(temp)
        raise
    os.close(fd)
    os.replace(temp, path)
    fsync_directory(directory)


def fsync_directory(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Filesystems whose syncfs(2) writes back every dirty page and flushes the device, as fsync does per file.
_SYNCFS_FILESYSTEMS = frozenset(("ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs"))
# Before Linux 5.8, syncfs(2) returned 0 even when writing back failed.
_SYNCFS_MIN_KERNEL = (5, 8)


def filesystem_type(path):
    """The type of the filesystem that holds path, from /proc/self/mountinfo (None when it cannot be told)."""
    device = os.stat(path).st_dev
    wanted = "%d:%d" % (os.major(device), os.minor(device))
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                fields = line.split(" - ", 1)
                if len(fields) == 2 and fields[0].split(" ")[2:3] == [wanted]:
                    return fields[1].split(" ", 1)[0]
    except OSError:
        pass
    return None


def kernel_release(release):
    """(major, minor) of a kernel release string such as '6.1.0-18-amd64', or None."""
    match = re.match(r"^(\d+)\.(\d+)", release)
    return (int(match.group(1)), int(match.group(2))) if match else None


def trusted_syncfs(path):
    """A function that makes every write to path's filesystem durable with one syncfs(2), raising OSError on failure;
    or None where that cannot be trusted (not Linux, a kernel before 5.8, an unknown filesystem): fsync each file then."""
    release = kernel_release(os.uname().release) if sys.platform.startswith("linux") else None
    if release is None or release < _SYNCFS_MIN_KERNEL or filesystem_type(path) not in _SYNCFS_FILESYSTEMS:
        return None
    try:
        import ctypes
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (ImportError, OSError, AttributeError):
        return None
    syncfs.argtypes = [ctypes.c_int]
    syncfs.restype = ctypes.c_int

    def call(fd):
        if syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
    return call


def unlink_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def hash_file(path, buffer_size):
    """Return (sha256, size, mtime_ns) of a file, or None when it changed while being read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        before = os.fstat(fd)
        hasher = hashlib.sha256()
        buffer = bytearray(buffer_size)
        view = memoryview(buffer)
        with os.fdopen(os.dup(fd), "rb", buffering=0) as reader:
            while True:
                count = reader.readinto(buffer)
                if not count:
                    break
                hasher.update(view[:count])
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        return None
    return hasher.hexdigest(), after.st_size, after.st_mtime_ns


class DirectoryScan(object):
    """lstat every entry of a directory (but the engine's state files, whose names are all a run needs).

    A re-run over 100,000 staged shards spends most of its time in these lstat calls, and Python threads do not
    speed them up, so long listings are split across forked worker processes (fork only: they run nothing but
    lstat and marshal). They run while the parent loads the journal; collect() joins them. Should a worker fail,
    its share is stat'ed again in this process, so the result never depends on the workers.
    """

    ENTRIES_PER_WORKER = 10000

    def __init__(self, path, workers):
        self.path = path
        self.names, self.states, self.workers = [], set(), []
        if not os.path.isdir(path):
            return
        for name in os.listdir(path):
            if name[:1] == "." and name.endswith(STATE_SUFFIX):
                self.states.add(name[1:-len(STATE_SUFFIX)])
            else:
                self.names.append(name)
        count = min(workers, len(self.names) // self.ENTRIES_PER_WORKER)
        if count > 1:
            for index in range(count):
                self._start_worker(self.names[index::count])

    def _start_worker(self, names):
        try:
            reader, writer = os.pipe()
            pid = os.fork()
        except OSError:
            return
        if pid == 0:
            status = 1
            try:
                # Hold no other worker's pipe open: its worker must see EPIPE should close() drop that pipe.
                for fd in [reader] + [worker[1] for worker in self.workers]:
                    os.close(fd)
                with os.fdopen(writer, "wb") as pipe:
                    pipe.write(marshal.dumps(self._lstat(names)))
                status = 0
            finally:
                os._exit(status)
        os.close(writer)
        self.workers.append((pid, reader, names))

    def _lstat(self, names):
        found = {}
        if not names:
            return found
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in names:
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                found[name] = (stat.S_ISREG(info.st_mode), info.st_size, info.st_mtime_ns)
        finally:
            os.close(fd)
        return found

    def collect(self):
        """-> ({name: (is_regular, size, mtime_ns)} for every entry but state files, names that have a state file)."""
        if not self.workers:
            return self._lstat(self.names), self.states
        found = {}
        for pid, reader, names in self.workers:
            with os.fdopen(reader, "rb") as pipe:
                data = pipe.read()
            status = os.waitpid(pid, 0)[1]
            try:
                part = marshal.loads(data) if status == 0 else None
            except (EOFError, ValueError, TypeError):
                part = None
            found.update(part if isinstance(part, dict) else self._lstat(names))
        self.workers = []
        return found, self.states

    def close(self):
        """Stop workers whose results were not collected (the run failed before it needed them)."""
        for pid, reader, dummy in self.workers:
            os.close(reader)
            os.waitpid(pid, 0)
        self.workers = []


class Journal(object):
    """The node-local record of staged shards: name -> [size, mtime_ns, sha256, validator]."""

    def __init__(self, path, dest):
        self.path = path
        self.dest = dest
        self.entries = {}
        self.dirty = False
        self.warning = None

    @classmethod
    def load(cls, path, dest):
        journal = cls(path, dest)
        try:
            with open(path, "rb") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return journal
        except (OSError, ValueError) as exc:
            journal.warning = "journal %s is unreadable (%s); staged files are re-verified and none is pruned" % (path, exc)
            return journal
        if not isinstance(data, dict) or data.get("version") != JOURNAL_VERSION or not isinstance(data.get("shards"), dict):
            journal.warning = "journal %s has an unknown format; staged files are re-verified and none is pruned" % path
            return journal
        if data.get("dest") != dest:
            raise StagingError("journal %s records the shards of %s, not of %s; give each dest its own journal"
                               % (path, data.get("dest"), dest))
        entries = data["shards"]
        malformed = [name for name, entry in entries.items() if not (isinstance(entry, list) and len(entry) == 4)]
        for name in malformed:
            del entries[name]
        if malformed:
            journal.warning = "journal %s had %d malformed entries (%s...); those files are re-verified" % (path, len(malformed), malformed[0])
        journal.entries = entries
        return journal

    def record(self, name, size, mtime_ns, sha256, validator):
        self.entries[name] = [size, mtime_ns, sha256, validator]
        self.dirty = True

    def forget(self, name):
        if self.entries.pop(name, None) is not None:
            self.dirty = True

    def save(self):
        data = {"version": JOURNAL_VERSION, "dest": self.dest, "shards": self.entries}
        write_atomically(self.path, json.dumps(data, separators=(",", ":")).encode("utf-8"))
        self.dirty = False


class DirectoryLock(object):
    """An exclusive flock on dest so two runs never stage into the same directory at once."""

    def __init__(self, dest):
        self.path = os.path.join(dest, LOCK_NAME)
        self.fd = None

    def acquire(self, if_possible=False):
        """Take the lock, or raise StagingError naming the run that holds it. With if_possible, a dest that does not
        exist yet or refuses the lock file returns False instead (prepare_dest() then explains the problem)."""
        if self.fd is not None:
            return True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            if if_possible:
                return False
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StagingError("%s is locked by another shard_fetch run (%s); wait for it to finish" % (os.path.dirname(self.path), self.path))
        self.fd = fd
        return True

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def nearest_existing(path):
    """path, or its nearest parent that exists (to measure the filesystem a path will be created on)."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path
