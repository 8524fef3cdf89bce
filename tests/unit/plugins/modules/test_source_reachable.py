# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dlinfra.gpu_cluster.plugins.modules import source_reachable


class _Handler(BaseHTTPRequestHandler):
    """/ok answers anything; /no-head refuses HEAD (405) and answers GET; /missing is 404, /broken 500; /moved redirects to
    /ok. A request line with an absolute
    URL is one sent to a proxy: it is answered 200 as a proxy that reached the origin would."""

    def _answer(self):
        self.server.seen.append((self.command, self.path))
        path = self.path if self.path.startswith("/") else "/proxied"
        code = {"/ok": 200, "/proxied": 200, "/missing": 404, "/moved": 301, "/broken": 500}.get(path, 405 if self.command == "HEAD" else 200)
        self.send_response(code)
        if code == 301:
            self.send_header("Location", "/ok")
        # A HEAD's answer says how long the GET's body is, and sends none.
        self.send_header("Content-Length", "0" if self.command == "GET" or code != 200 else "1234")
        self.end_headers()

    do_HEAD = do_GET = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.seen = []
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def base(httpd):
    return "http://127.0.0.1:%d" % httpd.server_address[1]


def closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_module(capsys, monkeypatch, args, environ=None):
    for name in source_reachable.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in (environ or {}).items():
        monkeypatch.setenv(name, value)
    with patch_module_args(dict({"fix": "set example_mirror to a mirror this host reaches"}, **args)):
        with pytest.raises(SystemExit) as exit_info:
            source_reachable.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_apt_proxies_are_read_as_apt_reads_them():
    dump = ('Acquire "";\nAcquire::http "";\nAcquire::http::Proxy "http://cache.example:3142";\n'
            'Acquire::http::Proxy::mirror.example "DIRECT";\n')
    assert source_reachable.apt_proxies(dump) == {"http": "http://cache.example:3142", "https": "http://cache.example:3142"}
    assert source_reachable.apt_proxies('Acquire::http::Proxy "DIRECT";\nAcquire::https::Proxy "http://p:8080";\n') == \
        {"http": "", "https": "http://p:8080"}
    assert source_reachable.apt_proxies('APT::Architecture "amd64";\n') == {"https": ""}


def test_the_environment_proxy_honours_no_proxy_as_curl_does(monkeypatch):
    environ = {"https_proxy": "http://p:3128", "no_proxy": "localhost,.internal.example"}
    for name in source_reachable.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert source_reachable.chosen_proxy("https://nvidia.github.io/x") == ("http://p:3128", "")
    assert source_reachable.chosen_proxy("https://store.internal.example/x") == ("", "")
    assert source_reachable.chosen_proxy("https://internal.example/x") == ("", "")
    assert source_reachable.chosen_proxy("http://nvidia.github.io/x") == ("", "")  # no http_proxy
    monkeypatch.setenv("no_proxy", "*")
    assert source_reachable.chosen_proxy("https://a.example/x") == ("", "")
    # The apt route's setting replaces the environment's proxy; no_proxy still applies, as the staging engine has it.
    monkeypatch.setenv("no_proxy", "")
    assert source_reachable.chosen_proxy("http://deb.example/x", "http://cache:3142") == ("http://cache:3142", "")
    assert source_reachable.chosen_proxy("https://a.example/x", "https://p:1")[1].startswith("proxy https://p:1")


def test_sources_that_answer_pass_and_a_server_that_refuses_head_is_asked_with_get(server, capsys, monkeypatch):
    code, result = run_module(capsys, monkeypatch, {"sources": [
        {"url": base(server) + "/ok", "what": "the key"},
        {"url": base(server) + "/no-head", "what": "the installer"}]})
    assert code == 0, result
    assert [(s["status"], s["error"], s["proxy"]) for s in result["sources"]] == [(200, "", ""), (200, "", "")]
    assert server.seen == [("HEAD", "/ok"), ("HEAD", "/no-head"), ("GET", "/no-head")]
    assert result["changed"] is False


