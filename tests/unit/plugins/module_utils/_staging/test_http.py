# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's own HTTP/1.1 client against a raw socket server that answers with exact bytes: body framings
(Content-Length, chunked, up to the close), interim responses, stale keep-alive connections, malformed responses,
unusable URLs, and TLS."""

import hashlib
import os
import socket
import ssl
import threading

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import fetcher
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import PermanentError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.http import Connections, basic_authorization, open_url
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage

FAST = dict(backoff=0.001, backoff_max=0.01, timeout=5)


class RawServer(object):
    """Answers each request on 127.0.0.1 with reply(path, request_number_on_this_connection) -> (bytes, close_after)."""

    def __init__(self, reply, tls_context=None):
        self.reply = reply
        self.tls_context = tls_context
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def url(self, path, scheme="http"):
        return "%s://127.0.0.1:%d%s" % (scheme, self.port, path)

    def _serve(self):
        while True:
            try:
                conn, _address = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            if self.tls_context is not None:
                conn = self.tls_context.wrap_socket(conn, server_side=True)
            data = b""
            number = 0
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, data = data.split(b"\r\n\r\n", 1)
                path = head.split(b" ")[1].decode()
                body, close = self.reply(path, number)
                number += 1
                conn.sendall(body)
                if close:
                    return
        except OSError:
            return
        finally:
            conn.close()

    def close(self):
        # shutdown() wakes the thread blocked in accept(); a bare close() would leave it there, holding a listener
        # whose descriptor number a later test's server may reuse.
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def raw_server():
    servers = []

    def start(reply, tls_context=None):
        server = RawServer(reply, tls_context)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


DATA = os.urandom(300 * 1024 + 17)


def shard(url, data=DATA, name="x.tar"):
    return {"name": name, "url": url, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def staged(dest, name="x.tar"):
    with open(os.path.join(dest, name), "rb") as handle:
        return handle.read()


def chunked(data, size=70000):
    pieces = [b"%x;ext=1\r\n%s\r\n" % (len(data[start:start + size]), data[start:start + size]) for start in range(0, len(data), size)]
    return b"".join(pieces) + b"0\r\nX-Trailer: yes\r\n\r\n"


@pytest.mark.parametrize("framing", ["content-length", "chunked", "until-close", "http/1.0", "interim-100"])
def test_body_framings(tmp_path, raw_server, framing):
    heads = {
        "content-length": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: \"v1\"\r\n\r\n" % len(DATA),
        "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        "until-close": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n",
        "http/1.0": b"HTTP/1.0 200 OK\r\nContent-Type: application/x-tar\r\n\r\n",
        "interim-100": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(DATA),
    }
    body = chunked(DATA) if framing == "chunked" else DATA
    closes = framing in ("until-close", "http/1.0")
    server = raw_server(lambda path, number: (heads[framing] + body, closes))

    result = stage([shard(server.url("/x.tar"))], str(tmp_path), **FAST)

    assert (result["fetched"], result["failed_shards"]) == (1, [])
    assert staged(str(tmp_path)) == DATA


def test_keep_alive_is_reused_and_a_stale_connection_is_replaced(tmp_path, raw_server):
    data = {"/s-%d.tar" % index: os.urandom(5000 + index) for index in range(6)}

    def reply(path, number):
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data[path])
        return head + data[path], number == 2  # the server drops the connection after its third response

    server = raw_server(reply)
    shards = [shard(server.url(path), body, path[1:]) for path, body in sorted(data.items())]

    result = stage(shards, str(tmp_path), concurrency=1, **FAST)

    assert (result["fetched"], result["failed_shards"]) == (6, [])
    assert server.connections == 2
    for path, body in data.items():
        assert staged(str(tmp_path), path[1:]) == body


@pytest.mark.parametrize("reply, reason", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(DATA), DATA[:1000]), "body truncated after 1000 of"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-10\r\n", "malformed chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123", "closed inside a chunked body"),
    (b"SPDY/3 200 OK\r\n\r\n", "malformed status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n", "malformed Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Le", "closed inside the response head"),
    (b"", "closed the connection without a response"),
])
def test_broken_responses_are_retried_then_reported(tmp_path, raw_server, reply, reason):
    server = raw_server(lambda path, number: (reply, True))

    result = stage([shard(server.url("/x.tar"))], str(tmp_path), retries=1, **FAST)

    assert result["fetched"] == 0
    (failure,) = result["failed_shards"]
    assert reason in failure["reason"] and "after 2 attempts" in failure["reason"]
    assert os.listdir(str(tmp_path)) == [".shard_fetch.journal"] or not os.path.exists(os.path.join(str(tmp_path), "x.tar"))


@pytest.mark.parametrize("path", ["/with space.tar", "/caf\u00e9.tar", "/ctl\x01.tar"])
def test_urls_an_http_request_cannot_carry_fail_without_a_request(tmp_path, raw_server, path):
    server = raw_server(lambda path, number: (b"HTTP/1.1 500 No\r\nContent-Length: 0\r\n\r\n", False))

    result = stage([shard(server.url(path))], str(tmp_path), **FAST)

    (failure,) = result["failed_shards"]
    assert "percent-encode" in failure["reason"] and "after" not in failure["reason"]
    assert server.connections == 0


def test_https_with_a_verified_certificate(tmp_path, raw_server, monkeypatch, self_signed):
    cert, server_context = self_signed("127.0.0.1")
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(DATA)
    server = raw_server(lambda path, number: (head + DATA, False), tls_context=server_context)
    dest = str(tmp_path / "dest")

    untrusted = stage([shard(server.url("/x.tar", "https"))], dest, retries=3, **FAST)

    # Refused at once, naming the host: a certificate that fails verification will fail again on every retry.
    assert untrusted["failed_shards"][0]["reason"] == ("the TLS certificate of 127.0.0.1 could not be verified (self-signed certificate); "
                                                       "if the store uses a private CA, give its certificate as ca_file")
    assert server.connections == 1
    real_default_context = ssl.create_default_context
    monkeypatch.setattr(fetcher.ssl, "create_default_context", lambda **kwargs: real_default_context(cafile=cert))

    trusted = stage([shard(server.url("/x.tar", "https"))], dest, retries=0, **FAST)

    assert (trusted["fetched"], trusted["failed_shards"]) == (1, [])
    assert staged(dest) == DATA


# ---------------------------------------------------------------------------------------------
# Credentials
# ---------------------------------------------------------------------------------------------

def test_user_info_in_a_source_url_becomes_basic_authentication(tmp_path, make_shards, shard_server):
    shards, contents = make_shards({"a.tar": 4096})
    base = shard_server.base
    shards[0]["url"] = shards[0]["url"].replace(base, base.replace("http://", "http://reader:s%40cret@"))
    result = stage(shards, str(tmp_path), **FAST)
    assert result["fetched"] == 1 and result["failed_shards"] == []
    (request,) = shard_server.requests("a.tar")
    assert request["authorization"] == basic_authorization("reader", "s@cret") == "Basic cmVhZGVyOnNAY3JldA=="
    assert "@" not in request["host"]


def test_credentials_go_to_the_source_origin_only_never_across_a_redirect(make_shards, shard_server):
    make_shards({"a.tar": 10, "b.tar": 10})
    other_origin = shard_server.url("b.tar").replace("127.0.0.1", "localhost")
    shard_server.redirect("a.tar", other_origin)
    conns = Connections(5, None)
    try:
        response, _origin = open_url(shard_server.url("a.tar"), {}, conns, {"Authorization": "Bearer t0ken", "X-Api-Key": "k3y"})
        assert response.status == 200
        response.read(100)
    finally:
        conns.close()
    first, second = shard_server.requests()
    assert first["path"] == "/a.tar" and first["authorization"] == "Bearer t0ken"
    assert second["path"] == "/b.tar" and second["host"].startswith("localhost") and second["authorization"] is None


def test_messages_about_a_bad_url_never_show_its_credentials():
    conns = Connections(5, None)
    with pytest.raises(PermanentError) as raised:
        open_url("http://reader:s3cret@store/a b.tar?sig=abc", {}, conns)
    assert "s3cret" not in str(raised.value) and "abc" not in str(raised.value)
    assert "http://***@store/a b.tar?sig=***" in str(raised.value)


def test_a_head_response_has_no_body_and_leaves_the_connection_for_the_next_request(make_shards, shard_server):
    _shards, contents = make_shards({"a.tar": 10})
    conns = Connections(5, None)
    try:
        head, origin = open_url(shard_server.url("a.tar"), {}, conns, method="HEAD")
        assert (head.status, head.getheader("Content-Length"), head.isclosed()) == (200, "10", True)
        conns.release(origin, head)
        response, _origin = open_url(shard_server.url("a.tar"), {}, conns)
        assert response.read(100) == contents["a.tar"]
    finally:
        conns.close()
    first, second = shard_server.requests()
    assert (first["method"], first["path"]) == ("HEAD", "/a.tar") and second["path"] == "/a.tar"
    assert first["client"] == second["client"]  # one connection: the HEAD's answer was read to its end
