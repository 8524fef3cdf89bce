# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private stores through stage(): credentials reach the store, and never the result, an error message, or any file in
dest (journal, state files, hand-off lists), in a run that fails on one shard and succeeds on the others; a private CA."""

import http.server
import os
import ssl
import threading

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import fetcher
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.handoff import write_handoff
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import basic_authorization

from engine_helpers import FAST, KIB

SECRET = "s3cret-Pa55"


def _files_holding(root, secret):
    found = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                if secret.encode() in handle.read():
                    found.append(path)
    return found


def test_url_user_info_is_used_and_never_shown(tmp_path, make_shards, shard_server):
    shards, _contents = make_shards({"a.tar": 4 * KIB, "b.tar": 200 * KIB, "gone.tar": KIB})
    shard_server.inject("gone.tar", "status", code=404, times=None)
    shard_server.inject("b.tar", "truncate", after=100 * KIB)  # leaves a part file and its state behind, then resumes
    for shard in shards:
        shard["url"] = shard["url"].replace("http://", "http://reader:%s@" % SECRET)
    dest = str(tmp_path / "dest")

    result = stage(shards, dest, retries=1, checkpoint_bytes=64 * KIB, **FAST)
    write_handoff(dest, [shard for shard in shards if shard["name"] != "gone.tar"], 2,
                  streamed=[{"name": "s.tar", "url": "http://reader:%s@store/s.tar?sig=%s" % (SECRET, SECRET)}])

    assert result["fetched"] == 2 and [failure["name"] for failure in result["failed_shards"]] == ["gone.tar"]
    assert result["failed_shards"][0]["url"] == shard_server.url("gone.tar").replace("http://", "http://***@")
    assert SECRET not in repr(result)
    assert _files_holding(dest, SECRET) == []
    expected = basic_authorization("reader", SECRET)
    assert {request["authorization"] for request in shard_server.requests()} == {expected}


def test_source_access_headers_and_basic_credentials_reach_the_store_only(tmp_path, make_shards, shard_server):
    shards, _contents = make_shards({"a.tar": KIB, "gone.tar": KIB})
    shard_server.inject("gone.tar", "status", code=403, times=None)

    result = stage(shards, str(tmp_path), source_access={"headers": {"Authorization": "Bearer " + SECRET}}, **FAST)

    assert result["fetched"] == 1 and SECRET not in repr(result)
    assert {request["authorization"] for request in shard_server.requests()} == {"Bearer " + SECRET}
    shard_server.log.clear()
    stage(shards[:1], str(tmp_path / "other"), source_access={"url_username": "reader", "url_password": SECRET}, **FAST)
    assert [request["authorization"] for request in shard_server.requests()] == [basic_authorization("reader", SECRET)]


@pytest.mark.parametrize("access, problem", [
    ({"headers": {"X-Token": "a\r\nInjected: yes"}}, "the value of X-Token must be a one-line string"),
    ({"headers": {"Bad Name": SECRET}}, "is not a header name"),
    ({"url_password": SECRET}, "url_password is set but url_username is not"),
    ({"proxy": "socks5://user:%s@proxy:1080" % SECRET}, "only http:// proxies"),
    ({"ca_file": "/nonexistent/ca.pem"}, "ca_file /nonexistent/ca.pem cannot be read"),
    ({"token": SECRET}, "source_access has unknown keys token"),
])
def test_unusable_source_access_is_refused_before_anything_changes_without_showing_secrets(tmp_path, access, problem):
    with pytest.raises(StagingError) as raised:
        stage([{"name": "a.tar", "url": "http://127.0.0.1:9/a.tar"}], str(tmp_path / "dest"), source_access=access, **FAST)
    assert problem in str(raised.value)
    assert SECRET not in str(raised.value)
    assert not (tmp_path / "dest").exists()


def test_a_private_ca_is_refused_naming_the_host_then_accepted_with_ca_file(tmp_path, self_signed):
    cert, context = self_signed("localhost")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"private" * 100
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    shard = {"name": "p.tar", "url": "https://localhost:%d/p.tar" % server.server_address[1]}
    try:
        refused = stage([shard], str(tmp_path / "refused"), retries=2, **FAST)
        accepted = stage([shard], str(tmp_path / "accepted"), source_access={"ca_file": cert}, **FAST)
    finally:
        server.shutdown()
    (failure,) = refused["failed_shards"]
    assert failure["reason"].startswith("the TLS certificate of localhost could not be verified")
    assert "ca_file" in failure["reason"]
    assert (accepted["fetched"], accepted["failed_shards"]) == (1, [])
    assert (tmp_path / "accepted" / "p.tar").read_bytes() == b"private" * 100
    assert fetcher.ssl is ssl
