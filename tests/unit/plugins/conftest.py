# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local HTTP/1.1 shard server (127.0.0.1 only) whose faults are chosen per path, for the transfer tests."""

import hashlib
import importlib.util
import ipaddress
import os
import pathlib
import shutil
import ssl
import subprocess
import socket
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

HOLD_LIMIT_S = 120


class Fault(object):
    """What goes wrong with the next `times` responses for a path (times=None: every response).

    kinds: status (send `code`), truncate (announce the full length, send `after` bytes, close),
    corrupt (flip one byte of the body), slow (send at `rate` bytes/s), hold (send `after` bytes, then wait until the
    threading.Event `release` is set before the rest, at `rate` bytes/s if given: a transfer that is certainly under way,
    whatever the machine's load, until the test says; HOLD_LIMIT_S is only a safety net).
    """

    def __init__(self, kind, times=1, **params):
        self.kind = kind
        self.times = times
        self.params = params


class ShardServer(object):
    def __init__(self):
        self.blobs = {}
        self.redirects = {}
        self.faults = {}
        self.log = []
        self.lock = threading.Lock()
        self.honour_if_range = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.shard_server = self
        self.base = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def add(self, name, data, etag=None, last_modified=None):
        """Serve data at /name; returns its URL. A new add() of the same name is a new version of the file."""
        etag = etag or '"%s"' % hashlib.sha256(data).hexdigest()[:16]
        self.blobs["/" + name] = (data, etag, last_modified or formatdate(time.time() - 60, usegmt=True))
        return self.url(name)

    def redirect(self, name, target):
        self.redirects["/" + name] = target
        return self.url(name)

    def url(self, name):
        return "%s/%s" % (self.base, name)

    def inject(self, name, kind, times=1, **params):
        self.faults.setdefault("/" + name, []).append(Fault(kind, times, **params))

    def take_fault(self, path):
        with self.lock:
            faults = self.faults.get(path) or []
            if not faults:
                return None
            fault = faults[0]
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    faults.pop(0)
            return fault

    def requests(self, name=None):
        with self.lock:
            return [dict(entry) for entry in self.log if name is None or entry["path"] == "/" + name]

    def record(self, entry):
        with self.lock:
            self.log.append(entry)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        server = self.server.shard_server
        entry = {"path": self.path, "range": self.headers.get("Range"), "if_range": self.headers.get("If-Range"),
                 "authorization": self.headers.get("Authorization"), "host": self.headers.get("Host"),
                 "client": self.client_address[1], "status": None, "sent": 0}
        server.record(entry)
        fault = server.take_fault(self.path)
        if self.path in server.redirects:
            return self._reply(entry, 302, b"", {"Location": server.redirects[self.path]})
        if fault is not None and fault.kind == "status":
            return self._reply(entry, fault.params["code"], b"injected failure\n")
        if self.path not in server.blobs:
            return self._reply(entry, 404, b"not found\n")
        data, etag, last_modified = server.blobs[self.path]
        headers = {"ETag": etag, "Last-Modified": last_modified}
        status, start = 200, 0
        wanted = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if wanted and (if_range in (None, etag, last_modified) or not server.honour_if_range):
            start = int(wanted.split("=")[1].split("-")[0])
            if start >= len(data):
                return self._reply(entry, 416, b"", {"Content-Range": "bytes */%d" % len(data)})
            status = 206
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
        body = data[start:]
        if fault is not None and fault.kind == "corrupt":
            middle = len(body) // 2
            body = body[:middle] + bytes([body[middle] ^ 0xFF]) + body[middle + 1:]
        self._reply(entry, status, body, headers, fault)

    def do_HEAD(self):
        server = self.server.shard_server
        entry = {"path": self.path, "method": "HEAD", "range": None, "if_range": None, "authorization": self.headers.get("Authorization"),
                 "host": self.headers.get("Host"), "client": self.client_address[1], "status": None, "sent": 0}
        server.record(entry)
        fault = server.take_fault(self.path)
        blob = server.blobs.get(self.path)
        entry["status"] = fault.params["code"] if fault is not None and fault.kind == "status" else 200 if blob else 404
        self.send_response(entry["status"])
        if entry["status"] == 200:
            self.send_header("ETag", blob[1])
        self.send_header("Content-Length", str(len(blob[0]) if entry["status"] == 200 else 0))
        self.end_headers()

    def _reply(self, entry, status, body, headers=None, fault=None):
        entry["status"] = status
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        view = memoryview(body)
        try:
            if fault is not None and fault.kind == "truncate":
                self.wfile.write(view[:fault.params["after"]])
                entry["sent"] = min(len(body), fault.params["after"])
                self.close_connection = True
            elif fault is not None and fault.kind == "hold":
                self.wfile.write(view[:fault.params["after"]])
                self.wfile.flush()
                entry["sent"] = min(len(body), fault.params["after"])
                fault.params["release"].wait(HOLD_LIMIT_S)
                self._send_slowly(entry, view[fault.params["after"]:], fault.params.get("rate"))
            elif fault is not None and fault.kind == "slow":
                self._send_slowly(entry, view, fault.params["rate"])
            else:
                self.wfile.write(view)
                entry["sent"] = len(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_slowly(self, entry, view, rate):
        """view at rate bytes/s (None: at once), counting what was sent in entry."""
        step = max(1, rate // 20) if rate else max(1, len(view))
        for offset in range(0, len(view), step):
            self.wfile.write(view[offset:offset + step])
            entry["sent"] += len(view[offset:offset + step])
            if rate:
                time.sleep(0.05)


@pytest.fixture
def shard_server():
    server = ShardServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def make_shards(shard_server):
    """make_shards({"a.tar": 1000, ...}, with_size=True, with_sha=True) -> (shard list, {name: bytes})."""

    def make(sizes, with_size=True, with_sha=True):
        shards, contents = [], {}
        for name, size in sizes.items():
            data = os.urandom(size)
            contents[name] = data
            shard = {"name": name, "url": shard_server.add(name, data)}
            if with_size:
                shard["size"] = size
            if with_sha:
                shard["sha256"] = hashlib.sha256(data).hexdigest()
            shards.append(shard)
        return shards, contents

    return make


class ForwardProxy(object):
    """A forward proxy on 127.0.0.1: absolute-form GETs are sent on to their host (one request per connection), CONNECT
    opens a tunnel. ``seen`` lists each request line it was asked for."""

    def __init__(self):
        self.seen = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                client, _address = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client):
        with client:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = client.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, rest = data.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            method, target, _version = lines[0].split(" ")
            self.seen.append(lines[0])
            if method == "CONNECT":
                host, port = target.rsplit(":", 1)
                with socket.create_connection((host, int(port))) as upstream:
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    self._pipe(client, upstream)
                return
            scheme_host, _slash, path = target[len("http://"):].partition("/")
            host, _colon, port = scheme_host.partition(":")
            kept = [line for line in lines[1:] if not line.lower().startswith(("proxy-", "connection:"))]
            request = "\r\n".join(["%s /%s HTTP/1.1" % (method, path)] + kept + ["Connection: close"]).encode("latin-1") + b"\r\n\r\n"
            with socket.create_connection((host, int(port or 80))) as upstream:
                upstream.sendall(request + rest)
                self._pipe(client, upstream, one_way=True)

    @staticmethod
    def _pipe(client, upstream, one_way=False):
        def copy(source, target):
            try:
                while True:
                    chunk = source.recv(65536)
                    if not chunk:
                        break
                    target.sendall(chunk)
            except OSError:
                pass
            try:
                target.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        if not one_way:
            threading.Thread(target=copy, args=(client, upstream), daemon=True).start()
        copy(upstream, client)

    def close(self):
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def forward_proxy():
    proxy = ForwardProxy()
    yield proxy
    proxy.close()


@pytest.fixture
def self_signed(tmp_path):
    """self_signed(host) -> (the certificate's path, a server SSLContext holding it): a self-signed certificate for host
    (an IP address or a DNS name), which only a client given that file as its CA trusts."""
    # A test that needs a tool gets it or fails, never skips: openssl comes with every Debian and Ubuntu.
    assert shutil.which("openssl"), "openssl is needed to make a test certificate: apt-get install openssl"

    def make(host):
        key, cert = str(tmp_path / ("%s.key" % host)), str(tmp_path / ("%s.pem" % host))
        try:
            ipaddress.ip_address(host)
            alt = "IP:" + host
        except ValueError:
            alt = "DNS:" + host
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1",
                        "-subj", "/CN=" + host, "-addext", "subjectAltName=" + alt], check=True, capture_output=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        return cert, context
    return make


_SYSFS_TREE_DOUBLE = pathlib.Path(__file__).resolve().parents[2] / "test_doubles" / "sysfs_tree" / "build_sysfs_tree.py"
RDMA_SYSFS_FIXTURES = pathlib.Path(__file__).resolve().parent / "module_utils" / "fixtures" / "rdma_sysfs"


@pytest.fixture
def rdma_tree(tmp_path):
    """rdma_tree(*listings) -> (sysfs root, procfs root): the recorded trees of module_utils/fixtures/rdma_sysfs laid out
    in order under tmp_path by the sysfs tree TEST DOUBLE (later listings overwrite earlier ones)."""
    spec = importlib.util.spec_from_file_location("build_sysfs_tree", _SYSFS_TREE_DOUBLE)
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)

    def build(*listings):
        root = tmp_path / "host"
        (root / "sys").mkdir(parents=True, exist_ok=True)
        (root / "proc").mkdir(parents=True, exist_ok=True)
        builder.build(str(root), [str(RDMA_SYSFS_FIXTURES / name) for name in listings])
        return str(root / "sys"), str(root / "proc")
    return build
