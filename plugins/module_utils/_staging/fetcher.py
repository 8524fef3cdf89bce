# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How one shard comes into dest: from its source (HTTP or file://) or from a peer, with retries, resumed where a part
file allows it, verified and made durable (or left to the run's group commit, see workers)."""

import errno
import os
import random
import re
import ssl
import stat
import threading
import time
from urllib.parse import unquote, urlsplit

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import (
    ChecksumError, LocalError, PermanentError, StagingError, TransientError, describe)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.http import USER_AGENT, RateLimiter, content_length, open_url, validator_of
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import hash_file
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.partial import Partial
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.peer import shard_path
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.proxy_rules import Proxies, ProxyError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import basic_authorization

MIB = 1 << 20
_CONTENT_RANGE_RE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)\Z")
_RETRYABLE_4XX = (408, 425, 429)
# A wrong checksum is retried once (the bytes may have been damaged in flight); a second one is the source's.
_MISMATCH_ATTEMPTS = 2
# copy_file_range cannot serve this pair of files; copy through user space instead.
_NO_COPY_RANGE = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.ETXTBSY)
_LOCAL_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
# A header field name (RFC 9110 token).
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
SOURCE_ACCESS_KEYS = ("headers", "url_username", "url_password", "proxy", "ca_file")


class Outcome(object):
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