def test_every_source_that_does_not_answer_is_named_with_its_error_the_context_and_the_fix(server, capsys, monkeypatch):
    refused = "http://127.0.0.1:%d/gpgkey" % closed_port()
    code, result = run_module(capsys, monkeypatch, {"context": "nvidia_container_toolkit on gpu1", "sources": [
        {"url": refused, "what": "the repository's signing key"},
        {"url": base(server) + "/ok", "what": "the repository"},
        {"url": base(server) + "/missing", "what": "the installer"}]})
    assert code == 1
    message = result["msg"]
    assert message.startswith("nvidia_container_toolkit on gpu1: cannot reach the repository's signing key, %s: " % refused)
    assert "refused" in message.lower()
    assert "the installer, %s/missing: it answered HTTP 404" % base(server) in message
    assert "the repository," not in message  # it answered
    assert message.endswith("Nothing was changed by this check. set example_mirror to a mirror this host reaches")


def test_a_source_that_does_not_answer_in_time_is_said_so(capsys, monkeypatch):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never answers
    try:
        code, result = run_module(capsys, monkeypatch, {"timeout": 1, "sources": [
            {"url": "http://127.0.0.1:%d/x" % silent.getsockname()[1], "what": "the archive"}]})
    finally:
        silent.close()
    assert code == 1
    assert "no answer within 1 s" in result["msg"]


def test_direct_goes_through_the_environment_proxy_and_credentials_are_hidden(server, capsys, monkeypatch):
    proxy = "http://user:secret@127.0.0.1:%d" % server.server_address[1]
    code, result = run_module(capsys, monkeypatch, {"sources": [
        {"url": "http://vendor.invalid/key?token=abc", "what": "the key"}]}, environ={"http_proxy": proxy})
    assert code == 0, result
    assert server.seen == [("HEAD", "http://vendor.invalid/key?token=abc")]
    assert result["sources"][0]["proxy"] == "http://***@127.0.0.1:%d" % server.server_address[1]
    assert result["sources"][0]["url"] == "http://vendor.invalid/key?token=***"
    # What the module says (its invocation echoes its arguments, as get_url's does the url it downloads).
    said = json.dumps(dict(result, invocation=None))
    assert "secret" not in said and "abc" not in said


def test_apt_goes_through_the_proxy_apt_is_configured_with(server, capsys, monkeypatch):
    port = server.server_address[1]
    monkeypatch.setattr(source_reachable.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/apt-config")
    monkeypatch.setattr(source_reachable.AnsibleModule, "run_command",
                        lambda self, argv, **k: (0, 'Acquire::http::Proxy "http://127.0.0.1:%d";\n' % port, ""))
    code, result = run_module(capsys, monkeypatch, {"sources": [
        {"url": "http://deb.invalid/dists/trixie/InRelease", "what": "the archive", "route": "apt"},
        {"url": "http://127.0.0.1:%d/ok" % closed_port(), "what": "the key"}]})
    # The first went through apt's proxy; the second (direct, no proxy in the environment) found nothing listening.
    assert server.seen == [("HEAD", "http://deb.invalid/dists/trixie/InRelease")]
    assert code == 1 and "cannot reach the key," in result["msg"] and "the archive" not in result["msg"]
    assert result["sources"][0]["proxy"] == "http://127.0.0.1:%d" % port


def test_a_url_that_is_not_http_is_refused_up_front(capsys, monkeypatch):
    code, result = run_module(capsys, monkeypatch, {"context": "anaconda on n1", "sources": [
        {"url": "ftp://mirror/x.sh", "what": "the installer"}]})
    assert code == 1
    assert result["msg"] == "anaconda on n1: ftp://mirror/x.sh is not an http(s) URL (the installer)"


def test_a_redirect_is_followed_and_a_server_error_is_named_with_its_status(server, capsys, monkeypatch):
    code, result = run_module(capsys, monkeypatch, {"sources": [
        {"url": base(server) + "/moved", "what": "the key"}, {"url": base(server) + "/broken", "what": "the archive"}]})
    assert server.seen == [("HEAD", "/moved"), ("HEAD", "/ok"), ("HEAD", "/broken")]
    assert [(s["status"], s["error"]) for s in result["sources"]] == [(200, ""), (500, "it answered HTTP 500 Internal Server Error")]
    assert code == 1 and "cannot reach the archive, %s/broken: it answered HTTP 500" % base(server) in result["msg"]
