# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the role tests' HTTP stores share: the shards in server.blobs ({path: bytes}), HEAD answered with their
length and an ETag, 404 for anything else. A test's store adds its own do_GET (paced, gated, ...)."""
import hashlib
from http.server import BaseHTTPRequestHandler


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
