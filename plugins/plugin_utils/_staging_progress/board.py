# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the controller-side board where the waits of a run's nodes (separate processes under forks) post their
latest progress, so that one of them prints the cluster total once per interval."""

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from urllib.parse import quote


class Board(object):
    """The controller-side directory where each node's wait posts its latest progress, for the cluster-wide total."""

    def __init__(self, run_id, hosts, root=None):
        root = root or os.path.join(tempfile.gettempdir(), "dlinfra-shard-fetch-wait-%d" % os.getuid())
        self.directory = os.path.join(root, hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:24])
        self.hosts = sorted(set(hosts))
        os.makedirs(self.directory, mode=0o700, exist_ok=True)

    def _path(self, host):
        return os.path.join(self.directory, quote(host, safe="") + ".json")

    def post(self, host, progress):
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=".post.")
        with os.fdopen(fd, "w") as handle:
            json.dump(progress, handle)
        os.replace(temp, self._path(host))

    def entries(self):
        found = {}
        for host in self.hosts:
            try:
                with open(self._path(host)) as handle:
                    found[host] = json.load(handle)
            except (OSError, ValueError):
                continue
        return found

    def claim_total(self, interval, now=None):
        """True for the first caller in each interval (across processes): that one prints the total."""
        now = time.time() if now is None else now
        fd = os.open(os.path.join(self.directory, ".total"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                last = float(os.pread(fd, 64, 0) or 0)
            except ValueError:
                last = 0.0
            if now - last < interval / 2.0:
                return False
            stamp = repr(now).encode("ascii")
            os.ftruncate(fd, 0)
            os.pwrite(fd, stamp, 0)
            return True
        finally:
            os.close(fd)

    def finish(self, host, progress):
        """Post the node's final numbers; the last node to finish removes the board."""
        self.post(host, progress)
        entries = self.entries()
        if all(entries.get(other, {}).get("done") for other in self.hosts):
            shutil.rmtree(self.directory, ignore_errors=True)
