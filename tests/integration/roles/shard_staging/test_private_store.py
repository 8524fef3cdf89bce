# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard_staging role run for real by ansible-playbook -vvv (two targets on local connections) against a store that
wants HTTP Basic credentials, given as user info in the source URL, with one shard missing there: the play fails on that
shard only, the store received the Authorization header on every request, and the password appears nowhere: not in the
-vvv output, not in any file under the nodes' dest, not in the controller's plan or lists, and not in any file under the
nodes' remote temporary and async directories, looked at while the fetch runs (from the store, as it answers) and
after it."""
import base64
import hashlib
import json
import math
import os
import pathlib
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.staging_metrics import collect_staging, staging_families

from shard_stores import role_play

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
SECRET = "Pl4y-s3cret-%d" % os.getpid()


class _PrivateStore(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self, body):
        self.server.authorizations.append(self.headers.get("Authorization"))
        data = self.server.blobs.get(self.path.split("?")[0])
        status = 401 if self.headers.get("Authorization") != self.server.expected else (200 if data is not None else 404)
        if self.command == "GET":  # the fetch is running: what its node's Ansible directories hold now
            self.server.seen_during.update(path for root in self.server.watched for path in _holding(root, self.server.secret))
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="store"')
        data = data if status == 200 else b""
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self):
        self._answer(False)

    def do_GET(self):
        self._answer(True)


def _holding(root, secret):
    found = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as handle:
                    if secret.encode() in handle.read():
                        found.append(path)
    return found


def test_a_private_store_gets_its_credentials_and_they_appear_nowhere(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PrivateStore)
    server.daemon_threads = True
    server.expected = "Basic " + base64.b64encode(("reader:" + SECRET).encode()).decode()
    server.authorizations = []
    server.blobs = {}
    server.secret, server.seen_during = SECRET, set()
    server.watched = [tmp_path / "remote_tmp", tmp_path / "async"]
    index = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "ds", "shardlist": []}
    base = "http://127.0.0.1:%d" % server.server_address[1]
    for number in range(6):
        data = bytes([number]) * (10000 + number)
        if number != 3:  # p-03.tar is missing at the store
            server.blobs["/p-%02d.tar" % number] = data
        index["shardlist"].append({"url": "%s/p-%02d.tar" % (base, number), "nsamples": 1, "filesize": len(data),
                                   "sha256": hashlib.sha256(data).hexdigest()})
    (tmp_path / "index.json").write_text(json.dumps(index))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    source = base.replace("http://", "http://reader:%s@" % SECRET) + "/p-{00..05}.tar"
    dataset = {"name": "ds", "source": source, "index": tmp_path / "index.json", "mode": "partition", "replicas": 1}
    (tmp_path / "play.yml").write_text(role_play(dataset))
    hosts = "".join("    n%d: {ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}', "
                    "shard_staging_root: %s/n%d, "
                    "shard_staging_index: '{{ shard_staging_root }}/datasets.json', "
                    "shard_staging_poll_interval: 1, shard_staging_retries: 0}\n" % (i, tmp_path, i)
                    for i in range(2))
    (tmp_path / "hosts.yml").write_text("stage_targets:\n  hosts:\n" + hosts)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"),
               ANSIBLE_REMOTE_TMP=str(tmp_path / "remote_tmp"), ANSIBLE_ASYNC_DIR=str(tmp_path / "async"))
    command = [sys.executable, "-m", "ansible", "playbook", "-vvv", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")]
    try:
        play = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    finally:
        server.shutdown()
        server.server_close()
    output = play.stdout + play.stderr

    assert play.returncode != 0, output
    assert "p-03.tar" in output and "HTTP 404" in output, output
    assert SECRET not in output
    staged = sorted(name for node in ("n0", "n1") for name in os.listdir(tmp_path / node / "ds") if name.startswith("p-"))
    assert staged == ["p-00.tar", "p-01.tar", "p-02.tar", "p-04.tar", "p-05.tar"]
    # What monitoring (gpu_monitoring's collector) reads from the index the role wrote: the node that met the 404 failed.
    results = {}
    for node in ("n0", "n1"):
        families = staging_families()
        assert collect_staging(families, str(tmp_path / node / "datasets.json")) == []
        (result,) = [dict(labels)["result"] for labels, value in families["dlinfra_staging_last_run_result"].samples if value]
        results[node] = result
        assert [value for _labels, value in families["dlinfra_staging_up"].samples] == [True]
        # The free bytes the plan keeps (the default headroom, 0.05 of the filesystem; no reserve), on dest's mount.
        stats = os.statvfs(tmp_path / node / "ds")
        ((labels, headroom),) = [(dict(labels), value) for labels, value in families["dlinfra_staging_headroom_bytes"].samples]
        assert headroom == math.ceil(0.05 * stats.f_blocks * stats.f_frsize)
        assert (os.path.realpath(tmp_path / node / "ds") + "/").startswith(labels["mountpoint"].rstrip("/") + "/"), labels
    assert sorted(results.values()) == ["failed", "succeeded"]
    assert _holding(tmp_path / "n0", SECRET) == [] and _holding(tmp_path / "n1", SECRET) == []
    assert _holding(tmp_path / ".shard_staging", SECRET) == []  # the plan and the lists, beside the inventory
    assert server.authorizations and set(server.authorizations) == {server.expected}
    # The async job's payload (its module arguments) lives as long as the fetch: the credentials are not in it. They
    # come in access.json (0600), which a node's fetch removes as it starts; the two nodes share one temporary directory
    # here, so one node's may be seen while the other's fetch runs.
    assert (tmp_path / "async").is_dir()
    assert [path for path in server.seen_during if os.path.basename(path) != "access.json"] == []
    assert [path for root in server.watched for path in _holding(root, SECRET)] == []
