# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nodes' HTTP/1.1 client: keep-alive connections, the responses' framings, redirects, and a shared rate limit. The
engine fetches with it, and every module that asks a server from the node (source_reachable's ``ask``); each request
takes its proxy from proxy_rules (``Connections.get``: the one place the rules apply on the node).

http.client parses every response's headers with the email package and wraps the socket in new file objects per
response: that costs more CPU than the rest of a small shard's transfer. This is the part of HTTP/1.1 that fetching
a file needs, over a plain (or TLS) socket.
"""

import errno
import re
import socket
import ssl
import threading
import time
from urllib.parse import unquote, urljoin, urlsplit

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import PermanentError, TransientError, describe
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.proxy_rules import Proxies
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import basic_authorization, redact_url

USER_AGENT = "dlinfra.gpu_cluster-shard_fetch/1"
_REQUEST_TARGET_RE = re.compile(r"^[\x21-\x7e]+\Z")
_REDIRECTS = (301, 302, 303, 307, 308)
_MAX_REDIRECTS = 5


def validator_of(response):
    """The response's strong ETag, else its Last-Modified: what If-Range may name."""
    etag = response.getheader("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return response.getheader("Last-Modified")


def content_length(response):
    value = response.getheader("Content-Length")
    return int(value) if value and value.isdigit() else None


class RateLimiter(object):
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


class Disconnected(ConnectionError):
    """The server closed the connection before the status line: a reused keep-alive connection may simply have
    timed out at the server, so the request is worth sending again on a fresh one."""


class Response(object):
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
                raise TransientError("malformed chunk size %r in the response" % line[:40])
            self.chunk_left = int(size, 16)
            if not self.chunk_left:
                while self.conn.readline() not in (b"\r\n", b"\n"):  # trailer fields, up to the empty line
                    pass
                self.done = True
                return 0
        count = self.conn.readinto(view[:self.chunk_left])
        if not count:
            raise TransientError("the connection closed inside a chunked body")
        self.chunk_left -= count
        if not self.chunk_left and self.conn.readline() not in (b"\r\n", b"\n"):
            raise TransientError("a chunk of the response is not followed by CRLF")
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


class HttpConnection(object):
    """One keep-alive HTTP/1.1 connection that sends GETs and parses their responses.

    http.client parses every response's headers with the email package and wraps the socket in new file objects
    per response: that costs more CPU than the rest of a small shard's transfer. This is the part of HTTP/1.1 that
    fetching a file needs, over a plain (or TLS) socket.
    """

    MAX_HEAD = 64 * 1024
    RECEIVE = 64 * 1024

    def __init__(self, scheme, host, port, timeout, ssl_context, proxy=None):
        self.scheme = scheme
        self.host = host
        self.port = port
        self.timeout = timeout
        self.ssl_context = ssl_context
        # A proxy_rules.Proxy: plain HTTP is sent to it in absolute form, HTTPS goes through a CONNECT tunnel.
        self.proxy = proxy
        name = "[%s]" % host if ":" in host else host
        self.authority = "%s:%d" % (name, port)
        self.host_header = name if port == (443 if scheme == "https" else 80) else self.authority
        self.sock = None
        self.pending = b""            # received bytes not handed out yet
        self.method = "GET"           # of the request sent last: a response to HEAD has no body

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.pending = b""

    def request(self, target, headers, method="GET"):
        if self.sock is None:
            self._connect()
        self.method = method
        lines = ["%s %s HTTP/1.1" % (method, target), "Host: " + self.host_header]
        if self.proxy is not None and self.scheme == "http":
            # The absolute form, its port left out where it is the scheme's, as the Host header has it.
            lines[0] = "%s http://%s%s HTTP/1.1" % (method, self.host_header, target)
            if self.proxy.authorization:
                lines.append("Proxy-Authorization: " + self.proxy.authorization)
        lines.extend("%s: %s" % item for item in headers.items())
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def _connect(self):
        proxy = self.proxy
        sock = socket.create_connection((proxy.host, proxy.port) if proxy else (self.host, self.port), self.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.scheme == "https":
                if proxy is not None:
                    self.sock = sock
                    self._tunnel()
                    self.sock = None
                try:
                    sock = self.ssl_context().wrap_socket(sock, server_hostname=self.host)
                except ssl.SSLCertVerificationError as exc:
                    raise PermanentError("the TLS certificate of %s could not be verified (%s); if the store uses a private CA, give its "
                                         "certificate as ca_file" % (self.host, exc.verify_message or exc.reason))
        except BaseException:
            self.sock = None
            sock.close()
            raise
        self.sock = sock

    def _tunnel(self):
        """Ask the proxy for a tunnel to host:port (HTTP CONNECT) on the socket just opened to it."""
        lines = ["CONNECT %s HTTP/1.1" % self.authority, "Host: " + self.authority]
        if self.proxy.authorization:
            lines.append("Proxy-Authorization: " + self.proxy.authorization)
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        status_line = self._read_head().decode("latin-1").split("\r\n", 1)[0]
        parts = status_line.split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        if status != 200:
            message = "the proxy %s answered %r to CONNECT %s" % (self.proxy.url, status_line[:80], self.authority)
            if status >= 500 or status == 0:
                raise TransientError(message)
            raise PermanentError(message + ("; give the proxy's user and password in its URL" if status == 407 else ""))
        if self.pending:
            raise TransientError("the proxy %s sent data before the tunnel to %s was set up" % (self.proxy.url, self.authority))

    def getresponse(self):
        while True:
            head = self._read_head()
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (len(parts[1]) == 3 and parts[1].isdigit()):
                raise TransientError("malformed status line %r" % lines[0][:80])
            status = int(parts[1])
            if 100 <= status < 200:
                continue  # an interim response (100 Continue): the real one follows
            headers = {}
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                if not colon:
                    raise TransientError("malformed header line %r" % line[:80])
                name = name.strip().lower()
                value = value.strip()
                headers[name] = headers[name] + ", " + value if name in headers else value
            return self._response(status, parts[2] if len(parts) > 2 else "", parts[0], headers)

    def _response(self, status, reason, version, headers):
        connection = headers.get("connection", "").lower()
        will_close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = None
        if status in (204, 304) or self.method == "HEAD":
            length = 0
        elif not chunked and "content-length" in headers:
            value = headers["content-length"].split(",")[0].strip()
            if not value.isdigit():
                raise TransientError("malformed Content-Length %r" % headers["content-length"][:40])
            length = int(value)
        elif not chunked:
            will_close = True  # the body ends where the connection does
        return Response(self, status, reason, headers, will_close, length, chunked)

    def _read_head(self):
        data = self.pending
        start = 0
        while True:
            end = data.find(b"\r\n\r\n", start)
            if end >= 0:
                self.pending = data[end + 4:]
                return data[:end]
            if len(data) > self.MAX_HEAD:
                raise TransientError("the response head is longer than %d bytes" % self.MAX_HEAD)
            start = max(0, len(data) - 3)
            chunk = self.sock.recv(self.RECEIVE)
            if not chunk:
                if data:
                    raise TransientError("the connection closed inside the response head")
                raise Disconnected(errno.ECONNRESET, "the server closed the connection without a response")
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
                raise TransientError("a line of the response is longer than 8 KiB")
            chunk = self.sock.recv(self.RECEIVE)
            if not chunk:
                raise TransientError("the connection closed inside the response")
            data += chunk


class Connections(object):
    """One worker's keep-alive HTTP/1.1 connections, one per origin (scheme, host, port, direct), each through the proxy
    ``proxies`` names for it unless direct (peers are reached directly). proxies None: the environment's (proxy_rules)."""

    def __init__(self, timeout, ssl_context, proxies=None):
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.proxies = Proxies() if proxies is None else proxies
        self.open = {}

    def get(self, origin):
        conn = self.open.get(origin)
        if conn is not None:
            return conn, True
        scheme, host, port, direct = origin
        proxy = None if direct else self.proxies.for_origin(scheme, host)
        conn = self.open[origin] = HttpConnection(scheme, host, port, self.timeout, self.ssl_context, proxy)
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


def open_url(url, headers, conns, credentials=None, direct=False, method="GET"):
    """Send a GET (or ``method``: HEAD), following redirects; return (response, origin) with the body unread.

    ``credentials`` (headers such as Authorization) and the URL's own user info (as Basic authentication, unless
    credentials hold an Authorization) go to the URL's origin only: a redirect to another origin drops them, as curl
    does, so that a store never hands its users' secrets to a host it points at. Messages show the URL redacted.
    ``direct``: never through a proxy (the other nodes of a peer-assisted run).
    """
    redirects = 0
    first_origin = None
    while True:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise PermanentError("redirected to %s, which is not an http(s) URL" % redact_url(url))
        try:
            origin = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), direct)
        except ValueError as exc:
            raise PermanentError("bad URL %s: %s" % (redact_url(url), exc))
        target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        if not parts.hostname or not _REQUEST_TARGET_RE.match(target):
            raise PermanentError("cannot request %s: it needs a host, and a path of printable ASCII without spaces "
                                 "(percent-encode other characters)" % redact_url(url))
        if first_origin is None:
            first_origin = origin
            secrets = dict(credentials or {})
            if parts.username is not None and "Authorization" not in secrets:
                secrets["Authorization"] = basic_authorization(unquote(parts.username), unquote(parts.password or ""))
        sent = dict(headers, **secrets) if secrets and origin == first_origin else headers
        response = _send(conns, origin, target, sent, method)
        location = response.getheader("Location")
        if response.status not in _REDIRECTS or not location:
            return response, origin
        response.read(64 * 1024)
        conns.release(origin, response)
        redirects += 1
        if redirects > _MAX_REDIRECTS:
            raise PermanentError("more than %d redirects" % _MAX_REDIRECTS)
        url = urljoin(url, location)


def _send(conns, origin, target, headers, method="GET"):
    while True:
        conn, reused = conns.get(origin)
        try:
            conn.request(target, headers, method)
            return conn.getresponse()
        except (Disconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as exc:
            conns.drop(origin)
            if not reused:
                raise TransientError(describe(exc))
            # The server closed an idle keep-alive connection: go again on a fresh one.
        except TransientError:
            conns.drop(origin)
            raise
        except OSError as exc:
            conns.drop(origin)
            raise TransientError(describe(exc))
