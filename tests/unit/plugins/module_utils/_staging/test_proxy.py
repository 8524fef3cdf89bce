# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxies: the choice of proxy per origin as curl makes it, and a real forward proxy in the test that must see every
request to the store when a proxy is set, none for a host in no_proxy, and HTTPS through a CONNECT tunnel."""

import socket
import ssl
import threading

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import fetcher
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.proxy_rules import Proxies, ProxyError

from engine_helpers import FAST

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY")


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("no_proxy, host, bypass", [
    ("*", "store.example", True),
    ("example.org", "example.org", True),
    ("example.org", "store.example.org", True),
    (".example.org", "store.example.org", True),
    (".example.org", "example.org", True),
    ("example.org", "badexample.org", False),
    ("store.example.org", "example.org", False),
    ("EXAMPLE.org", "Store.example.ORG", True),
    ("10.0.0.0/8", "10.1.2.3", True),
    ("10.0.0.0/8", "11.1.2.3", False),
    ("192.168.1.5", "192.168.1.5", True),
    ("::1", "[::1]", True),
    ("localhost, 127.0.0.1", "127.0.0.1", True),
    ("localhost 127.0.0.1", "127.0.0.1", True),
    ("", "store", False),
])
def test_no_proxy_matches_as_curl_does(no_proxy, host, bypass):
    proxies = Proxies(environ={"http_proxy": "http://proxy:3128", "no_proxy": no_proxy})
    assert proxies.bypass(host) is bypass
    assert (proxies.for_origin("http", host) is None) is bypass


def test_the_environment_names_a_proxy_per_scheme():
    assert Proxies(environ={"HTTP_PROXY": "http://cgi:1"}).for_origin("http", "store") is None  # upper case: ignored, as by curl
    proxies = Proxies(environ={"http_proxy": "http://plain:3128", "HTTPS_PROXY": "tls-proxy:8080"})
    assert (proxies.for_origin("http", "store").host, proxies.for_origin("http", "store").port) == ("plain", 3128)
    assert (proxies.for_origin("https", "store").host, proxies.for_origin("https", "store").port) == ("tls-proxy", 8080)
    fallback = Proxies(environ={"ALL_PROXY": "http://all:1"})
    assert fallback.for_origin("http", "a").host == fallback.for_origin("https", "a").host == "all"


def test_an_explicit_proxy_replaces_the_environment_and_empty_means_none():
    environ = {"http_proxy": "http://env:1", "no_proxy": "near"}
    assert Proxies("http://u:p%40ss@mine:8888", environ).for_origin("http", "far").host == "mine"
    assert Proxies("http://u:p%40ss@mine:8888", environ).for_origin("http", "far").authorization == "Basic dTpwQHNz"
    assert Proxies("http://mine:8888", environ).for_origin("https", "near") is None
    assert Proxies("", environ).for_origin("http", "far") is None


def test_an_unusable_proxy_is_refused_without_showing_its_password():
    with pytest.raises(ProxyError, match="only http:// proxies") as raised:
        Proxies("socks5://user:s3cret@proxy:1080")
    assert "s3cret" not in str(raised.value)


def test_http_proxy_sees_every_request_and_none_for_a_no_proxy_host(tmp_path, make_shards, shard_server, forward_proxy, monkeypatch):
    shards, _contents = make_shards({"a.tar": 5000, "b.tar": 70000})
    monkeypatch.setenv("http_proxy", forward_proxy.url)

    proxied = stage(shards, str(tmp_path / "via-proxy"), **FAST)

    assert (proxied["fetched"], proxied["failed_shards"]) == (2, [])
    assert sorted(forward_proxy.seen) == sorted("GET %s HTTP/1.1" % shard["url"] for shard in shards)

    forward_proxy.seen.clear()
    monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
    direct = stage(shards, str(tmp_path / "direct"), **FAST)

    assert (direct["fetched"], direct["failed_shards"]) == (2, [])
    assert forward_proxy.seen == []


def test_https_goes_through_the_proxy_with_connect(tmp_path, forward_proxy, monkeypatch, self_signed):
    cert, context = self_signed("127.0.0.1")
    body = b"tls through a tunnel" * 100
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_once():
        conn, _address = listener.accept()
        with context.wrap_socket(conn, server_side=True) as tls:
            data = b""
            while b"\r\n\r\n" not in data:
                data += tls.recv(65536)
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))

    threading.Thread(target=serve_once, daemon=True).start()
    monkeypatch.setenv("https_proxy", forward_proxy.url)
    real_default_context = ssl.create_default_context
    monkeypatch.setattr(fetcher.ssl, "create_default_context", lambda **kwargs: real_default_context(cafile=cert))
    url = "https://127.0.0.1:%d/t.tar" % port

    result = stage([{"name": "t.tar", "url": url, "size": len(body)}], str(tmp_path / "dest"), retries=0, **FAST)

    listener.close()
    assert (result["fetched"], result["failed_shards"]) == (1, [])
    assert (tmp_path / "dest" / "t.tar").read_bytes() == body
    assert forward_proxy.seen == ["CONNECT 127.0.0.1:%d HTTP/1.1" % port]
