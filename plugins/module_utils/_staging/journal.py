# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's files in dest, beside the shards: their names, durable writes (atomic replace, fsync, syncfs), the
directory scan, the journal of staged shards, and the lock that keeps two runs apart.

dest may be writable by others while the engine runs as root, so no file the engine writes (or trusts) in dest is opened
through a symbolic link: open_nofollow() and open_directory() refuse links, and create_temp() makes temporary files under
unpredictable names with O_CREAT|O_EXCL|O_NOFOLLOW."""

import binascii
import contextlib
import errno
import gc
import hashlib
import itertools
import json
import marshal
import os
import re
import stat
import sys

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError

JOURNAL_NAME = ".shard_fetch.journal"
LOCK_NAME = ".shard_fetch.lock"
JOURNAL_VERSION = 2
PART_SUFFIX = ".part"
STATE_SUFFIX = ".part.state"
# Forked processes that lstat a large dest in parallel (see DirectoryScan).
SCAN_WORKERS = 4
# Names create_temp() tries before it gives up (each is 64 random bits: a clash means something is wrong).
_TEMP_ATTEMPTS = 8


@contextlib.contextmanager
def cyclic_gc_paused():
    """Pause Python's cycle collector while 100,000-shard lists, journals and scans are built: they hold no reference
    cycles, and each collection would walk every one of their objects again (it doubled a no-op re-run's CPU time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class UnsafeFileError(OSError):
    """A file the engine would write (or trust) is a symbolic link, not a regular file, or has another hard link.

    It is never opened through the link. str() is the whole message, naming the path and the fix."""

    def __str__(self):
        return "%s" % self.strerror


def _refuse(shown, info):
    if info is not None and stat.S_ISLNK(info.st_mode):
        return UnsafeFileError(errno.ELOOP, "%s is a symbolic link; the engine never writes through a link in dest: remove it "
                                            "(and find out who put it there)" % shown)
    if info is not None and info.st_nlink > 1 and stat.S_ISREG(info.st_mode):
        return UnsafeFileError(errno.EMLINK, "%s has %d hard links; the engine writes only files of its own in dest: remove it"
                               % (shown, info.st_nlink))
    return UnsafeFileError(errno.EINVAL, "%s is not a regular file; move it away" % shown)


def open_nofollow(path, flags, mode=0o644, dir_fd=None, shown=None):
    """os.open(path, flags) that never follows a symbolic link at path and opens only a regular file.

    O_NOFOLLOW and O_CLOEXEC are added to flags. A link at path (ELOOP) raises UnsafeFileError naming ``shown`` (default:
    path), and so does a descriptor that turns out not to be a regular file or, opened for writing, a file with another
    hard link. O_TRUNC is applied only after those checks, so nothing is truncated through a hard link. Other errors
    (FileNotFoundError...) are raised as os.open raises them. With dir_fd, path is relative to that open directory."""
    shown = path if shown is None else shown
    writing = flags & (os.O_WRONLY | os.O_RDWR)
    try:
        fd = os.open(path, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and _is_link(path, dir_fd):
            raise _refuse(shown, os.stat(path, dir_fd=dir_fd, follow_symlinks=False))
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (writing and info.st_nlink > 1):
            raise _refuse(shown, info)
        if flags & os.O_TRUNC and info.st_size:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(path, dir_fd):
    try:
        return stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_directory(path, dir_fd=None, shown=None):
    """Open a directory to work in by descriptor, refusing (UnsafeFileError naming ``shown``) a link or a non-directory at
    path. With dir_fd, path is relative to that open directory."""
    shown = path if shown is None else shown
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if exc.errno == errno.ELOOP and not _is_link(path, dir_fd):
            raise
    if _is_link(path, dir_fd):
        raise _refuse(shown, os.stat(path, dir_fd=dir_fd, follow_symlinks=False))
    raise UnsafeFileError(errno.ENOTDIR, "%s is not a directory; move it away" % shown)


def create_temp(path, mode=0o644, dir_fd=None):
    """Create an empty file beside path, named path.tmp.RANDOM, for writing; return (fd, its name).

    The name cannot be guessed and the file is created with O_CREAT|O_EXCL|O_NOFOLLOW, so whatever someone planted
    beside path (a symbolic link to a file outside dest, say) is never opened: a name that exists is skipped."""
    for _attempt in range(_TEMP_ATTEMPTS):
        temp = "%s.tmp.%s" % (path, _temp_token())
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
        return fd, temp
    raise FileExistsError(errno.EEXIST, "no unused temporary name beside %s in %d tries" % (path, _TEMP_ATTEMPTS))


def _temp_token():
    return binascii.hexlify(os.urandom(8)).decode("ascii")


def write_atomically(path, data, sync=True, dir_fd=None):
    """Replace path with data so that a crash leaves either the old or the new content, never a mix.

    The data goes into a new file from create_temp(), which rename(2) then puts at path: a symbolic link at path is
    replaced, never followed. With sync (the default) the file, then its directory, are fsynced before this returns;
    without, a crash may leave the old content (never a mix). With dir_fd, path is relative to that open directory, so no
    link above it is followed either."""
    fd, temp = create_temp(path, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        unlink_quietly(temp, dir_fd=dir_fd)
        raise
    os.close(fd)
    os.replace(temp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    if not sync:
        return
    if dir_fd is not None:
        os.fsync(dir_fd)
    else:
        fsync_directory(os.path.dirname(path) or ".")


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


def unlink_quietly(path, dir_fd=None):
    try:
        os.unlink(path, dir_fd=dir_fd)
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
    """The node-local record of staged shards: name -> [size, mtime_ns, sha256, validator].

    On disk (version 2) it is one JSON object of columns: names, sizes, mtimes, sha256 and validators, each a list in
    the same order. A million shards parse in a fifth of the time the version 1 layout (an object of four-item lists)
    took, and a re-run that confirms every shard compares the columns without building ``entries`` at all. Version 1
    journals are read, and rewritten as version 2 the next time the journal is saved.

    ``complete_for``: the digest of the shard list (ShardListFile.digest) whose shards are exactly the entries, all
    staged, when the journal was saved; any change to the entries clears it (see stage()'s re-run without the list).
    """

    def __init__(self, path, dest):
        self.path = path
        self.dest = dest
        self._entries = {}
        self._columns = None
        self.complete_for = None
        self.dirty = False
        self.warning = None

    @property
    def entries(self):
        if self._columns is not None:
            with cyclic_gc_paused():
                self._entries = dict(zip(self._columns[0], map(list, zip(*self._columns[1:]))))
            self._columns = None
        return self._entries

    def __len__(self):
        return len(self._columns[0]) if self._columns is not None else len(self._entries)

    def names(self):
        return list(self._columns[0]) if self._columns is not None else list(self._entries)

    def totals(self):
        """(entries, their bytes), from the columns while they are unparsed (no entries built)."""
        if self._columns is not None:
            return len(self._columns[0]), sum(self._columns[1])
        return len(self._entries), sum(entry[0] for entry in self._entries.values())

    def matches(self, files):
        """Whether every entry's file is in files (a DirectoryScan result) as a regular file of the recorded size and
        mtime. One comparison of two lists in C: a Python loop over a million entries took three times as long."""
        if self._columns is not None:
            names, sizes, mtimes = self._columns[:3]
        else:
            names, values = list(self._entries), self._entries.values()
            sizes, mtimes = [entry[0] for entry in values], [entry[1] for entry in values]
        return [*map(files.get, names)] == [*zip(itertools.repeat(True), sizes, mtimes)]

    @classmethod
    def load(cls, path, dest):
        """Read the journal at path. A symbolic link (or anything but a regular file) there raises StagingError naming
        it, before the run changes anything: what the journal lists decides what a prune removes."""
        journal = cls(path, dest)
        try:
            fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK, shown="the journal %s" % path)
            with os.fdopen(fd, "rb") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return journal
        except UnsafeFileError as exc:
            raise StagingError(str(exc))
        except (OSError, ValueError) as exc:
            journal.warning = "journal %s is unreadable (%s); staged files are re-verified and none is pruned" % (path, exc)
            return journal
        version = data.get("version") if isinstance(data, dict) else None
        if version == JOURNAL_VERSION:
            columns = _journal_columns(data)
        elif version == 1 and isinstance(data.get("shards"), dict):
            columns = ()
        else:
            columns = None
        if columns is None:
            journal.warning = "journal %s has an unknown format; staged files are re-verified and none is pruned" % path
            return journal
        if data.get("dest") != dest:
            raise StagingError("journal %s records the shards of %s, not of %s; give each dest its own journal"
                               % (path, data.get("dest"), dest))
        if columns:
            journal._columns = columns
        else:
            journal._entries = _version1_entries(journal, data["shards"])
        if journal.warning is None and isinstance(data.get("complete_for"), str):
            journal.complete_for = data["complete_for"]
        return journal

    def record(self, name, size, mtime_ns, sha256, validator):
        self.entries[name] = [size, mtime_ns, sha256, validator]
        self.complete_for = None
        self.dirty = True

    def forget(self, name):
        if self.entries.pop(name, None) is not None:
            self.complete_for = None
            self.dirty = True

    def mark_complete(self, digest):
        """Record that the entries are exactly the shards of the list with this digest, all staged (None: they are not)."""
        if digest != self.complete_for:
            self.complete_for = digest
            self.dirty = True

    def save(self):
        entries = self.entries
        values = entries.values()
        data = {"version": JOURNAL_VERSION, "dest": self.dest, "names": list(entries)}
        for index, column in enumerate(_JOURNAL_COLUMNS[1:]):
            data[column] = [entry[index] for entry in values]
        if self.complete_for is not None:
            data["complete_for"] = self.complete_for
        write_atomically(self.path, json.dumps(data, separators=(",", ":")).encode("utf-8"))
        self.dirty = False


_JOURNAL_COLUMNS = ("names", "sizes", "mtimes", "sha256", "validators")


def _journal_columns(data):
    """The columns of a version 2 journal, or None where they are not lists of one length with string names.

    Names are not checked for repeats (a set of a million names costs more than the rest of a re-run's checks): save()
    writes the keys of a dict, and a repeated name only makes entries hold the later one."""
    columns = tuple(data.get(column) for column in _JOURNAL_COLUMNS)
    if not all(isinstance(column, list) for column in columns) or len(set(map(len, columns))) != 1:
        return None
    if not set(map(type, columns[0])) <= {str}:
        return None
    return columns


def _version1_entries(journal, shards):
    malformed = [name for name, entry in shards.items() if not (isinstance(entry, list) and len(entry) == 4)]
    for name in malformed:
        del shards[name]
    if malformed:
        journal.warning = "journal %s had %d malformed entries (%s...); those files are re-verified" % (journal.path, len(malformed), malformed[0])
    return shards


def nearest_existing(path):
    """path, or its nearest parent that exists (to measure the filesystem a path will be created on)."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path
