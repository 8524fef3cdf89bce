# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the shard_staging role tests share: the play that runs the role with one dataset, a file:// store of shards
with their SHA256SUMS, free ports for the nodes' peer servers, and the HTTP stores' handler: the shards in server.blobs
({path: bytes}), HEAD answered with their length and an ETag, 404 for anything else. A test's store adds its own do_GET
(paced, gated, ...)."""
import hashlib
import json
import socket
from http.server import BaseHTTPRequestHandler


def role_play(dataset):
    """A playbook running the role on stage_targets with the one dataset entry ``dataset`` (a dict)."""
    return ("- hosts: stage_targets\n  gather_facts: false\n  roles:\n    - role: shard_staging\n      vars:\n"
            "        shard_staging_datasets:\n          - %s\n" % json.dumps(dataset, default=str))


def file_source(directory, count):
    """``count`` shards c-00.tar, c-01.tar, ... of distinct bytes and sizes in ``directory``, with their SHA256SUMS."""
    directory.mkdir()
    sums = []
    for i in range(count):
        data = bytes([i]) * (5000 + i)
        (directory / ("c-%02d.tar" % i)).write_bytes(data)
        sums.append("%s  c-%02d.tar\n" % (hashlib.sha256(data).hexdigest(), i))
    (directory / "SHA256SUMS").write_text("".join(sums))
    return directory


def free_ports(count):
    sockets = [socket.socket() for unused in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class StoreHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _head(self):
        """Send the status and headers of self.path; its bytes, or None when the store has no such shard."""
        data = self.server.blobs.get(self.path)
        self.send_response(200 if data is not None else 404)
        self.send_header("Content-Length", str(len(data) if data is not None else 0))
        if data is not None:
            self.send_header("ETag", '"%s"' % hashlib.sha256(data).hexdigest()[:16])
        self.end_headers()
        return data

    def do_HEAD(self):
        self._head()
