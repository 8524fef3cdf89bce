# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Peer-assisted staging: nodes hand each other the shards they already hold, so the source sends each shard once.

``PeerServer`` runs inside one staging run (a thread of the engine's process, so a killed run takes it along). It
serves, to requests that carry the run's token, only the shards of that run's list that the engine has published
and verified (or confirmed) in this run, read-only, as ``GET|HEAD /shards/NAME``; a shard it will have later answers
503 (ask again), one it will never have 404. ``GET /done/NODE`` is how a node that fetches from this one says it has
finished; the server stays up after its own run until every such node has said so, or nobody asked for anything for
``linger`` seconds.

``PeerSources`` is the fetching side: which peer to ask for which shard, and which peers are given up on.
"""

import concurrent.futures
import hmac
import http.client
import os
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError

SHARD_PATH = "/shards/"
DONE_PATH = "/done/"
# What a peer's answer says about a shard it does not have yet, and how long the fetching node waits before asking again.
RETRY_SECONDS = 0.5
# A peer that answered before and then not for this long (or ``wait``, if shorter) is given up for the rest of the run.
# One that never answered gets ``wait``: on a large cluster the last nodes' fetches start minutes after the first.
UNREACHABLE_SECONDS = 30.0
SEND_CHUNK = 8 << 20


def shard_path(name):
    return SHARD_PATH + quote(name, safe="")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass  # a peer that hung up mid-transfer retries or goes to the source; a traceback on stderr helps nobody


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dlinfra-shard-peer/1"
    # An idle keep-alive connection is closed after this many seconds.
    timeout = 120

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass  # the run reports what it served; per-request lines would go to the module's stderr

    def _reply(self, status, message="", headers=()):
        body = message.encode("utf-8")
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _authorized(self):
        given = self.headers.get("Authorization", "")
        expected = "Bearer " + self.server.peer.token
        return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))

    def do_GET(self):  # pylint: disable=invalid-name
        self._serve()

    def do_HEAD(self):  # pylint: disable=invalid-name
        self._serve()

    def _refuse_method(self):
        self.close_connection = True
        self._reply(405, "only GET and HEAD\n", [("Allow", "GET, HEAD")])

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse_method

    def _serve(self):
        peer = self.server.peer
        peer.touch()
        if not self._authorized():
            self.close_connection = True
            self._reply(401, "a token is required\n", [("WWW-Authenticate", "Bearer")])
            return
        path = self.path.split("?", 1)[0]
        if path.startswith(DONE_PATH) and self.command == "GET":
            peer.note_done(unquote(path[len(DONE_PATH):]))
            self._reply(200, "ok\n")
            return
        if not path.startswith(SHARD_PATH):
            self._reply(404, "not a shard of this run\n")
            return
        name = unquote(path[len(SHARD_PATH):])
        state = peer.state_of(name)
        if state is None:
            self._reply(404, "not a shard of this run\n")
        elif state == "failed":
            self._reply(404, "this node could not stage it\n")
        elif state == "pending":
            self._reply(503, "not staged here yet\n", [("Retry-After", "1")])
        else:
            self._send_file(name, state)

    def _send_file(self, name, published):
        size, mtime_ns, sha256 = published
        try:
            fd = os.open(os.path.join(self.server.peer.dest, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            self._reply(404, "gone\n")
            return
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or (info.st_size, info.st_mtime_ns) != (size, mtime_ns):
                self._reply(404, "changed since it was staged\n")
                return
            etag = '"sha256-%s"' % sha256
            start = 0
            ranged = self.headers.get("Range", "")
            if ranged.startswith("bytes=") and ranged.endswith("-") and self.headers.get("If-Range") == etag:
                offset = ranged[6:-1]
                if offset.isdigit() and int(offset) < size:
                    start = int(offset)
            self.send_response(206 if start else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size - start))
            self.send_header("ETag", etag)
            self.send_header("X-Shard-Sha256", sha256)
            if start:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
            self.end_headers()
            if self.command == "HEAD":
                return
            sent = self.connection.sendfile(handle, start, size - start)
        self.server.peer.count_served(sent)


class PeerServer(object):
    """The serving half of one node's run; see the module docstring."""

    def __init__(self, dest, address, port, token, names, downstream, linger):
        if not token or len(token) < 16:
            raise ValueError("the peer token must have at least 16 characters")
        self.dest = dest
        self.address = address
        self.port = port
        self.token = token
        self.names = frozenset(names)
        self.downstream = frozenset(downstream)
        self.linger = linger
        self.published = {}
        self.failed = set()
        self.done = set()
        self.served_bytes = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._last_request = time.monotonic()
        self._server = None
        self._thread = None

    def start(self):
        try:
            self._server = _Server((self.address, self.port), _Handler)
        except OSError as exc:
            raise OSError(exc.errno, "cannot listen on %s:%d for peers: %s" % (self.address, self.port, exc.strerror))
        self._server.peer = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="shard-peer-server", daemon=True)
        self._thread.start()

    def publish(self, name, size, mtime_ns, sha256):
        """The shard is staged, verified and durable under its final name: serve it."""
        if name in self.names:
            with self._lock:
                self.published[name] = (size, mtime_ns, sha256)

    def fail(self, name):
        """This run gave up on the shard: peers must take it from the source."""
        with self._lock:
            self.failed.add(name)

    def close_pending(self):
        """The run is over: whatever was not published by now will not be."""
        with self._lock:
            self.failed.update(self.names.difference(self.published))

    def state_of(self, name):
        with self._lock:
            if name not in self.names:
                return None
            if name in self.published:
                return self.published[name]
            return "failed" if name in self.failed else "pending"

    def touch(self):
        with self._lock:
            self._last_request = time.monotonic()

    def note_done(self, node):
        with self._changed:
            self.done.add(node)
            self._changed.notify_all()

    def count_served(self, count):
        with self._lock:
            self.served_bytes += count

    def wait_for_downstream(self):
        """Serve until every node that fetches from this one has said it is done, or nobody asked for ``linger`` s.

        Returns the nodes that never said so (given up on)."""
        with self._changed:
            while not self.downstream <= self.done:
                idle = time.monotonic() - self._last_request
                if idle >= self.linger:
                    break
                self._changed.wait(min(1.0, self.linger - idle))
            return sorted(self.downstream - self.done)

    @property
    def serving(self):
        return self._server is not None

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None


