# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One shard's hidden part file, from its first byte to its publication under the final name: resume, checkpoints,
verification."""

import hashlib
import json
import os

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import ChecksumError, LocalError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import (
    PART_SUFFIX, STATE_SUFFIX, UnsafeFileError, open_nofollow, unlink_quietly, write_atomically)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import redact_url

MIB = 1 << 20


class Partial(object):
    """The hidden .NAME.part file of one shard and the .state file that makes it resumable.

    The state file is written only after an fsync of the part file, and records the offset up to
    which the part is durable, so a resume after a crash never trusts bytes that were not on disk.

    Neither file is opened through a symbolic link (dest may be writable by others): a link at the part's or the
    state's name fails this shard alone with a LocalError that names the link (its reason in failed_shards), and
    the other shards are still staged. The state file is replaced by rename from an unpredictably named new file.
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
            fd = open_nofollow(self.path, os.O_RDWR)
        except FileNotFoundError:
            return 0
        except UnsafeFileError as exc:
            raise LocalError(str(exc))
        except OSError as exc:
            raise LocalError("cannot open %s: %s" % (self.path, exc.strerror))
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
                    raise LocalError("%s shrank while being read" % self.path)
                self.hasher.update(view[:count])
                remaining -= count
        except OSError as exc:
            raise LocalError("cannot read %s: %s" % (self.path, exc.strerror))
        self.offset = self.durable = state["durable"]
        self.validator = state["validator"]
        self.total = state["size"]
        self.resumed_from = self.offset
        return self.offset

    def _read_state(self):
        """The state file's record when it is usable, else None; a link at its name raises LocalError."""
        try:
            fd = open_nofollow(self.state_path, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as handle:
                state = json.load(handle)
        except UnsafeFileError as exc:
            raise LocalError(str(exc))
        except (OSError, ValueError):
            return None
        usable = (isinstance(state, dict) and state.get("url") == redact_url(self.shard.url) and state.get("validator")
                  and isinstance(state.get("durable"), int) and state["durable"] > 0
                  and (self.shard.size is None or state.get("size") == self.shard.size))
        return state if usable else None

    def restart(self, validator, total):
        """Empty the part file to receive the shard from its first byte."""
        try:
            self._drop_state()
            if self.fd is None:
                self.fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            else:
                os.ftruncate(self.fd, 0)
                os.lseek(self.fd, 0, os.SEEK_SET)
        except UnsafeFileError as exc:
            raise LocalError(str(exc))
        except OSError as exc:
            raise LocalError("cannot create %s: %s" % (self.path, exc.strerror))
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
            raise LocalError("cannot write %s: %s" % (self.path, exc.strerror))
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
            # The URL as shown (credentials as ***): no secret is ever written to dest.
            state = {"url": redact_url(self.shard.url), "validator": self.validator, "size": self.total, "durable": self.offset}
            # Not fsynced: a state lost in a crash costs a restart from zero, never a resume from bytes not on disk.
            write_atomically(self.state_path, json.dumps(state).encode("utf-8"), sync=False)
            self.has_state = True
        except OSError as exc:
            raise LocalError("cannot record progress of %s: %s" % (self.path, exc.strerror))
        self.durable = self.offset

    def _drop_state(self):
        if self.has_state:
            unlink_quietly(self.state_path)
            self.has_state = False

    def complete(self, sync):
        """Check size and sha256 and close the part file, fsyncing it first when `sync`; return (size, mtime_ns, sha256).

        Without `sync` the part is not yet durable: the caller must make it so (group commit) before publish().
        """
        shard = self.shard
        if shard.size is not None and self.offset != shard.size:
            raise ChecksumError("received %d bytes, expected %d" % (self.offset, shard.size))
        digest = self.hasher.hexdigest() if self.hasher is not None else self._hash_from_disk()
        if self.expected_sha256 is not None and digest != self.expected_sha256:
            raise ChecksumError("sha256 is %s, expected %s" % (digest, self.expected_sha256))
        try:
            if sync:
                os.fsync(self.fd)
            info = os.fstat(self.fd)
            os.close(self.fd)
            self.fd = None
        except OSError as exc:
            raise LocalError("cannot finish %s: %s" % (self.path, exc.strerror))
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
            raise LocalError("cannot finish %s: %s" % (self.final_path, exc.strerror))

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
            raise LocalError("cannot read back %s: %s" % (self.path, exc.strerror))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def discard(self):
        self.close()
        unlink_quietly(self.path)
        unlink_quietly(self.state_path)
