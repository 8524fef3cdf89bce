# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's HTTP client: headers and credentials to the asked origin only, the proxy rules, file:// and paths."""
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.proxy_rules import ProxyError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.http_client import USER_AGENT, HttpClient, read_url

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY")


@pytest.fixture
def no_proxy_environment(monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_a_get_carries_the_user_agent_headers_and_basic_credentials(shard_server, no_proxy_environment):
    shard_server.add("index.json", b'{"x": 1}')
    client = HttpClient({"X-Team": "ml"}, user="reader", password="s3cret", user_agent="agent/2")
    assert read_url(shard_server.url("index.json"), 5, client) == '{"x": 1}'
    assert [entry["authorization"] for entry in shard_server.requests()] == ["Basic cmVhZGVyOnMzY3JldA=="]
    assert HttpClient().user_agent == USER_AGENT


def test_an_authorization_header_wins_over_the_user_info(no_proxy_environment):
    assert HttpClient({"Authorization": "Bearer t"}, user="reader", password="x").headers == {"Authorization": "Bearer t"}


def test_a_redirect_to_another_origin_does_not_carry_the_credentials(shard_server, no_proxy_environment):
    shard_server.add("data.tar", b"x" * 10)
    shard_server.redirect("moved.tar", shard_server.url("data.tar").replace("127.0.0.1", "localhost"))
    with HttpClient(user="reader", password="s3cret").open(shard_server.url("moved.tar"), "GET", 5) as response:
        assert response.read() == b"x" * 10
    assert [entry["authorization"] for entry in shard_server.requests()] == ["Basic cmVhZGVyOnMzY3JldA==", None]


def test_requests_go_through_the_proxy_the_rules_choose(shard_server, forward_proxy, monkeypatch, no_proxy_environment):
    shard_server.add("d-0.tar", b"x" * 100)
    monkeypatch.setenv("http_proxy", forward_proxy.url)
    with HttpClient().open(shard_server.url("d-0.tar"), "HEAD", 5) as response:
        assert response.headers["Content-Length"] == "100"
    assert forward_proxy.seen == ["HEAD %s HTTP/1.1" % shard_server.url("d-0.tar")]
    forward_proxy.seen.clear()
    with HttpClient(proxy="").open(shard_server.url("d-0.tar"), "HEAD", 5):
        pass
    assert forward_proxy.seen == []  # "" is no proxy, whatever the environment says


def test_a_proxy_it_cannot_use_is_refused_when_the_client_is_made():
    with pytest.raises(ProxyError, match="only http:// proxies are supported"):
        HttpClient(proxy="socks5://proxy:1080")


def test_file_urls_and_paths_are_read_on_the_controller(tmp_path):
    (tmp_path / "my index.json").write_text("[]")
    assert read_url("file://%s/my%%20index.json" % tmp_path, 5) == "[]"
    assert read_url(str(tmp_path / "my index.json"), 5) == "[]"