class Transfer(object):
    """The settings of one run and the code that brings one shard into dest."""

    def __init__(self, dest, retries, timeout, backoff, backoff_max, bandwidth_limit, buffer_size, checkpoint_bytes, check_mode):
        self.dest = dest
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.limiter = RateLimiter(bandwidth_limit) if bandwidth_limit else None
        self.buffer_size = buffer_size
        self.checkpoint_bytes = checkpoint_bytes
        self.check_mode = check_mode
        # Shards of up to this many bytes are left to the run's group commit; -1: every shard is fsynced alone.
        self.group_commit_bytes = -1
        # Names whose .part.state file the scan found (only these can be resumed), and those checkpointed since.
        self.states = frozenset()
        self.resumable = set()
        # PeerSources when other nodes of the run hand this one some of its shards; None: everything from the sources.
        self.peers = None
        # Headers for the sources only, never for peers (e.g. Authorization from url_username / url_password or headers).
        self.source_headers = {}
        # A CA bundle (PEM file) that verifies the stores' certificates instead of the system's; None: the system's.
        self.ca_file = None
        # The proxy for each source origin (proxy_rules); set by set_source_access().
        self.proxies = None
        self._local = threading.local()
        self._ssl_lock = threading.Lock()
        self._ssl = None

    def set_source_access(self, headers=None, url_username=None, url_password=None, proxy=None, ca_file=None):
        """How the sources are reached: extra request headers (a bearer token, say), HTTP Basic credentials, the proxy
        (None: the environment's, "": none, else its URL; see proxy_rules) and a CA bundle. Raises StagingError, naming the
        setting but never a secret, for what cannot work."""
        problems = []
        headers = dict(headers or {})
        for name, value in headers.items():
            if not isinstance(name, str) or not _HEADER_NAME_RE.match(name) or name.lower() in ("host", "range", "if-range"):
                problems.append("headers: %r is not a header name the engine can send" % (name,))
            elif not isinstance(value, str) or "\r" in value or "\n" in value:
                problems.append("headers: the value of %s must be a one-line string" % name)
        if url_username is not None:
            headers.setdefault("Authorization", basic_authorization(url_username, url_password))
        elif url_password is not None:
            problems.append("url_password is set but url_username is not")
        try:
            self.proxies = Proxies(proxy)
        except ProxyError as exc:
            problems.append(str(exc))
        if ca_file is not None and not os.access(ca_file, os.R_OK):
            problems.append("ca_file %s cannot be read" % ca_file)
        if problems:
            raise StagingError("; ".join(problems))
        self.source_headers = headers
        self.ca_file = ca_file

    def ssl_context(self):
        with self._ssl_lock:
            if self._ssl is None:
                self._ssl = ssl.create_default_context(cafile=self.ca_file)
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
                outcome = Outcome("confirmed", shard)
                outcome.sha256, outcome.size, outcome.mtime_ns = found
                outcome.hashed = True
                return outcome
            repaired = True
        if self.check_mode:
            outcome = Outcome("would_fetch", shard)
        else:
            outcome = self._fetch(shard)
            if outcome.kind == "failed" and repaired:
                outcome.reason = "the staged copy does not match its sha256 and refetching failed: %s" % outcome.reason
        outcome.hashed = outcome.repaired = repaired
        return outcome

    def _hash_existing(self, shard):
        try:
            return hash_file(os.path.join(self.dest, shard.name), self.buffer_size)
        except OSError:
            return None

    def _fetch(self, shard):
        part = Partial(self.dest, shard, self.checkpoint_bytes, shard.name in self.states or shard.name in self.resumable)
        is_file = shard.url.startswith("file://")
        attempt = mismatches = 0
        try:
            source = self.peers.peer_for(shard.name) if self.peers is not None else None
            if source is not None:
                try:
                    outcome = self._from_peer(shard, part, *source)
                except LocalError as exc:
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
                except (PermanentError, LocalError) as exc:
                    return self._give_up(shard, part, str(exc))
                except ChecksumError as exc:
                    part.discard()
                    mismatches += 1
                    reason = str(exc)
                    if mismatches >= _MISMATCH_ATTEMPTS:
                        return self._give_up(shard, part, "%s (on %d attempts)" % (reason, mismatches))
                except (TransientError, OSError) as exc:
                    reason = describe(exc)
                attempt += 1
                if attempt > self.retries:
                    return self._give_up(shard, part, "%s (after %d attempts)" % (reason, attempt))
                time.sleep(min(self.backoff_max, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0))
        finally:
            part.close()

    def _finish(self, shard, part):
        resumed = part.resumed_from > 0
        outcome = Outcome("fetched", shard, part.received)
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
        except LocalError:
            pass
        return self.failure(shard, reason, part.received)

    @staticmethod
    def failure(shard, reason, received=0):
        outcome = Outcome("failed", shard, received)
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
        # A part a peer started (in this run, or in one that was killed) goes on from its durable end: every peer names a
        # shard's copy by its sha256 (ETag), so If-Range holds whichever peer the rest comes from.
        offset = part.resume_offset(self.buffer_size)
        headers = dict(peers.headers(), **{"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
        if offset:
            headers.update(Range="bytes=%d-" % offset, **{"If-Range": part.validator})
        try:
            response, origin = open_url(url, headers, conns, direct=True)
        except (TransientError, PermanentError, OSError) as exc:
            if peers.unreachable(peer, describe(exc)) and peers.may_wait(shard.name):
                return Outcome("deferred", shard)
            return None
        peers.answered(peer)
        status = response.status
        if status not in (200, 206):
            try:
                response.read(64 * 1024)
                conns.release(origin, response)
            except (TransientError, OSError):
                conns.drop(origin)
            if status == 503 and peers.may_wait(shard.name):
                return Outcome("deferred", shard)
            if status == 401:
                peers.give_up(peer, "it refused this run's token")
            return None
        try:
            total = self._accept(response, part, offset)
            if total is _RESTART:
                # The part came from another copy than the peer now has: start it again from this peer's first byte.
                conns.drop(origin)
                part.reset()
                return self._ask_peer(shard, part, peer, base)
            part.expected_sha256 = shard.sha256 or response.getheader("X-Shard-Sha256")
            if shard.size is not None and total != shard.size:
                raise ChecksumError("it has %s bytes, expected %d" % (total, shard.size))
            self._receive(response, part, total)
            outcome = self._finish(shard, part)
        except ChecksumError as exc:
            conns.drop(origin)
            part.discard()
            peers.sent_bad_data(peer, shard.name, str(exc))
            return None
        except (TransientError, PermanentError, OSError) as exc:
            conns.drop(origin)
            self._keep_for_resume(shard, part)
            if peers.unreachable(peer, describe(exc)) and peers.may_wait(shard.name):
                return Outcome("deferred", shard)
            return None
        conns.release(origin, response)
        outcome.peer = peer
        return outcome

    def _keep_for_resume(self, shard, part):
        """Make what arrived durable and resumable (a later attempt in this run, or a later run, goes on from there)."""
        try:
            part.checkpoint()
        except LocalError:
            part.reset()
            return
        if part.has_state:
            self.resumable.add(shard.name)

    # -- HTTP ------------------------------------------------------------------------------------

    def _download(self, shard, part):
        conns = self._local.conns
        offset = part.resume_offset(self.buffer_size)
        part.expected_sha256 = shard.sha256
        while True:
            headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
            if offset:
                headers["Range"] = "bytes=%d-" % offset
                headers["If-Range"] = part.validator
            response, origin = open_url(shard.url, headers, conns, self.source_headers)
            try:
                total = self._accept(response, part, offset)
                if total is _RESTART:
                    conns.drop(origin)
                    part.reset()
                    offset = 0
                    continue
                if shard.size is not None and total is not None and total != shard.size:
                    raise ChecksumError("the source has %d bytes, expected %d" % (total, shard.size))
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
            same_source = (match and int(match.group(1)) == offset and validator_of(response) == part.validator
                           and (part.total is None or int(match.group(3)) == part.total))
            if not same_source:
                return _RESTART
            part.total = int(match.group(3))
            return part.total
        if status == 200:
            part.restart(validator_of(response), content_length(response))
            return part.total
        if status == 416 and offset:
            return _RESTART
        if status in _RETRYABLE_4XX or status >= 500:
            raise TransientError("HTTP %d %s" % (status, response.reason))
        raise PermanentError("HTTP %d %s" % (status, response.reason))

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
                raise ChecksumError("the source sent more than the expected %d bytes" % ceiling)
        if total is not None and part.offset < total:
            raise TransientError("body truncated after %d of %d bytes" % (part.offset, total))

    # -- file:// ---------------------------------------------------------------------------------

    def _copy_file(self, shard, part):
        source = unquote(urlsplit(shard.url).path)
        try:
            src = os.open(source, os.O_RDONLY)
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as exc:
            raise PermanentError("cannot open %s: %s" % (source, exc.strerror))
        except OSError as exc:
            raise TransientError("cannot open %s: %s" % (source, exc.strerror))
        try:
            info = os.fstat(src)
            if not stat.S_ISREG(info.st_mode):
                raise PermanentError("%s is not a regular file" % source)
            if shard.size is not None and info.st_size != shard.size:
                raise ChecksumError("the source has %d bytes, expected %d" % (info.st_size, shard.size))
            part.checkpoint_bytes = float("inf")  # a local copy restarts rather than resumes
            part.restart("%d-%d" % (info.st_size, info.st_mtime_ns), info.st_size)
            self._copy_range(src, part, info.st_size)
        finally:
            os.close(src)
        if part.offset < info.st_size:
            raise TransientError("%s ended after %d of %d bytes" % (source, part.offset, info.st_size))

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
                        raise LocalError("cannot write %s: %s" % (part.path, exc.strerror))
                    raise TransientError("copying from the source failed: %s" % exc.strerror)
                part.note_copied(count)
            else:
                want = min(want, len(buffer))
                count = os.readv(src, [buffer[:want]])
                if count:
                    part.write(buffer[:count])
            if not count:
                return