class PeerSources(object):
    """The fetching half: ``sources`` maps a shard name to the peer that serves it; ``peers`` a peer to its base URL.

    A peer is given up on, for the rest of the run, once it has not answered for a while (see UNREACHABLE_SECONDS),
    refused the token, or sent bytes that failed their checksum; its shards then come from the source.
    """

    def __init__(self, token, peers, sources, wait, node="", linger=60.0):
        self.token = token
        self.node = node
        # How long the peers serve after their last request: as long as this node keeps trying to say it is done.
        self.linger = linger
        self.peers = dict(peers)
        self.sources = dict(sources)
        self.wait = wait
        self.given_up = {}
        self.silent_since = {}
        self.bad = []
        self.from_peers = {}
        self.waiting_since = {}
        # Per peer, the shards that waited ``wait`` seconds for it and then came from their source instead.
        self.waited_out = {}
        self.answered_once = set()
        self._lock = threading.Lock()

    def peer_for(self, name):
        """(peer, base URL) to ask for the shard, or None to take it from the source."""
        peer = self.sources.get(name)
        if peer is None or peer not in self.peers:
            return None
        with self._lock:
            if peer in self.given_up:
                return None
        return peer, self.peers[peer]

    def headers(self):
        return {"Authorization": "Bearer " + self.token}

    def may_wait(self, name):
        """Whether the shard may still wait for its peer (for at most ``wait`` seconds since it was first put off); when
        it may not, the first time, the shard is counted in ``waited_out`` under its peer."""
        now = time.monotonic()
        with self._lock:
            since = self.waiting_since.setdefault(name, now)
            if since is None:
                return False
            if now - since < self.wait:
                return True
            self.waiting_since[name] = None  # counted once, never waited for again
            peer = self.sources.get(name)
            self.waited_out[peer] = self.waited_out.get(peer, 0) + 1
            return False

    def answered(self, peer):
        with self._lock:
            self.silent_since.pop(peer, None)
            self.answered_once.add(peer)

    def unreachable(self, peer, reason):
        """The peer did not answer; True while it is worth asking again later."""
        now = time.monotonic()
        with self._lock:
            since = self.silent_since.setdefault(peer, now)
            limit = min(UNREACHABLE_SECONDS, self.wait) if peer in self.answered_once else self.wait
            if now - since < limit:
                return True
            self.given_up.setdefault(peer, "no answer for %.0f s: %s" % (now - since, reason))
            return False

    def give_up(self, peer, reason):
        with self._lock:
            self.given_up.setdefault(peer, reason)

    def sent_bad_data(self, peer, name, reason):
        with self._lock:
            self.bad.append({"peer": peer, "name": name, "reason": reason})
            self.given_up.setdefault(peer, "served %s with %s" % (name, reason))

    def count(self, peer, nbytes):
        with self._lock:
            self.from_peers[peer] = self.from_peers.get(peer, 0) + nbytes

    def upstream(self):
        """The peers this node was told to fetch from (each is told when this node is done)."""
        return sorted(set(self.sources.values()) & set(self.peers))

    def tell_done(self, timeout, patience):
        """Tell every upstream peer that this node needs nothing more from it. A peer whose server is not up yet (its run
        started later) is asked again every RETRY_SECONDS for up to ``patience`` seconds; one that never answers stops
        serving on its own, ``linger`` seconds after its last request."""
        pending = [peer for peer in self.upstream() if peer not in self.given_up]
        deadline = time.monotonic() + patience
        with concurrent.futures.ThreadPoolExecutor(min(16, len(pending) or 1)) as pool:
            while pending:
                told = list(pool.map(lambda peer: self._tell(peer, min(timeout, 5.0)), pending))
                pending = [peer for peer, done in zip(pending, told) if not done]
                if not pending or time.monotonic() >= deadline:
                    return pending
                time.sleep(RETRY_SECONDS)
        return pending

    def _tell(self, peer, timeout):
        host = self.peers[peer].split("://", 1)[1]
        try:
            conn = http.client.HTTPConnection(host, timeout=timeout)
            try:
                conn.request("GET", DONE_PATH + quote(self.node, safe=""), headers=self.headers())
                return conn.getresponse().status == 200
            finally:
                conn.close()
        except (OSError, http.client.HTTPException):
            return False


PEER_KEYS = {"node": str, "address": str, "port": int, "token": str, "peers": dict, "sources": dict, "downstream": list,
             "wait": (int, float), "linger": (int, float)}


def peer_settings(peer):
    """The settings of a peer-assisted run (see transfer.stage()'s ``peer``), checked, with defaults filled in."""
    if not isinstance(peer, dict) or set(peer) - set(PEER_KEYS):
        raise StagingError("peer must be a mapping of %s" % ", ".join(sorted(PEER_KEYS)))
    settings = dict(address="", port=0, peers={}, sources={}, downstream=[], wait=120.0, linger=60.0)
    settings.update(peer)
    for key, kind in PEER_KEYS.items():
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
