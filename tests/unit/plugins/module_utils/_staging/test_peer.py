# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Peer-assisted staging on one machine: several engine runs ("nodes", each its own dest and peer port on 127.0.0.1)
against the tests' shard server, which counts what the source sent."""

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import transfer
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.input import ShardListFile
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import JOURNAL_NAME
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.peer import PeerServer, PeerSources
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage

FAST = dict(backoff=0.001, backoff_max=0.01, timeout=5)
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
TOKEN = "t0k3n-of-this-run-0123456789"
KIB = 1024
NODES = ("n1", "n2", "n3", "n4")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peer_settings(shards, ports, node, wait=10.0, linger=10.0):
    """What the planner gives ``node`` for a replicated dataset: shard i is seeded by NODES[i % 4], the others ask it."""
    names = [shard["name"] for shard in shards]
    seeder = {name: NODES[index % len(NODES)] for index, name in enumerate(names)}
    return dict(node=node, address="127.0.0.1", port=ports[node], token=TOKEN,
                peers={other: "http://127.0.0.1:%d" % ports[other] for other in NODES if other != node},
                sources={name: seeder[name] for name in names if seeder[name] != node},
                downstream=[other for other in NODES if other != node], wait=wait, linger=linger)


def run_nodes(tmp_path, shards, ports, nodes=NODES, list_file=None, **settings):
    """Each node's run in its own thread; with list_file, the nodes are given it (a ShardListFile) instead of shards."""
    results = {}

    def one(node):
        given = shards if list_file is None else ShardListFile(str(list_file))
        results[node] = stage(given, str(tmp_path / node), concurrency=3, peer=peer_settings(shards, ports, node, **settings), **FAST)

    threads = [threading.Thread(target=one, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def assert_holds_everything(dest, contents):
    assert sorted(name for name in os.listdir(dest) if not name.startswith(".")) == sorted(contents)
    for name, data in contents.items():
        with open(os.path.join(dest, name), "rb") as handle:
            assert hashlib.sha256(handle.read()).hexdigest() == hashlib.sha256(data).hexdigest(), name


@pytest.fixture
def ports():
    return {node: free_port() for node in NODES}


def test_each_shard_leaves_the_source_once_and_every_node_holds_all(tmp_path, make_shards, shard_server, ports):
    shards, contents = make_shards({"s-%03d.tar" % i: (40 + i) * KIB for i in range(24)})
    results = run_nodes(tmp_path, shards, ports)
    total = sum(len(data) for data in contents.values())
    for node in NODES:
        result = results[node]
        assert result["failed_shards"] == [] and result["fetched"] == 24, result
        assert_holds_everything(tmp_path / node, contents)
        assert result["peers"]["bad_data"] == [] and result["peers"]["given_up"] == {}
        assert result["peers"]["not_done"] == []
        assert result["from_peers"] == 18
    for name in contents:
        assert len(shard_server.requests(name)) == 1, name
    assert sum(r["peers"]["source_bytes"] for r in results.values()) == total
    assert sum(r["peers"]["peer_bytes"] for r in results.values()) == 3 * total
    assert sum(r["peers"]["served_bytes"] for r in results.values()) == 3 * total

    again = run_nodes(tmp_path, shards, ports)
    for node in NODES:
        assert (again[node]["fetched"], again[node]["confirmed"], again[node]["changed"]) == (0, 24, False)
        assert again[node]["peers"]["peer_bytes"] == again[node]["peers"]["served_bytes"] == 0
    assert len(shard_server.requests()) == 24


def test_a_peer_that_never_comes_costs_time_not_correctness(tmp_path, make_shards, shard_server, ports):
    shards, contents = make_shards({"s-%03d.tar" % i: 32 * KIB for i in range(12)})
    results = run_nodes(tmp_path, shards, ports, nodes=NODES[:3], wait=1.0, linger=2.0)
    for node in NODES[:3]:
        result = results[node]
        assert result["failed_shards"] == [], result
        assert_holds_everything(tmp_path / node, contents)
        assert list(result["peers"]["given_up"]) == ["n4"], result["peers"]
        assert result["peers"]["not_done"] == ["n4"]
    # n4's three shards came from the source once per node that needed them; the others once.
    counts = {name: len(shard_server.requests(name)) for name in contents}
    assert sorted(counts.values()) == [1] * 9 + [3] * 3


def test_complete_nodes_confirm_from_their_journal_and_still_serve_a_new_node(tmp_path, make_shards, shard_server, ports,
                                                                              monkeypatch):
    shards, contents = make_shards({"s-%03d.tar" % i: 32 * KIB for i in range(12)})
    list_file = tmp_path / "shards.json"
    list_file.write_text(json.dumps(shards))
    first = run_nodes(tmp_path, shards, ports, nodes=NODES[:3], list_file=list_file, wait=1.0, linger=2.0)
    assert all(first[node]["failed_shards"] == [] for node in NODES[:3])
    reads, real_load = [], ShardListFile.load
    monkeypatch.setattr(ShardListFile, "load", lambda listed: reads.append(listed) or real_load(listed))
    requests_before = len(shard_server.requests())

    again = run_nodes(tmp_path, shards, ports, list_file=list_file)

    # Only the new node parsed the list; the others confirmed everything from their journal and served it.
    assert len(reads) == 1
    for node in NODES[:3]:
        assert (again[node]["fetched"], again[node]["confirmed"], again[node]["changed"]) == (0, 12, False)
    assert_holds_everything(tmp_path / "n4", contents)
    assert (again["n4"]["fetched"], again["n4"]["from_peers"]) == (12, 9)
    assert sum(again[node]["peers"]["served_bytes"] for node in NODES[:3]) == again["n4"]["peers"]["peer_bytes"] == 9 * 32 * KIB
    assert len(shard_server.requests()) - requests_before == 3


def test_a_peer_killed_mid_run_then_a_rerun_completes_it(tmp_path, make_shards, shard_server, ports):
    shards, contents = make_shards({"s-%03d.tar" % i: 256 * KIB for i in range(8)})
    # n1 seeds s-000 and s-004. The source sends the first 64 KiB of each and then holds them until n1 is dead, so n1 is
    # killed mid-transfer while the others wait for those shards, however slowly anything runs (with a merely slow source,
    # a busy machine let n1 finish and hand them on before the kill, and nobody gave n1 up). Whoever asks the source for
    # them before the release waits too.
    release = threading.Event()
    for index, shard in enumerate(shards):
        if index % 4 == 0:
            shard_server.inject(shard["name"], "hold", times=None, after=64 * KIB, release=release)
    config = dict(shards=shards, dest=str(tmp_path / "n1"), concurrency=3, peer=peer_settings(shards, ports, "n1"), **FAST)
    config_path = tmp_path / "n1.json"
    config_path.write_text(json.dumps(config))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, "collections"))
    child = subprocess.Popen([sys.executable, "-m", transfer.__name__, str(config_path)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    others = {}
    threads = [threading.Thread(target=lambda n=n: others.update({n: stage(shards, str(tmp_path / n), concurrency=3,
                                                                           peer=peer_settings(shards, ports, n, wait=3.0, linger=5.0),
                                                                           **FAST)}))
               for n in NODES[1:]]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60  # a safety net: n1 starts and asks the source within seconds
        while time.monotonic() < deadline and not any(entry["sent"] for entry in shard_server.requests("s-000.tar")):
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stderr.close()
    finally:
        release.set()
    for thread in threads:
        thread.join(60)
    for node in NODES[1:]:
        assert others[node]["failed_shards"] == [], others[node]
        assert_holds_everything(tmp_path / node, contents)
        # They stopped waiting for n1 and name it: given up (no answer for `wait` s) when n1 died before it answered
        # them, or its shards waited out (`wait` s since they were first put off) when it had answered "not yet" before
        # it died. Which one is a matter of timing (n1 answered before its kill on a busy machine); both are right.
        peers = others[node]["peers"]
        assert "n1" in peers["given_up"] or peers["waited_out"].get("n1"), peers
        assert peers["not_done"] == ["n1"] and not peers["from_peers"].get("n1"), peers
    # Killed mid-run: whatever n1 shows under a final name is whole.
    for name in os.listdir(tmp_path / "n1"):
        if not name.startswith("."):
            assert (tmp_path / "n1" / name).read_bytes() == contents[name]

    result = stage(shards, str(tmp_path / "n1"), concurrency=3, **FAST)
    assert result["failed_shards"] == []
    assert_holds_everything(tmp_path / "n1", contents)
    assert not [name for name in os.listdir(tmp_path / "n1") if name.endswith(".part")]


class _LyingPeer(BaseHTTPRequestHandler):
    """A peer that answers the token and serves every shard with one byte flipped. Its X-Shard-Sha256 names the true
    content (what it staged) when ``true_header``, else the damaged body's own hash."""
    protocol_version = "HTTP/1.1"
    contents = {}
    true_header = True

    def log_message(self, *args):
        pass

    def do_GET(self):
        name = self.path.rsplit("/", 1)[1]
        if self.path.startswith("/done/"):
            body, digest = b"ok\n", ""
        else:
            body = bytearray(self.contents[name])
            body[len(body) // 2] ^= 0xFF
            body = bytes(body)
            digest = hashlib.sha256(self.contents[name] if self.true_header else body).hexdigest()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Shard-Sha256", digest)
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("index_has_sha256", [True, False])
def test_bad_bytes_from_a_peer_are_rejected_refetched_from_the_source_and_named(tmp_path, make_shards, shard_server, monkeypatch,
                                                                                index_has_sha256):
    shards, contents = make_shards({"a.tar": 64 * KIB, "b.tar": 64 * KIB}, with_sha=index_has_sha256)
    monkeypatch.setattr(_LyingPeer, "contents", contents)
    liar = ThreadingHTTPServer(("127.0.0.1", 0), _LyingPeer)
    threading.Thread(target=liar.serve_forever, daemon=True).start()
    try:
        peer = dict(node="n2", token=TOKEN, peers={"bad": "http://127.0.0.1:%d" % liar.server_address[1]},
                    sources={"a.tar": "bad"}, wait=2.0)
        result = stage(shards, str(tmp_path / "n2"), peer=peer, **FAST)
    finally:
        liar.shutdown()
        liar.server_close()
    assert result["failed_shards"] == []
    assert_holds_everything(tmp_path / "n2", contents)
    assert [(bad["peer"], bad["name"]) for bad in result["peers"]["bad_data"]] == [("bad", "a.tar")]
    assert "sha256" in result["peers"]["bad_data"][0]["reason"]
    assert len(shard_server.requests("a.tar")) == 1 and result["from_peers"] == 0


# ---------------------------------------------------------------------------------------------
# The peer endpoint refuses what it must not serve
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def endpoint(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "ready.tar").write_bytes(b"r" * 1000)
    (dest / "other.tar").write_bytes(b"o" * 10)
    (dest / ".ready.tar.part").write_bytes(b"partial")
    (dest / JOURNAL_NAME).write_text("{}")
    outside = tmp_path / "secret"
    outside.write_text("secret")
    server = PeerServer(str(dest), "127.0.0.1", free_port(), TOKEN, ["ready.tar", "pending.tar", "link.tar"], ["n2"], 1.0)
    info = os.stat(dest / "ready.tar")
    server.publish("ready.tar", info.st_size, info.st_mtime_ns, hashlib.sha256(b"r" * 1000).hexdigest())
    os.symlink(str(outside), str(dest / "link.tar"))
    server.publish("link.tar", 6, 0, "0" * 64)
    server.start()
    yield server
    server.stop()


def ask(server, method, path, token=TOKEN, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = "Bearer " + token
        conn.request(method, path, headers=sent)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_endpoint_serves_a_published_shard_with_the_token(endpoint):
    status, body = ask(endpoint, "GET", "/shards/ready.tar")
    assert (status, body) == (200, b"r" * 1000)
    assert ask(endpoint, "HEAD", "/shards/ready.tar") == (200, b"")
    etag = '"sha256-%s"' % hashlib.sha256(b"r" * 1000).hexdigest()
    status, body = ask(endpoint, "GET", "/shards/ready.tar", headers={"Range": "bytes=990-", "If-Range": etag})
    assert (status, body) == (206, b"r" * 10)


@pytest.mark.parametrize("token", [None, "", "wrong-token-0123456789", TOKEN + "x", TOKEN[:-1]])
def test_endpoint_refuses_requests_without_the_token(endpoint, token):
    assert ask(endpoint, "GET", "/shards/ready.tar", token=token)[0] == 401
    assert ask(endpoint, "GET", "/done/n2", token=token)[0] == 401
    assert endpoint.done == set()


@pytest.mark.parametrize("path", ["/shards/other.tar", "/shards/../secret", "/shards/%2e%2e%2fsecret", "/shards/..%2Fsecret",
                                  "/shards/.ready.tar.part", "/shards/" + JOURNAL_NAME, "/ready.tar", "/", "/etc/passwd",
                                  "/shards/link.tar", "/shards/ready.tar/x"])
def test_endpoint_refuses_paths_outside_the_published_shards(endpoint, path):
    status, body = ask(endpoint, "GET", path)
    assert status == 404, (path, body)
    assert b"secret" not in body and b"partial" not in body


def test_endpoint_says_come_back_for_a_shard_not_staged_yet(endpoint):
    assert ask(endpoint, "GET", "/shards/pending.tar")[0] == 503
    endpoint.fail("pending.tar")
    assert ask(endpoint, "GET", "/shards/pending.tar")[0] == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND"])
def test_endpoint_refuses_methods_other_than_get_and_head(endpoint, method):
    assert ask(endpoint, method, "/shards/ready.tar")[0] in (405, 501)


def test_a_published_shard_changed_on_disk_is_not_served(endpoint, tmp_path):
    with open(tmp_path / "dest" / "ready.tar", "ab") as handle:
        handle.write(b"tampered")
    assert ask(endpoint, "GET", "/shards/ready.tar")[0] == 404


def test_the_server_waits_for_its_downstream_then_stops(endpoint):
    # A linger far beyond the downstream's word: n2's "done" ends the wait, however late a busy machine delivers it
    # (with the fixture's 1 s, a word 0.3 s late by the timer could come after the linger).
    endpoint.linger = 60.0
    started = time.monotonic()
    threading.Timer(0.3, lambda: ask(endpoint, "GET", "/done/n2")).start()
    assert endpoint.wait_for_downstream() == []
    assert time.monotonic() - started < 30  # not the linger
    endpoint.stop()
    with pytest.raises(OSError):
        ask(endpoint, "GET", "/shards/ready.tar")


def test_a_node_done_before_its_peer_started_still_tells_it(tmp_path, make_shards, shard_server, ports):
    shards, contents = make_shards({"s-%03d.tar" % i: 16 * KIB for i in range(8)})
    run_nodes(tmp_path, shards, ports, nodes=NODES[:2], wait=2.0, linger=2.0)  # n1 and n2 hold n1's and n2's shards
    results = {}
    # n1 takes shards from n2 only; n2 serves n1 only.
    n1_settings = peer_settings(shards, ports, "n1", linger=60.0)
    n1_settings.update(sources={name: "n2" for name in n1_settings["sources"]}, downstream=[])
    first = threading.Thread(target=lambda: results.update(n1=stage(shards, str(tmp_path / "n1"), concurrency=3, peer=n1_settings,
                                                                    **FAST)))
    first.start()
    time.sleep(1.0)  # n1 has nothing to fetch: it is done, and tells n2, before n2's server is up
    started = time.monotonic()
    results["n2"] = stage(shards, str(tmp_path / "n2"), concurrency=3,
                          peer=dict(peer_settings(shards, ports, "n2", linger=60.0), sources={}, downstream=["n1"]), **FAST)
    first.join(90)
    assert results["n2"]["peers"]["not_done"] == []
    assert time.monotonic() - started < 30  # not the 60 s linger (half of it: room for a busy machine)


def test_a_shard_that_waited_out_its_peer_is_counted_under_that_peer(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    sources = PeerSources(TOKEN, {"gpu1": "http://gpu1:8473"}, {"a.tar": "gpu1", "b.tar": "gpu1"}, wait=10.0)
    assert sources.may_wait("a.tar") and sources.may_wait("b.tar")
    clock[0] += 9.9
    assert sources.may_wait("a.tar") and sources.waited_out == {}
    clock[0] += 0.2
    assert not sources.may_wait("a.tar") and not sources.may_wait("a.tar")  # counted once
    assert sources.waited_out == {"gpu1": 1}
    assert not sources.may_wait("b.tar")
    assert sources.waited_out == {"gpu1": 2}


class _DroppingPeer(BaseHTTPRequestHandler):
    """A peer whose first answer for a shard breaks off after ``cut`` bytes; later asks with Range and the If-Range of its
    sha256 ETag get the rest (206), as PeerServer answers them. ``asked`` records each request's Range."""
    protocol_version = "HTTP/1.1"
    contents = {}
    asked = []
    cut = 0

    def log_message(self, *args):
        pass

    def do_GET(self):
        name = self.path.rsplit("/", 1)[1]
        if self.path.startswith("/done/"):
            self.send_response(200)
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")
            return
        data = self.contents[name]
        etag = '"sha256-%s"' % hashlib.sha256(data).hexdigest()
        ranged = self.headers.get("Range")
        self.asked.append(ranged)
        start = int(ranged[6:-1]) if ranged and self.headers.get("If-Range") == etag else 0
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("ETag", etag)
        self.send_header("X-Shard-Sha256", hashlib.sha256(data).hexdigest())
        if start:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        self.end_headers()
        if len(self.asked) == 1:
            self.wfile.write(data[:self.cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(data[start:])


def test_a_transfer_from_a_peer_that_breaks_off_goes_on_from_where_it_stopped(tmp_path, make_shards, shard_server, monkeypatch):
    shards, contents = make_shards({"a.tar": 512 * KIB})
    monkeypatch.setattr(_DroppingPeer, "contents", contents)
    monkeypatch.setattr(_DroppingPeer, "asked", [])
    monkeypatch.setattr(_DroppingPeer, "cut", 300 * KIB)
    peer_server = ThreadingHTTPServer(("127.0.0.1", 0), _DroppingPeer)
    threading.Thread(target=peer_server.serve_forever, daemon=True).start()
    try:
        peer = dict(node="n2", token=TOKEN, peers={"n1": "http://127.0.0.1:%d" % peer_server.server_address[1]},
                    sources={"a.tar": "n1"}, wait=5.0)
        result = stage(shards, str(tmp_path / "n2"), peer=peer, **FAST)
    finally:
        peer_server.shutdown()
        peer_server.server_close()
    assert result["failed_shards"] == [] and result["from_peers"] == 1
    assert_holds_everything(tmp_path / "n2", contents)
    assert _DroppingPeer.asked == [None, "bytes=%d-" % (300 * KIB)]
    assert result["peers"]["from_peers"] == {"n1": 512 * KIB}  # every byte once: nothing received twice
    assert shard_server.requests() == []
