# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stage a node's dataset shards into a local directory, atomically and resumably.

``stage(shards, dest, ...)`` is the whole engine; the ``shard_fetch`` module and benchmarks call it.
A shard appears under its final name only after it is complete, verified and durable; until then it
lives in ``.NAME.part`` beside a ``.NAME.part.state`` file that records how much of it is durable and
which source version (validator) it came from, so a later run can resume it with an HTTP Range request.
Small shards are made durable in groups (group commit): workers verify and close their part files, and
the coordinating thread makes a whole batch durable with one syncfs(2) before renaming any of them; large
shards, and filesystems or kernels where syncfs cannot be trusted, get one fsync per shard instead.
A journal in ``dest`` remembers every staged shard (size, mtime_ns, sha256, validator) so a re-run
confirms them from one directory scan, and so pruning only ever removes files this engine staged.

Run without Ansible: ``python -m <this module> CONFIG.json`` where CONFIG holds stage()'s keyword
arguments plus ``shards`` or ``shards_file``; the result is printed as JSON.
"""

import collections
import contextlib
import heapq
import errno
import fcntl
import gc
import hashlib
import itertools
import json
import marshal
import os
import random
import re
import socket
import ssl
import stat
import sys
import threading
import time
from urllib.parse import unquote, urljoin, urlsplit

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_peer import (
    RETRY_SECONDS, PeerServer, PeerSources, shard_path)

JOURNAL_NAME = ".shard_fetch.journal"
LOCK_NAME = ".shard_fetch.lock"
JOURNAL_VERSION = 1
PART_SUFFIX = ".part"
STATE_SUFFIX = ".part.state"
MIB = 1 << 20
# Forked processes that lstat a large dest in parallel (see _DirectoryScan).
SCAN_WORKERS = 4
MAX_NAME_BYTES = 255 - len("." + STATE_SUFFIX)
VERIFY_CHOICES = ("quick", "full")
_URL_PREFIXES = ("http://", "https://", "file://")
_SHARD_KEYS = frozenset(("name", "url", "size", "sha256"))

_SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
_CONTENT_RANGE_RE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)\Z")
_REQUEST_TARGET_RE = re.compile(r"^[\x21-\x7e]+\Z")
_REDIRECTS = (301, 302, 303, 307, 308)
_MAX_REDIRECTS = 5
_RETRYABLE_4XX = (408, 425, 429)
# A wrong checksum is retried once (the bytes may have been damaged in flight); a second one is the source's.
_MISMATCH_ATTEMPTS = 2
# copy_file_range cannot serve this pair of files; copy through user space instead.
_NO_COPY_RANGE = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.ETXTBSY)
_LOCAL_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
_USER_AGENT = "dlinfra.gpu_cluster-shard_fetch/1"


class StagingError(Exception):
    """Raised before anything is changed: bad input, unusable dest, too little space, dest locked."""


class _TransientError(Exception):
    """Worth retrying after a backoff: 5xx, connection trouble, a truncated body."""


class _PermanentError(Exception):
    """Retrying cannot help: 4xx, a missing source file, too many redirects."""


class _ChecksumError(Exception):
    """The bytes received are not the shard that was asked for (size or sha256)."""


class _LocalError(Exception):
    """Writing to dest failed (disk full, I/O error); retrying the source cannot help."""


class Shard(object):
    __slots__ = ("name", "url", "size", "sha256")

    def __init__(self, name, url, size=None, sha256=None):
        self.name = name
        self.url = url
        self.size = size
        self.sha256 = sha256


# ---------------------------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _cyclic_gc_paused():
    """Pause Python's cycle collector while 100,000-shard lists, journals and scans are built: they hold no reference
    cycles, and each collection would walk every one of their objects again (it doubled a no-op re-run's CPU time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load_json(path, option):
    try:
        with open(path, "rb") as handle, _cyclic_gc_paused():
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise StagingError("cannot read %s %s: %s" % (option, path, exc))


def load_shards_file(path):
    """Read a shard list from a JSON file: a list of shard objects, or an object with a "shards" list."""
    data = _load_json(path, "shards_file")
    if isinstance(data, dict):
        data = data.get("shards")
    if not isinstance(data, list):
        raise StagingError("shards_file %s must hold a JSON list of shards or an object with a 'shards' list" % path)
    return data


def load_peer_file(path):
    """Read a peer-assisted run's settings (see stage()'s ``peer``) from a JSON object."""
    data = _load_json(path, "peer_file")
    if not isinstance(data, dict):
        raise StagingError("peer_file %s must hold a JSON object" % path)
    return data


def _name_problem(name):
    if not isinstance(name, str) or not name:
        return "name must be a non-empty string"
    if "/" in name or "\0" in name:
        return "name must be a plain file name without '/'"
    if name.startswith("."):
        return "name must not start with '.' (hidden names are the engine's own partial and journal files)"
    if len(name) * 4 > MAX_NAME_BYTES and len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return "name is longer than %d bytes" % MAX_NAME_BYTES
    return None


def _shard_problems(index, raw):
    """Return (problems, Shard or None) for one raw shard mapping."""
    if not isinstance(raw, dict):
        return ["shard #%d is not a mapping" % index], None
    # This runs for each of up to 100,000 shards on every run, so plain string tests and no urlsplit.
    name, url, size, sha256 = raw.get("name"), raw.get("url"), raw.get("size"), raw.get("sha256")
    if isinstance(sha256, str):
        sha256 = sha256.lower()
    problems = []
    name_problem = _name_problem(name)
    if name_problem:
        problems.append(name_problem)
    if not isinstance(url, str) or not url.startswith(_URL_PREFIXES):
        problems.append("url must be an http://, https:// or file:// URL, got %r" % (url,))
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        problems.append("size must be a non-negative integer, got %r" % (size,))
    if sha256 is not None and (not isinstance(sha256, str) or not _SHA256_RE.match(sha256)):
        problems.append("sha256 must be 64 hex digits, got %r" % (raw.get("sha256"),))
    if len(raw) > 2 and not _SHARD_KEYS.issuperset(raw):
        problems.append("unknown keys %s" % ", ".join(sorted(str(key) for key in set(raw) - _SHARD_KEYS)))
    if problems:
        return ["shard #%d (%s): %s" % (index, name, problem) for problem in problems], None
    return problems, Shard(name, url, size, sha256)


def _shards_if_all_valid(raw_shards):
    """The Shard objects when every shard passes _shard_problems and no name repeats, else None.

    A re-run validates up to 100,000 shards before confirming them, so this checks the list column by column
    in C-level passes. It never rejects anything itself: on None, normalize_shards() checks shard by shard
    and names the problems.
    """
    if not raw_shards:
        return []
    if set(map(type, raw_shards)) != {dict} or max(map(len, raw_shards)) > 4 or not all(map(_SHARD_KEYS.issuperset, raw_shards)):
        return None
    names, urls, sizes, digests = ([*map(dict.get, raw_shards, itertools.repeat(key))] for key in ("name", "url", "size", "sha256"))
    if set(map(type, names)) != {str} or len(set(names)) != len(names) or max(map(len, names)) * 4 > MAX_NAME_BYTES:
        return None
    # Joined with NUL, which no valid name contains: an empty or hidden name shows as a NUL pair, NUL-dot or NUL at an end.
    joined = "\0".join(names)
    if (joined.count("\0") != len(names) - 1 or "/" in joined or "\0\0" in joined or "\0." in joined
            or joined.startswith((".", "\0")) or joined.endswith("\0") or not names[0]):
        return None
    if set(map(type, urls)) != {str} or not all(map(str.startswith, urls, itertools.repeat(_URL_PREFIXES))):
        return None
    if not set(map(type, sizes)) <= {int, type(None)} or min([size for size in sizes if size is not None], default=0) < 0:
        return None
    given = [digest for digest in digests if digest is not None]
    if given and (set(map(type, given)) != {str} or set(map(len, given)) != {64} or not _lower_hex("".join(given))):
        return None
    return [*map(Shard, names, urls, sizes, digests)]


def _lower_hex(text):
    try:
        return not text.encode("ascii").translate(None, b"0123456789abcdef")
    except UnicodeEncodeError:
        return False


def normalize_shards(raw_shards, max_problems=20):
    """Validate a list of shard mappings and return Shard objects; raise StagingError listing the problems."""
    if not isinstance(raw_shards, list):
        raise StagingError("shards must be a list of {name, url, size, sha256} mappings")
    shards = _shards_if_all_valid(raw_shards)
    if shards is not None:
        return shards
    problems = []
    shards = []
    seen = set()
    for index, raw in enumerate(raw_shards):
        shard_problems, shard = _shard_problems(index, raw)
        problems.extend(shard_problems)
        if shard is None:
            continue
        if shard.name in seen:
            problems.append("shard #%d (%s): duplicate name" % (index, shard.name))
        seen.add(shard.name)
        shards.append(shard)
    if problems:
        more = len(problems) - max_problems
        listed = "; ".join(problems[:max_problems]) + ("; and %d more" % more if more > 0 else "")
        raise StagingError("invalid shard list: %s" % listed)
    return shards


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

def _write_atomically(path, data):
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
        _unlink_quietly(temp)
        raise
    os.close(fd)
    os.replace(temp, path)
    _fsync_directory(directory)


def _fsync_directory(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Filesystems whose syncfs(2) writes back every dirty page and flushes the device, as fsync does per file.
_SYNCFS_FILESYSTEMS = frozenset(("ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs"))
# Before Linux 5.8, syncfs(2) returned 0 even when writing back failed.
_SYNCFS_MIN_KERNEL = (5, 8)


def _filesystem_type(path):
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


def _kernel_release(release):
    """(major, minor) of a kernel release string such as '6.1.0-18-amd64', or None."""
    match = re.match(r"^(\d+)\.(\d+)", release)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _trusted_syncfs(path):
    """A function that makes every write to path's filesystem durable with one syncfs(2), raising OSError on failure;
    or None where that cannot be trusted (not Linux, a kernel before 5.8, an unknown filesystem): fsync each file then."""
    release = _kernel_release(os.uname().release) if sys.platform.startswith("linux") else None
    if release is None or release < _SYNCFS_MIN_KERNEL or _filesystem_type(path) not in _SYNCFS_FILESYSTEMS:
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


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _hash_file(path, buffer_size):
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


class _DirectoryScan(object):
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
        _write_atomically(self.path, json.dumps(data, separators=(",", ":")).encode("utf-8"))
        self.dirty = False


class _DirectoryLock(object):
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


# ---------------------------------------------------------------------------------------------
# Transfer
# ---------------------------------------------------------------------------------------------

class _Partial(object):
    """The hidden .NAME.part file of one shard and the .state file that makes it resumable.

    The state file is written only after an fsync of the part file, and records the offset up to
    which the part is durable, so a resume after a crash never trusts bytes that were not on disk.
    """

    def __init__(self, dest, shard, checkpoint_bytes, has_state):
        self.shard = shard
        # What the received bytes must hash to: the shard's sha256, else (from a peer) what the peer staged.
        self.expected_sha256 = shard.sha256
        self.path = os.path.join(dest, "." + shard.name + PART_SUFFIX)
        self.state_path = os.path.join(dest, "." + shard.name + STATE_SUFFIX)
        self.final_path = os.path.join(dest, shard.name)
        self.checkpoint_bytes = checkpoint_bytes
        self.fd = None
        self.hasher = None
        self.offset = 0
        self.durable = 0
        self.validator = None
        self.total = None
        self.resumed_from = 0
        self.received = 0
        # Whether a state file may exist: saves a failing open and two failing unlinks per shard.
        self.has_state = has_state

    def resume_offset(self, buffer_size):
        """The offset to continue from: this process's progress, else the durable part a previous run left."""
        if self.fd is not None:
            return self.offset if self.validator else 0
        state = self._read_state() if self.has_state else None
        if not state:
            return 0
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise _LocalError("cannot open %s: %s" % (self.path, exc.strerror))
        self.fd = fd
        try:
            if os.fstat(fd).st_size < state["durable"]:
                self.reset()
                return 0
            os.ftruncate(fd, state["durable"])
            self.hasher = hashlib.sha256()
            buffer = bytearray(buffer_size)
            view = memoryview(buffer)
            remaining = state["durable"]
            os.lseek(fd, 0, os.SEEK_SET)
            while remaining:
                count = os.readv(fd, [view[:min(remaining, buffer_size)]])
                if not count:
                    raise _LocalError("%s shrank while being read" % self.path)
                self.hasher.update(view[:count])
                remaining -= count
        except OSError as exc:
            raise _LocalError("cannot read %s: %s" % (self.path, exc.strerror))
        self.offset = self.durable = state["durable"]
        self.validator = state["validator"]
        self.total = state["size"]
        self.resumed_from = self.offset
        return self.offset

    def _read_state(self):
        try:
            with open(self.state_path, "rb") as handle:
                state = json.load(handle)
        except (OSError, ValueError):
            return None
        usable = (isinstance(state, dict) and state.get("url") == self.shard.url and state.get("validator")
                  and isinstance(state.get("durable"), int) and state["durable"] > 0
                  and (self.shard.size is None or state.get("size") == self.shard.size))
        return state if usable else None

    def restart(self, validator, total):
        """Empty the part file to receive the shard from its first byte."""
        try:
            self._drop_state()
            if self.fd is None:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            else:
                os.ftruncate(self.fd, 0)
                os.lseek(self.fd, 0, os.SEEK_SET)
        except OSError as exc:
            raise _LocalError("cannot create %s: %s" % (self.path, exc.strerror))
        self.hasher = hashlib.sha256()
        self.offset = self.durable = self.resumed_from = 0
        self.validator = validator
        self.total = total

    def reset(self):
        """Forget the content received so far; the next attempt starts from zero."""
        self.restart(None, None)

    def write(self, view):
        self.hasher.update(view)
        length = len(view)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:
            raise _LocalError("cannot write %s: %s" % (self.path, exc.strerror))
        self.offset += length
        self.received += length
        # A complete shard is committed next (fsync, rename); a checkpoint now would only fsync it twice.
        if self.offset - self.durable >= self.checkpoint_bytes and (self.total is None or self.offset < self.total):
            self.checkpoint()

    def note_copied(self, count):
        """Account for bytes the kernel copied into the part file; they are hashed from disk on commit."""
        self.offset += count
        self.received += count
        self.hasher = None

    def checkpoint(self):
        """Make what was received durable and record it, so a crash after this point can resume here."""
        if self.fd is None or not self.validator or self.offset <= self.durable:
            return
        try:
            os.fsync(self.fd)
            state = {"url": self.shard.url, "validator": self.validator, "size": self.total, "durable": self.offset}
            temp = self.state_path + ".tmp"
            with open(temp, "w") as handle:
                json.dump(state, handle)
            os.replace(temp, self.state_path)
            self.has_state = True
        except OSError as exc:
            raise _LocalError("cannot record progress of %s: %s" % (self.path, exc.strerror))
        self.durable = self.offset

    def _drop_state(self):
        if self.has_state:
            _unlink_quietly(self.state_path)
            self.has_state = False

    def complete(self, sync):
        """Check size and sha256 and close the part file, fsyncing it first when `sync`; return (size, mtime_ns, sha256).

        Without `sync` the part is not yet durable: the caller must make it so (group commit) before publish().
        """
        shard = self.shard
        if shard.size is not None and self.offset != shard.size:
            raise _ChecksumError("received %d bytes, expected %d" % (self.offset, shard.size))
        digest = self.hasher.hexdigest() if self.hasher is not None else self._hash_from_disk()
        if self.expected_sha256 is not None and digest != self.expected_sha256:
            raise _ChecksumError("sha256 is %s, expected %s" % (digest, self.expected_sha256))
        try:
            if sync:
                os.fsync(self.fd)
            info = os.fstat(self.fd)
            os.close(self.fd)
            self.fd = None
        except OSError as exc:
            raise _LocalError("cannot finish %s: %s" % (self.path, exc.strerror))
        return info.st_size, info.st_mtime_ns, digest

    def publish(self):
        """Rename the complete, verified and durable part file to its final name.

        The directory is fsynced after this and before the journal lists the shard: a rename lost in a crash
        leaves a whole shard the journal does not know, which a re-run confirms by its hash or fetches again.
        """
        try:
            self._drop_state()
            os.replace(self.path, self.final_path)
        except OSError as exc:
            raise _LocalError("cannot finish %s: %s" % (self.final_path, exc.strerror))

    def _hash_from_disk(self):
        hasher = hashlib.sha256()
        position = 0
        try:
            while True:
                data = os.pread(self.fd, 4 * MIB, position)
                if not data:
                    return hasher.hexdigest()
                hasher.update(data)
                position += len(data)
        except OSError as exc:
            raise _LocalError("cannot read back %s: %s" % (self.path, exc.strerror))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def discard(self):
        self.close()
        _unlink_quietly(self.path)
        _unlink_quietly(self.state_path)


def _describe(exc):
    if isinstance(exc, _TransientError):
        return str(exc)
    if isinstance(exc, TimeoutError) or type(exc).__name__ == "timeout":
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return "%s: %s" % (type(exc).__name__, exc) if str(exc) else type(exc).__name__


def _validator_of(response):
    """The response's strong ETag, else its Last-Modified: what If-Range may name."""
    etag = response.getheader("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return response.getheader("Last-Modified")


def _content_length(response):
    value = response.getheader("Content-Length")
    return int(value) if value and value.isdigit() else None


class _RateLimiter(object):
    """Paces every worker together to one byte rate by handing out consecutive time slots."""

    def __init__(self, rate):
        self.rate = float(rate)
        self.lock = threading.Lock()
        self.next_slot = time.monotonic()

    def chunk_size(self, buffer_size):
        return max(16 * 1024, min(buffer_size, int(self.rate / 20)))

    def wait(self, nbytes):
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next_slot)
            self.next_slot = start + nbytes / self.rate
        if start > now:
            time.sleep(start - now)


class _Disconnected(ConnectionError):
    """The server closed the connection before the status line: a reused keep-alive connection may simply have
    timed out at the server, so the request is worth sending again on a fresh one."""


class _Response(object):
    """One HTTP/1.1 response: status, headers, and its body read with readinto() (Content-Length, chunked, or up to
    the connection's close)."""

    def __init__(self, conn, status, reason, headers, will_close, length, chunked):
        self.conn = conn
        self.status = status
        self.reason = reason
        self.headers = headers
        self.will_close = will_close
        self.length = length          # body bytes still to come when Content-Length is known
        self.chunked = chunked
        self.chunk_left = 0           # bytes left in the current chunk
        self.done = length == 0

    def getheader(self, name):
        return self.headers.get(name.lower())

    def isclosed(self):
        """Whether the whole body has been read (the connection can then serve the next request)."""
        return self.done

    def readinto(self, view):
        """Read body bytes into view; 0 at the body's end, or when the server closed the connection early."""
        if self.done or not len(view):
            return 0
        if self.chunked:
            return self._read_chunked(view)
        if self.length is not None:
            view = view[:self.length]
        count = self.conn.readinto(view)
        if not count:
            # Early close: a Content-Length body is now short (the caller sees that), any other body is complete.
            self.will_close = True
            self.done = self.length is None
            return 0
        if self.length is not None:
            self.length -= count
            self.done = not self.length
        return count

    def _read_chunked(self, view):
        if not self.chunk_left:
            line = self.conn.readline()
            size = line.split(b";", 1)[0].strip()
            if not size or size.strip(b"0123456789abcdefABCDEF"):
                raise _TransientError("malformed chunk size %r in the response" % line[:40])
            self.chunk_left = int(size, 16)
            if not self.chunk_left:
                while self.conn.readline() not in (b"\r\n", b"\n"):  # trailer fields, up to the empty line
                    pass
                self.done = True
                return 0
        count = self.conn.readinto(view[:self.chunk_left])
        if not count:
            raise _TransientError("the connection closed inside a chunked body")
        self.chunk_left -= count
        if not self.chunk_left and self.conn.readline() not in (b"\r\n", b"\n"):
            raise _TransientError("a chunk of the response is not followed by CRLF")
        return count

    def read(self, limit):
        """Up to limit bytes of the body (for draining a short redirect body)."""
        buffer = bytearray(limit)
        view = memoryview(buffer)
        filled = 0
        while filled < limit:
            count = self.readinto(view[filled:])
            if not count:
                break
            filled += count
        return bytes(buffer[:filled])


class _HttpConnection(object):
    """One keep-alive HTTP/1.1 connection that sends GETs and parses their responses.

    http.client parses every response's headers with the email package and wraps the socket in new file objects
    per response: that costs more CPU than the rest of a small shard's transfer. This is the part of HTTP/1.1 that
    fetching a file needs, over a plain (or TLS) socket.
    """

    MAX_HEAD = 64 * 1024
    RECEIVE = 64 * 1024

    def __init__(self, scheme, host, port, timeout, ssl_context):
        self.scheme = scheme
        self.host = host
        self.port = port
        self.timeout = timeout
        self.ssl_context = ssl_context
        name = "[%s]" % host if ":" in host else host
        self.host_header = name if port == (443 if scheme == "https" else 80) else "%s:%d" % (name, port)
        self.sock = None
        self.pending = b""            # received bytes not handed out yet

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.pending = b""

    def request(self, target, headers):
        if self.sock is None:
            sock = socket.create_connection((self.host, self.port), self.timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.scheme == "https":
                    sock = self.ssl_context().wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
            self.sock = sock
        lines = ["GET %s HTTP/1.1" % target, "Host: " + self.host_header]
        lines.extend("%s: %s" % item for item in headers.items())
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def getresponse(self):
        while True:
            head = self._read_head()
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (len(parts[1]) == 3 and parts[1].isdigit()):
                raise _TransientError("malformed status line %r" % lines[0][:80])
            status = int(parts[1])
            if 100 <= status < 200:
                continue  # an interim response (100 Continue): the real one follows
            headers = {}
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                if not colon:
                    raise _TransientError("malformed header line %r" % line[:80])
                name = name.strip().lower()
                value = value.strip()
                headers[name] = headers[name] + ", " + value if name in headers else value
            return self._response(status, parts[2] if len(parts) > 2 else "", parts[0], headers)

    def _response(self, status, reason, version, headers):
        connection = headers.get("connection", "").lower()
        will_close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = None
        if status in (204, 304):
            length = 0
        elif not chunked and "content-length" in headers:
            value = headers["content-length"].split(",")[0].strip()
            if not value.isdigit():
                raise _TransientError("malformed Content-Length %r" % headers["content-length"][:40])
            length = int(value)
        elif not chunked:
            will_close = True  # the body ends where the connection does
        return _Response(self, status, reason, headers, will_close, length, chunked)

    def _read_head(self):
        data = self.pending
        start = 0
        while True:
            end = data.find(b"\r\n\r\n", start)
            if end >= 0:
                self.pending = data[end + 4:]
                return data[:end]
            if len(data) > self.MAX_HEAD:
                raise _TransientError("the response head is longer than %d bytes" % self.MAX_HEAD)
            start = max(0, len(data) - 3)
            chunk = self.sock.recv(self.RECEIVE)
            if not chunk:
                if data:
                    raise _TransientError("the connection closed inside the response head")
                raise _Disconnected(errno.ECONNRESET, "the server closed the connection without a response")
            data = data + chunk if data else chunk

    def readinto(self, view):
        """Body bytes: what was received with the head first, then straight from the socket into view."""
        pending = self.pending
        if pending:
            count = min(len(view), len(pending))
            view[:count] = pending[:count]
            self.pending = pending[count:]
            return count
        return self.sock.recv_into(view)

    def readline(self):
        """One CRLF-terminated line (chunk sizes, trailers), at most 8 KiB."""
        data = self.pending
        while True:
            end = data.find(b"\n")
            if end >= 0:
                self.pending = data[end + 1:]
                return data[:end + 1]
            if len(data) > 8192:
                raise _TransientError("a line of the response is longer than 8 KiB")
            chunk = self.sock.recv(self.RECEIVE)
            if not chunk:
                raise _TransientError("the connection closed inside the response")
            data += chunk


class _Connections(object):
    """One worker's keep-alive HTTP/1.1 connections, one per origin."""

    def __init__(self, timeout, ssl_context):
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.open = {}

    def get(self, origin):
        conn = self.open.get(origin)
        if conn is not None:
            return conn, True
        conn = self.open[origin] = _HttpConnection(origin[0], origin[1], origin[2], self.timeout, self.ssl_context)
        return conn, False

    def drop(self, origin):
        conn = self.open.pop(origin, None)
        if conn is not None:
            conn.close()

    def release(self, origin, response):
        """Keep the connection for the next shard only when its response was read to the end."""
        if response.will_close or not response.isclosed():
            self.drop(origin)

    def close(self):
        for origin in list(self.open):
            self.drop(origin)


class _Outcome(object):
    __slots__ = ("kind", "shard", "size", "mtime_ns", "sha256", "validator", "reason", "received",
                 "resumed", "hashed", "repaired", "forget", "part", "peer")

    def __init__(self, kind, shard, received=0):
        self.kind = kind
        self.shard = shard
        self.received = received
        # A fetched shard whose part file still has to be made durable and published (group commit).
        self.part = None
        # The peer it came from; None: from its source.
        self.peer = None
        self.size = self.mtime_ns = self.sha256 = self.validator = self.reason = None
        self.resumed = self.hashed = self.repaired = self.forget = False


_RESTART = object()


class _Transfer(object):
    """The settings of one run and the code that brings one shard into dest."""

    def __init__(self, dest, retries, timeout, backoff, backoff_max, bandwidth_limit, buffer_size, checkpoint_bytes, check_mode):
        self.dest = dest
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.limiter = _RateLimiter(bandwidth_limit) if bandwidth_limit else None
        self.buffer_size = buffer_size
        self.checkpoint_bytes = checkpoint_bytes
        self.check_mode = check_mode
        # Shards of up to this many bytes are left to the run's group commit; -1: every shard is fsynced alone.
        self.group_commit_bytes = -1
        # Names whose .part.state file the scan found (only these can be resumed).
        self.states = frozenset()
        # PeerSources when other nodes of the run hand this one some of its shards; None: everything from the sources.
        self.peers = None
        self._local = threading.local()
        self._ssl_lock = threading.Lock()
        self._ssl = None

    def ssl_context(self):
        with self._ssl_lock:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            return self._ssl

    def _buffer(self):
        buffer = getattr(self._local, "buffer", None)
        if buffer is None:
            buffer = self._local.buffer = memoryview(bytearray(self.buffer_size))
        return buffer

    # -- one shard ------------------------------------------------------------------------------

    def process(self, shard, expected_sha256, conns):
        """Confirm an existing file by its hash when expected_sha256 is given, else (or when that fails) fetch."""
        repaired = False
        if expected_sha256 is not None:
            found = self._hash_existing(shard)
            if found is not None and found[0] == expected_sha256:
                outcome = _Outcome("confirmed", shard)
                outcome.sha256, outcome.size, outcome.mtime_ns = found
                outcome.hashed = True
                return outcome
            repaired = True
        if self.check_mode:
            outcome = _Outcome("would_fetch", shard)
        else:
            outcome = self._fetch(shard)
            if outcome.kind == "failed" and repaired:
                outcome.reason = "the staged copy does not match its sha256 and refetching failed: %s" % outcome.reason
        outcome.hashed = outcome.repaired = repaired
        return outcome

    def _hash_existing(self, shard):
        try:
            return _hash_file(os.path.join(self.dest, shard.name), self.buffer_size)
        except OSError:
            return None

    def _fetch(self, shard):
        part = _Partial(self.dest, shard, self.checkpoint_bytes, shard.name in self.states)
        is_file = shard.url.startswith("file://")
        attempt = mismatches = 0
        try:
            source = self.peers.peer_for(shard.name) if self.peers is not None else None
            if source is not None:
                try:
                    outcome = self._from_peer(shard, part, *source)
                except _LocalError as exc:
                    return self._give_up(shard, part, str(exc))
                if outcome is not None:
                    return outcome
            while True:
                try:
                    if is_file:
                        self._copy_file(shard, part)
                    else:
                        self._download(shard, part)
                    return self._finish(shard, part)
                except (_PermanentError, _LocalError) as exc:
                    return self._give_up(shard, part, str(exc))
                except _ChecksumError as exc:
                    part.discard()
                    mismatches += 1
                    reason = str(exc)
                    if mismatches >= _MISMATCH_ATTEMPTS:
                        return self._give_up(shard, part, "%s (on %d attempts)" % (reason, mismatches))
                except (_TransientError, OSError) as exc:
                    reason = _describe(exc)
                attempt += 1
                if attempt > self.retries:
                    return self._give_up(shard, part, "%s (after %d attempts)" % (reason, attempt))
                time.sleep(min(self.backoff_max, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0))
        finally:
            part.close()

    def _finish(self, shard, part):
        resumed = part.resumed_from > 0
        outcome = _Outcome("fetched", shard, part.received)
        grouped = part.offset <= self.group_commit_bytes
        outcome.size, outcome.mtime_ns, outcome.sha256 = part.complete(sync=not grouped)
        if grouped:
            outcome.part = part
        else:
            part.publish()
        outcome.validator = part.validator
        outcome.resumed = resumed
        return outcome

    def _give_up(self, shard, part, reason):
        """Keep what was received (durably) for a later resume, and report the shard as failed."""
        try:
            part.checkpoint()
        except _LocalError:
            pass
        return self._failure(shard, reason, part.received)

    @staticmethod
    def _failure(shard, reason, received=0):
        outcome = _Outcome("failed", shard, received)
        outcome.reason = reason
        return outcome

    # -- from a peer -------------------------------------------------------------------------------

    def _from_peer(self, shard, part, peer, base):
        """The outcome of asking a peer for the shard: fetched, or deferred (the peer does not have it yet); None when
        it must come from its source instead (the peer will not have it, went silent, or sent bad bytes)."""
        before = part.received
        try:
            return self._ask_peer(shard, part, peer, base)
        finally:
            self.peers.count(peer, part.received - before)

    def _ask_peer(self, shard, part, peer, base):
        peers = self.peers
        conns = self._local.conns
        url = base + shard_path(shard.name)
        try:
            response, origin = self._open(url, dict(peers.headers(), **{"User-Agent": _USER_AGENT, "Accept-Encoding": "identity"}),
                                          conns)
        except (_TransientError, _PermanentError, OSError) as exc:
            if peers.unreachable(peer, _describe(exc)) and peers.may_wait(shard.name):
                return _Outcome("deferred", shard)
            return None
        peers.answered(peer)
        status = response.status
        if status != 200:
            try:
                response.read(64 * 1024)
                conns.release(origin, response)
            except (_TransientError, OSError):
                conns.drop(origin)
            if status == 503 and peers.may_wait(shard.name):
                return _Outcome("deferred", shard)
            if status == 401:
                peers.give_up(peer, "it refused this run's token")
            return None
        try:
            part.restart(_validator_of(response), _content_length(response))
            part.expected_sha256 = shard.sha256 or response.getheader("X-Shard-Sha256")
            if shard.size is not None and part.total != shard.size:
                raise _ChecksumError("it has %s bytes, expected %d" % (part.total, shard.size))
            self._receive(response, part, part.total)
            outcome = self._finish(shard, part)
        except _ChecksumError as exc:
            conns.drop(origin)
            part.discard()
            peers.sent_bad_data(peer, shard.name, str(exc))
            return None
        except (_TransientError, OSError) as exc:
            conns.drop(origin)
            part.reset()
            if peers.unreachable(peer, _describe(exc)) and peers.may_wait(shard.name):
                return _Outcome("deferred", shard)
            return None
        conns.release(origin, response)
        outcome.peer = peer
        return outcome

    # -- HTTP ------------------------------------------------------------------------------------

    def _download(self, shard, part):
        conns = self._local.conns
        offset = part.resume_offset(self.buffer_size)
        part.expected_sha256 = shard.sha256
        while True:
            headers = {"User-Agent": _USER_AGENT, "Accept-Encoding": "identity"}
            if offset:
                headers["Range"] = "bytes=%d-" % offset
                headers["If-Range"] = part.validator
            response, origin = self._open(shard.url, headers, conns)
            try:
                total = self._accept(response, part, offset)
                if total is _RESTART:
                    conns.drop(origin)
                    part.reset()
                    offset = 0
                    continue
                if shard.size is not None and total is not None and total != shard.size:
                    raise _ChecksumError("the source has %d bytes, expected %d" % (total, shard.size))
                self._receive(response, part, total)
            except BaseException:
                conns.drop(origin)
                raise
            conns.release(origin, response)
            return

    @staticmethod
    def _accept(response, part, offset):
        """Set part up for the response's body; return the shard's full size (None if unknown) or _RESTART."""
        status = response.status
        if status == 206 and offset:
            match = _CONTENT_RANGE_RE.match(response.getheader("Content-Range") or "")
            same_source = (match and int(match.group(1)) == offset and _validator_of(response) == part.validator
                           and (part.total is None or int(match.group(3)) == part.total))
            if not same_source:
                return _RESTART
            part.total = int(match.group(3))
            return part.total
        if status == 200:
            part.restart(_validator_of(response), _content_length(response))
            return part.total
        if status == 416 and offset:
            return _RESTART
        if status in _RETRYABLE_4XX or status >= 500:
            raise _TransientError("HTTP %d %s" % (status, response.reason))
        raise _PermanentError("HTTP %d %s" % (status, response.reason))

    def _receive(self, response, part, total):
        buffer = self._buffer()
        chunk = self.limiter.chunk_size(len(buffer)) if self.limiter else len(buffer)
        ceiling = part.shard.size
        while True:
            want = chunk if total is None else min(chunk, total - part.offset)
            if want <= 0:
                break
            if self.limiter:
                self.limiter.wait(want)
            # Fill the buffer before writing: a small shard's body then costs one write and one hash update, not one
            # for the bytes that came with the response head and another for the rest.
            filled = 0
            while filled < want:
                count = response.readinto(buffer[filled:want])
                if not count:
                    break
                filled += count
            if not filled:
                break
            part.write(buffer[:filled])
            if ceiling is not None and part.offset > ceiling:
                raise _ChecksumError("the source sent more than the expected %d bytes" % ceiling)
        if total is not None and part.offset < total:
            raise _TransientError("body truncated after %d of %d bytes" % (part.offset, total))

    def _open(self, url, headers, conns):
        """Send a GET, following redirects; return (response, origin) with the body unread."""
        redirects = 0
        while True:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https"):
                raise _PermanentError("redirected to %s, which is not an http(s) URL" % url)
            try:
                origin = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
            except ValueError as exc:
                raise _PermanentError("bad URL %s: %s" % (url, exc))
            target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
            if not parts.hostname or not _REQUEST_TARGET_RE.match(target):
                raise _PermanentError("cannot request %s: it needs a host, and a path of printable ASCII without spaces "
                                      "(percent-encode other characters)" % url)
            response = self._send(conns, origin, target, headers)
            location = response.getheader("Location")
            if response.status not in _REDIRECTS or not location:
                return response, origin
            response.read(64 * 1024)
            conns.release(origin, response)
            redirects += 1
            if redirects > _MAX_REDIRECTS:
                raise _PermanentError("more than %d redirects" % _MAX_REDIRECTS)
            url = urljoin(url, location)

    @staticmethod
    def _send(conns, origin, target, headers):
        while True:
            conn, reused = conns.get(origin)
            try:
                conn.request(target, headers)
                return conn.getresponse()
            except (_Disconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as exc:
                conns.drop(origin)
                if not reused:
                    raise _TransientError(_describe(exc))
                # The server closed an idle keep-alive connection: go again on a fresh one.
            except _TransientError:
                conns.drop(origin)
                raise
            except OSError as exc:
                conns.drop(origin)
                raise _TransientError(_describe(exc))

    # -- file:// ---------------------------------------------------------------------------------

    def _copy_file(self, shard, part):
        source = unquote(urlsplit(shard.url).path)
        try:
            src = os.open(source, os.O_RDONLY)
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as exc:
            raise _PermanentError("cannot open %s: %s" % (source, exc.strerror))
        except OSError as exc:
            raise _TransientError("cannot open %s: %s" % (source, exc.strerror))
        try:
            info = os.fstat(src)
            if not stat.S_ISREG(info.st_mode):
                raise _PermanentError("%s is not a regular file" % source)
            if shard.size is not None and info.st_size != shard.size:
                raise _ChecksumError("the source has %d bytes, expected %d" % (info.st_size, shard.size))
            part.checkpoint_bytes = float("inf")  # a local copy restarts rather than resumes
            part.restart("%d-%d" % (info.st_size, info.st_mtime_ns), info.st_size)
            self._copy_range(src, part, info.st_size)
        finally:
            os.close(src)
        if part.offset < info.st_size:
            raise _TransientError("%s ended after %d of %d bytes" % (source, part.offset, info.st_size))

    def _copy_range(self, src, part, size):
        use_kernel = hasattr(os, "copy_file_range")
        buffer = self._buffer()
        while part.offset < size:
            want = min(size - part.offset, self.limiter.chunk_size(len(buffer)) if self.limiter else 64 * MIB)
            if self.limiter:
                self.limiter.wait(want)
            if use_kernel:
                try:
                    count = os.copy_file_range(src, part.fd, want)
                except OSError as exc:
                    if exc.errno in _NO_COPY_RANGE:
                        use_kernel = False
                        continue
                    if exc.errno in _LOCAL_FULL:
                        raise _LocalError("cannot write %s: %s" % (part.path, exc.strerror))
                    raise _TransientError("copying from the source failed: %s" % exc.strerror)
                part.note_copied(count)
            else:
                want = min(want, len(buffer))
                count = os.readv(src, [buffer[:want]])
                if count:
                    part.write(buffer[:count])
            if not count:
                return


class _TaskQueue(object):
    """The run's shards to process, in order, in two lines: those from their sources and those from peers. A shard a
    peer does not have yet comes back after RETRY_SECONDS.

    Peer-assisted, a few workers (``source_workers``) take the source line first and the others the peer line: the
    shards this node seeds then arrive one after another, each ready for the peers early, instead of all of them
    together at the end of the source's share, which would leave the links between the nodes idle until then.
    """

    def __init__(self, tasks, from_peer=None):
        self.ready = collections.deque(task for task in tasks if from_peer is None or not from_peer(task[0]))
        self.peer_ready = collections.deque(task for task in tasks if from_peer is not None and from_peer(task[0]))
        self.later = []
        self.order = itertools.count()
        self.changed = threading.Condition()

    def get(self, source_first=True):
        """The next task, waiting for a deferred one when only those are left of the worker's line; None when there is
        nothing left."""
        with self.changed:
            while True:
                while self.later and self.later[0][0] <= time.monotonic():
                    self.peer_ready.append(heapq.heappop(self.later)[2])
                if source_first and self.ready:
                    return self.ready.popleft()
                if self.peer_ready:
                    return self.peer_ready.popleft()
                if self.ready and not self.later:
                    return self.ready.popleft()
                if not self.later:
                    return None
                self.changed.wait(self.later[0][0] - time.monotonic())

    def defer(self, task):
        with self.changed:
            heapq.heappush(self.later, (time.monotonic() + RETRY_SECONDS, next(self.order), task))
            self.changed.notify()


class _GroupCommit(object):
    """Fetched small shards waiting to be made durable together: one syncfs(2) for the batch, then their renames;
    then they are handed back for the journal, whose every save fsyncs the directory first.

    Crash points: before the syncfs or before a rename, a shard is still a hidden part file, which a re-run
    fetches again; after its rename it is whole and durable under its final name but not yet journaled, so a
    re-run confirms it by its sha256 (or fetches it again when there is none). Nothing is ever visible under
    its final name before it is durable, and nothing is journaled before its rename is.
    """

    # Commit early when this much is waiting, so one syncfs never has to write back an unbounded amount.
    MAX_PENDING_BYTES = 256 * MIB

    def __init__(self, dest, syncfs, interval):
        self.syncfs = syncfs
        self.interval = interval
        self.pending = []
        self.pending_bytes = 0
        self.deadline = None
        # Opened before any shard is written: syncfs through it reports writeback errors since this point.
        self.fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)

    def close(self):
        os.close(self.fd)

    def add(self, outcome):
        if not self.pending:
            self.deadline = time.monotonic() + self.interval
        self.pending.append(outcome)
        self.pending_bytes += outcome.size

    def seconds_left(self):
        return max(0.0, self.deadline - time.monotonic()) if self.pending else None

    def due(self, finished):
        return bool(self.pending) and (finished or self.pending_bytes >= self.MAX_PENDING_BYTES or time.monotonic() >= self.deadline)

    def commit(self):
        """Make the pending shards durable and publish them; return their outcomes (failures for those that could not be)."""
        batch, self.pending, self.pending_bytes = self.pending, [], 0
        try:
            self.syncfs(self.fd)
        except OSError as exc:
            for outcome in batch:
                outcome.part.discard()
            return [self._failed(outcome, "cannot make %s durable (syncfs): %s" % (outcome.part.path, _describe(exc))) for outcome in batch]
        results = []
        for outcome in batch:
            try:
                outcome.part.publish()
                outcome.part = None
                results.append(outcome)
            except _LocalError as exc:
                outcome.part.discard()
                results.append(self._failed(outcome, str(exc)))
        return results

    @staticmethod
    def _failed(outcome, reason):
        failure = _Transfer._failure(outcome.shard, reason, outcome.received)
        failure.hashed, failure.repaired = outcome.hashed, outcome.repaired
        return failure


# ---------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------

def _human(nbytes):
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return "%.1f %s" % (value, unit) if unit != "B" else "%d B" % nbytes
        value /= 1024
    return "%d B" % nbytes


def nearest_existing(path):
    """path, or its nearest parent that exists (to measure the filesystem a path will be created on)."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _check_settings(concurrency, retries, timeout, bandwidth_limit, verify, backoff, journal_interval, checkpoint_bytes, buffer_size,
                    group_commit_bytes, commit_interval):
    problems = []
    if not isinstance(concurrency, int) or not 1 <= concurrency <= 256:
        problems.append("concurrency must be between 1 and 256, got %r" % (concurrency,))
    if not isinstance(retries, int) or retries < 0:
        problems.append("retries must be 0 or more, got %r" % (retries,))
    if not timeout or timeout <= 0:
        problems.append("timeout must be a positive number of seconds, got %r" % (timeout,))
    if bandwidth_limit is not None and bandwidth_limit <= 0:
        problems.append("bandwidth_limit must be a positive number of bytes per second (or unset), got %r" % (bandwidth_limit,))
    if verify not in VERIFY_CHOICES:
        problems.append("verify must be one of %s, got %r" % (", ".join(VERIFY_CHOICES), verify))
    if backoff < 0 or journal_interval <= 0 or checkpoint_bytes <= 0 or buffer_size < 4096:
        problems.append("backoff must be >= 0, journal_interval and checkpoint_bytes > 0, buffer_size >= 4096")
    if not isinstance(group_commit_bytes, int) or group_commit_bytes < 0 or not commit_interval or commit_interval <= 0:
        problems.append("group_commit_bytes must be >= 0 (0: fsync every shard alone) and commit_interval > 0, got %r and %r"
                        % (group_commit_bytes, commit_interval))
    if problems:
        raise StagingError("; ".join(problems))


class _Run(object):
    """The state of one stage() call: plan, transfers, journal updates, prune and the result."""

    def __init__(self, shards, dest, journal_path, settings):
        self.shards = shards
        self.dest = dest
        self.journal_path = journal_path
        self.settings = settings
        self.check_mode = settings["check_mode"]
        self.report_limit = settings["report_limit"]
        self.journal = None
        self.counts = dict(fetched=0, fetched_bytes=0, resumed=0, confirmed=0, verified=0, repaired=0, removed=0, removed_bytes=0,
                           from_peers=0)
        self.fetched_names = []
        self.removed_names = []
        self.failed = []
        self.errors = []
        self.warnings = []
        self.fetch_seconds = 0.0
        self.transfer = _Transfer(dest, settings["retries"], settings["timeout"], settings["backoff"], settings["backoff_max"],
                                  settings["bandwidth_limit"], settings["buffer_size"], settings["checkpoint_bytes"], self.check_mode)
        # Peer-assisted staging (see shard_peer): the server hands this node's staged shards to the other nodes.
        self.server = None

    # -- preparation -----------------------------------------------------------------------------

    def prepare_dest(self):
        """Create dest and prove it writable, or (check mode) say whether that would work."""
        dest = self.dest
        if os.path.exists(dest) and not os.path.isdir(dest):
            raise StagingError("dest %s exists and is not a directory; choose another dest or remove it" % dest)
        if self.check_mode:
            anchor = nearest_existing(dest)
            if not os.path.isdir(anchor) or not os.access(anchor, os.W_OK | os.X_OK):
                raise StagingError("dest %s is not writable (checked %s); fix its permissions or choose another dest" % (dest, anchor))
            if anchor != dest:
                self.warnings.append("dest %s does not exist and would be created" % dest)
            return
        try:
            os.makedirs(dest, exist_ok=True)
            probe = os.path.join(dest, ".shard_fetch.probe.%d" % os.getpid())
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            os.unlink(probe)
        except OSError as exc:
            raise StagingError("dest %s is not writable: %s; fix its permissions or choose another dest" % (dest, exc.strerror or exc))

    def load_journal(self):
        real_dest = os.path.realpath(self.dest)
        self.journal = Journal.load(self.journal_path, real_dest)
        if self.journal.warning:
            self.warnings.append(self.journal.warning)

    @staticmethod
    def partial_sizes(files):
        """The sizes of the engine's partial files (.NAME.part) in a dest scan, by shard name."""
        return {name[1:-len(PART_SUFFIX)]: found[1] for name, found in files.items() if name[:1] == "." and name.endswith(PART_SUFFIX)}

    def plan(self, files, verify):
        """Sort the shards into confirmed, tasks (shard, sha256 to check first or None) and failures."""
        tasks = []
        entries = self.journal.entries
        for shard in self.shards:
            found = files.get(shard.name)
            if found is None:
                tasks.append((shard, None))
                continue
            regular, size, mtime_ns = found
            if not regular:
                self._record_failure(shard, "%s exists and is not a regular file; move it away" % os.path.join(self.dest, shard.name))
                continue
            entry = entries.get(shard.name)
            staged = entry is not None and entry[0] == size and entry[1] == mtime_ns
            if staged and shard.sha256 is not None and shard.sha256 != entry[2]:
                tasks.append((shard, None))
            elif shard.size is not None and shard.size != size:
                tasks.append((shard, None))
            elif staged and verify == "quick":
                self.counts["confirmed"] += 1
                if self.server is not None:
                    self.server.publish(shard.name, size, mtime_ns, entry[2])
            elif staged:
                tasks.append((shard, shard.sha256 or entry[2]))
            elif shard.sha256 is not None:
                tasks.append((shard, shard.sha256))
            else:
                tasks.append((shard, None))
        return tasks

    def check_space(self, tasks, partials):
        needed = unknown = count = 0
        for shard, expected in tasks:
            if expected is not None:
                continue
            count += 1
            if shard.size is None:
                unknown += 1
            else:
                needed += max(0, shard.size - partials.get(shard.name, 0))
        anchor = nearest_existing(self.dest)
        info = os.statvfs(anchor)
        free = info.f_bavail * info.f_frsize
        if needed > free:
            raise StagingError(
                "not enough free space for %s: %d shards need %d bytes (%s) but only %d bytes (%s) are free on its filesystem; "
                "short by %d bytes (%s). Free space there or assign fewer shards to this node"
                % (self.dest, count, needed, _human(needed), free, _human(free), needed - free, _human(needed - free)))
        if unknown:
            self.warnings.append("%d shards have no size; the free-space check could not count them" % unknown)
        return needed

    # -- transfers -------------------------------------------------------------------------------

    def execute(self, tasks):
        """Run the tasks on worker threads; apply outcomes and save the journal periodically from this thread."""
        if self.check_mode:
            for shard, expected in tasks:
                if expected is None:
                    self._apply(_Outcome("would_fetch", shard))
            tasks = [task for task in tasks if task[1] is not None]
        if not tasks:
            return
        started = time.monotonic()
        group = self._group_commit()
        try:
            self._run_workers(tasks, group)
        finally:
            if group is not None:
                group.close()
                self.transfer.group_commit_bytes = -1
        self.fetch_seconds = time.monotonic() - started

    def _group_commit(self):
        """A _GroupCommit for this run's small shards, or None: every shard is then fsynced on its own."""
        if self.check_mode or not self.settings["group_commit_bytes"]:
            return None
        syncfs = _trusted_syncfs(self.dest)
        if syncfs is None:
            return None
        group = _GroupCommit(self.dest, syncfs, self.settings["commit_interval"])
        self.transfer.group_commit_bytes = self.settings["group_commit_bytes"]
        return group

    def _run_workers(self, tasks, group):
        # Outcomes go into a deque that this thread drains once per tick (the group commit interval) instead of
        # waking for each of them: with thousands of small shards a wake-up per shard cost more than the shard.
        peers = self.transfer.peers
        todo = _TaskQueue(tasks, None if peers is None else lambda shard: peers.peer_for(shard.name) is not None)
        done, wake = collections.deque(), threading.Event()
        count = min(self.settings["concurrency"], len(tasks))
        source_workers = count if peers is None else max(1, count // 4)
        workers = [threading.Thread(target=self._work, args=(todo, done, wake, index < source_workers), name="shard-fetch-%d" % index,
                                    daemon=True)
                   for index in range(count)]
        for worker in workers:
            worker.start()
        interval = self.settings["journal_interval"]
        tick = self.settings["commit_interval"]
        next_save = time.monotonic() + interval
        remaining = len(tasks)
        while remaining or (group is not None and group.pending):
            if remaining:
                left = group.seconds_left() if group is not None and group.pending else None
                wake.wait(tick if left is None else min(tick, left))
                wake.clear()
            while done:
                outcome = done.popleft()
                remaining -= 1
                if outcome.part is not None:
                    group.add(outcome)
                else:
                    self._apply(outcome)
            if group is not None and group.due(finished=not remaining):
                for committed in group.commit():
                    self._apply(committed)
            if not self.check_mode and self.journal.dirty and time.monotonic() >= next_save:
                self._save_journal(during_run=True)
                next_save = time.monotonic() + interval
        for worker in workers:
            worker.join()

    def _work(self, todo, done, wake, source_first):
        transfer = self.transfer
        conns = transfer._local.conns = _Connections(self.settings["timeout"], transfer.ssl_context)
        try:
            while True:
                task = todo.get(source_first)
                if task is None:
                    return
                shard, expected = task
                try:
                    outcome = transfer.process(shard, expected, conns)
                except Exception as exc:  # pylint: disable=broad-except
                    # A bug must cost one shard, not hang the run waiting for its outcome.
                    outcome = transfer._failure(shard, "internal error: %r" % exc)
                if outcome.kind == "deferred":
                    todo.defer(task)
                else:
                    done.append(outcome)
        finally:
            conns.close()
            wake.set()

    def _apply(self, outcome):
        counts = self.counts
        shard = outcome.shard
        counts["fetched_bytes"] += outcome.received
        if outcome.hashed:
            counts["verified"] += 1
        if outcome.kind == "confirmed":
            counts["confirmed"] += 1
            previous = self.journal.entries.get(shard.name)
            validator = previous[3] if previous and len(previous) > 3 else None
            self.journal.record(shard.name, outcome.size, outcome.mtime_ns, outcome.sha256, validator)
            if self.server is not None:
                self.server.publish(shard.name, outcome.size, outcome.mtime_ns, outcome.sha256)
        elif outcome.kind in ("fetched", "would_fetch"):
            counts["fetched"] += 1
            counts["resumed"] += int(outcome.resumed)
            counts["repaired"] += int(outcome.repaired)
            if outcome.kind == "would_fetch":
                counts["fetched_bytes"] += shard.size or 0
            else:
                self.journal.record(shard.name, outcome.size, outcome.mtime_ns, outcome.sha256, outcome.validator)
                if self.server is not None:
                    self.server.publish(shard.name, outcome.size, outcome.mtime_ns, outcome.sha256)
            if outcome.peer is not None:
                counts["from_peers"] += 1
            if len(self.fetched_names) < self.report_limit:
                self.fetched_names.append(shard.name)
        else:
            reason = outcome.reason
            if outcome.repaired and self._withdraw_corrupt(shard):
                reason += "; the corrupt staged copy was removed"
            self._record_failure(shard, reason)
            if self.server is not None:
                self.server.fail(shard.name)

    def _withdraw_corrupt(self, shard):
        """Remove a staged shard that failed verification and could not be replaced, so no reader uses it."""
        entry = self.journal.entries.get(shard.name)
        path = os.path.join(self.dest, shard.name)
        try:
            info = os.lstat(path)
            if entry is None or (info.st_size, info.st_mtime_ns) != tuple(entry[:2]):
                return False
            os.unlink(path)
        except OSError:
            return False
        self.journal.forget(shard.name)
        return True

    def _record_failure(self, shard, reason):
        self.failed.append({"name": shard.name, "url": shard.url, "reason": reason})

    def _save_journal(self, during_run=False):
        try:
            _fsync_directory(self.dest)
            self.journal.save()
        except OSError as exc:
            message = "cannot write the journal %s: %s" % (self.journal_path, exc.strerror or exc)
            if during_run:
                if message not in self.warnings:
                    self.warnings.append(message + " (retried at the end of the run)")
            else:
                self.errors.append(message + "; the next run re-verifies what this one staged")

    # -- prune -----------------------------------------------------------------------------------

    def prune(self, partials, states):
        """Remove staged shards that are no longer assigned, and the engine's leftovers for them."""
        assigned = set(shard.name for shard in self.shards)
        for name in [name for name in self.journal.entries if name not in assigned]:
            size, mtime_ns = self.journal.entries[name][:2]
            path = os.path.join(self.dest, name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                self.journal.forget(name)
                continue
            except OSError as exc:
                self.errors.append("cannot inspect %s for pruning: %s" % (path, exc.strerror))
                continue
            if not stat.S_ISREG(info.st_mode) or (info.st_size, info.st_mtime_ns) != (size, mtime_ns):
                self.warnings.append("kept %s: it changed after it was staged, so it is no longer the engine's to remove" % path)
                self.journal.forget(name)
                continue
            if not self.check_mode:
                try:
                    os.unlink(path)
                except OSError as exc:
                    self.errors.append("cannot remove %s: %s" % (path, exc.strerror))
                    continue
                self.journal.forget(name)
            self.counts["removed"] += 1
            self.counts["removed_bytes"] += size
            if len(self.removed_names) < self.report_limit:
                self.removed_names.append(name)
        # A partial is the engine's own when its state file exists (written at the first checkpoint).
        if not self.check_mode:
            for name in states:
                if name not in assigned:
                    _unlink_quietly(os.path.join(self.dest, "." + name + PART_SUFFIX))
                    _unlink_quietly(os.path.join(self.dest, "." + name + STATE_SUFFIX))
            _fsync_directory(self.dest)

    # -- result ----------------------------------------------------------------------------------

    def result(self, started):
        elapsed = time.monotonic() - started
        counts = self.counts
        throughput = counts["fetched_bytes"] / self.fetch_seconds if self.fetch_seconds and not self.check_mode else 0.0
        result = dict(counts)
        result.update(
            changed=bool(counts["fetched"] or counts["removed"]),
            total=len(self.shards),
            failed_shards=self.failed,
            errors=self.errors,
            fetched_names=self.fetched_names,
            removed_names=self.removed_names,
            elapsed=round(elapsed, 3),
            throughput=round(throughput, 1),
            dest=self.dest,
            journal=self.journal_path,
            warnings=self.warnings,
        )
        peers = self.transfer.peers
        if peers is not None or self.server is not None:
            peer_bytes = sum(peers.from_peers.values()) if peers is not None else 0
            result["peers"] = dict(
                source_bytes=counts["fetched_bytes"] - peer_bytes,
                peer_bytes=peer_bytes,
                from_peers=dict(peers.from_peers) if peers is not None else {},
                bad_data=list(peers.bad) if peers is not None else [],
                given_up=dict(peers.given_up) if peers is not None else {},
                served_bytes=0,
                not_done=[],
            )
        return result


def stage(shards, dest, concurrency=8, retries=5, timeout=60.0, bandwidth_limit=None, verify="quick", prune=False,
          journal=None, check_mode=False, backoff=1.0, backoff_max=60.0, journal_interval=10.0,
          checkpoint_bytes=64 * MIB, buffer_size=MIB, report_limit=20, group_commit_bytes=8 * MIB, commit_interval=0.2, peer=None):
    """Bring dest in line with shards (a list of {name, url, size, sha256} mappings) and return a result dict.

    Raises StagingError, before anything is changed, for invalid input, an unusable dest, too little free
    space or a concurrent run. Per-shard failures do not raise: they are listed in result["failed_shards"]
    and the other shards are still staged; prune then does nothing. check_mode only reads (and hashes
    where verification is due) and reports what a real run would do. Shards of up to group_commit_bytes are made
    durable in batches (at most commit_interval seconds apart) with one syncfs(2) each where that can be trusted.

    ``peer`` (peer-assisted staging, see shard_peer and _peer_settings) lets this node take some shards from the other
    nodes of the run and serve its own to them; it is ignored in check mode.
    """
    started = time.monotonic()
    _check_settings(concurrency, retries, timeout, bandwidth_limit, verify, backoff, journal_interval, checkpoint_bytes, buffer_size,
                    group_commit_bytes, commit_interval)
    dest = os.path.abspath(dest)
    journal_path = os.path.abspath(journal) if journal else os.path.join(dest, JOURNAL_NAME)
    settings = dict(concurrency=concurrency, retries=retries, timeout=timeout, bandwidth_limit=bandwidth_limit,
                    check_mode=check_mode, backoff=backoff, backoff_max=backoff_max, journal_interval=journal_interval,
                    checkpoint_bytes=checkpoint_bytes, buffer_size=buffer_size, report_limit=report_limit,
                    group_commit_bytes=group_commit_bytes, commit_interval=commit_interval)
    lock = None if check_mode else _DirectoryLock(dest)
    scan = None
    try:
        # Where dest already exists, its scan starts first (under the lock) so its workers overlap the validation.
        if check_mode or lock.acquire(if_possible=True):
            scan = _DirectoryScan(dest, min(os.cpu_count() or 1, SCAN_WORKERS))
        with _cyclic_gc_paused():
            shards = normalize_shards(shards)
        run = _Run(shards, dest, journal_path, settings)
        if peer is not None and not check_mode:
            _set_up_peers(run, _peer_settings(peer))
        run.prepare_dest()
        if scan is None:
            lock.acquire()
            scan = _DirectoryScan(dest, 1)
        return _stage_locked(run, scan, verify, prune, started)
    finally:
        if scan is not None:
            scan.close()
        if lock is not None:
            lock.release()


_PEER_KEYS = {"node": str, "address": str, "port": int, "token": str, "peers": dict, "sources": dict, "downstream": list,
              "wait": (int, float), "linger": (int, float)}


def _peer_settings(peer):
    if not isinstance(peer, dict) or set(peer) - set(_PEER_KEYS):
        raise StagingError("peer must be a mapping of %s" % ", ".join(sorted(_PEER_KEYS)))
    settings = dict(address="", port=0, peers={}, sources={}, downstream=[], wait=120.0, linger=60.0)
    settings.update(peer)
    for key, kind in _PEER_KEYS.items():
        if key not in settings or isinstance(settings[key], bool) or not isinstance(settings[key], kind):
            raise StagingError("peer %s must be given as %s" % (key, getattr(kind, "__name__", "a number")))
    if len(settings["token"]) < 16:
        raise StagingError("peer token must have at least 16 characters")
    if settings["downstream"] and not (settings["address"] and 0 < settings["port"] < 65536):
        raise StagingError("node %s serves peers but has no address and port to listen on" % settings["node"])
    unknown = sorted(set(settings["sources"].values()) - set(settings["peers"]))
    if unknown:
        raise StagingError("peer sources name %s, which are not among the peers %s" % (", ".join(unknown), ", ".join(sorted(settings["peers"]))))
    if settings["wait"] < 0 or settings["linger"] < 0:
        raise StagingError("peer wait and linger must not be negative")
    return settings


def _set_up_peers(run, settings):
    token = settings["token"]
    if settings["sources"]:
        run.transfer.peers = PeerSources(token, settings["peers"], settings["sources"], settings["wait"], settings["node"],
                                         settings["linger"])
    if settings["downstream"]:
        run.server = PeerServer(run.dest, settings["address"], settings["port"], token, [shard.name for shard in run.shards],
                                settings["downstream"], settings["linger"])


def _stage_locked(run, scan, verify, prune, started):
    result = None
    try:
        result = _stage_serving(run, scan, verify, prune, started)
        return result
    finally:
        # The nodes this one took shards from are told it is done, so they stop serving as soon as nobody needs them.
        if run.transfer.peers is not None:
            run.transfer.peers.tell_done(run.settings["timeout"], run.transfer.peers.linger)
        server = run.server
        if server is not None and server.serving:
            server.close_pending()
            try:
                not_done = server.wait_for_downstream()
            finally:
                server.stop()
            if result is not None:
                result["peers"].update(served_bytes=server.served_bytes, not_done=not_done)


def _stage_serving(run, scan, verify, prune, started):
    with _cyclic_gc_paused():
        run.load_journal()
        files, states = scan.collect()
        partials = run.partial_sizes(files)
        run.transfer.states = frozenset(states)
        tasks = run.plan(files, verify)
    run.check_space(tasks, partials)
    if run.server is not None:
        try:
            run.server.start()
        except OSError as exc:
            run.server = None
            raise StagingError("%s; free that port or set another (shard_staging_peer_port)" % exc.strerror)
    run.execute(tasks)
    if prune and (run.failed or run.errors):
        run.warnings.append("prune skipped: %d shards failed, so nothing unassigned was removed" % len(run.failed))
    elif prune:
        run.prune(partials, states)
    if run.journal.dirty and not run.check_mode:
        run._save_journal()
    return run.result(started)


# ---------------------------------------------------------------------------------------------
# Hand-off to training
# ---------------------------------------------------------------------------------------------

HANDOFF_LIST = "shards.txt"
HANDOFF_SOURCES = "sources.txt"
HANDOFF_RANKS = "ranks"


def _rank_file(rank):
    return os.path.join(HANDOFF_RANKS, "rank-%04d.txt" % rank)


def write_handoff(dest, shards, ranks, check_mode=False, streamed=()):
    """Write the lists a training job reads: shards.txt (what to read: local paths, and the URLs of the ``streamed``
    shards, which stay at their source), sources.txt (every shard's URL) and ranks/rank-NNNN.txt (disjoint round-robin
    parts of shards.txt, one per rank), in the order given (merged by name with ``streamed``). Returns the files it changed (would change, in check
    mode). Rank files beyond ``ranks`` are removed."""
    if ranks < 1:
        raise StagingError("ranks is %d; give 1 or more training ranks per node" % ranks)
    dest = os.path.abspath(dest)
    entries = [(shard["name"], os.path.join(dest, shard["name"]), shard["url"]) for shard in shards]
    if streamed:
        entries = sorted(entries + [(shard["name"], shard["url"], shard["url"]) for shard in streamed])
    paths = [read for _name, read, _url in entries]
    wanted = {HANDOFF_LIST: paths, HANDOFF_SOURCES: [url for _name, _read, url in entries]}
    for rank in range(ranks):
        wanted[_rank_file(rank)] = paths[rank::ranks]
    changed = []
    for relative, lines in sorted(wanted.items()):
        path = os.path.join(dest, relative)
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        try:
            with open(path, "rb") as handle:
                if handle.read() == data:
                    continue
        except OSError:
            pass
        changed.append(relative)
        if not check_mode:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_atomically(path, data)
    ranks_dir = os.path.join(dest, HANDOFF_RANKS)
    stale = sorted(entry for entry in (os.listdir(ranks_dir) if os.path.isdir(ranks_dir) else [])
                   if os.path.join(HANDOFF_RANKS, entry) not in wanted and re.match(r"^rank-\d{4,}\.txt$", entry))
    for entry in stale:
        changed.append(os.path.join(HANDOFF_RANKS, entry))
        if not check_mode:
            os.unlink(os.path.join(ranks_dir, entry))
    return changed


def _main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: python -m %s CONFIG.json (stage() keyword arguments plus shards or shards_file)\n" % __name__)
        return 2
    with open(argv[1]) as handle:
        config = json.load(handle)
    try:
        shards = load_shards_file(config.pop("shards_file")) if "shards_file" in config else config.pop("shards")
        result = stage(shards, **config)
    except StagingError as exc:
        sys.stdout.write(json.dumps({"error": str(exc)}) + "\n")
        return 2
    sys.stdout.write(json.dumps(result) + "\n")
    return 1 if result["failed_shards"] or result["errors"] else 0


if __name__ == "__main__":
    # Only for running the engine by hand or from a benchmark; inside a module, main() never runs.
    raise SystemExit(_main(sys.argv))
