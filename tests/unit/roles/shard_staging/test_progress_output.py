# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard_staging role run for real by ansible-playbook (two targets on local connections) against a slow HTTP store:
without -v, the play shows every node's progress at the promised interval, with numbers that grow and an ETA, a cluster
total, and a summary line per node at the end; no "retrying" lines."""
import hashlib
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
SHARD_BYTES = 512 * 1024
RATE = 256 * 1024  # bytes per second per connection: 2 s a shard
INTERVAL = 2
PLAYBOOK = """
- hosts: stage_targets
  gather_facts: false
  roles:
    - role: shard_staging
      vars:
        shard_staging_datasets:
          - {name: ds, source: "%(base)s/p-{00..07}.tar", index: "%(index)s", mode: partition, replicas: 1}
"""
PROGRESS = re.compile(r"^(n[01]) ds: (\d+)/(\d+) shards, ([\d.]+ [kMG]?B)/([\d.]+ [kMG]?B), ([\d.]+ [kMG]?B)/s, ETA (.+)$")
SUMMARY = re.compile(r"^(n[01]) ds: done in \S+( \S+)?, (\d+) fetched \((\d+) resumed\), (\d+) confirmed, (\d+) removed, (\d+) failed, "
                     r"([\d.]+ [kMG]?B) at ([\d.]+ [kMG]?B)/s$")


class _SlowStore(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _head(self):
        data = self.server.blobs.get(self.path)
        self.send_response(200 if data is not None else 404)
        self.send_header("Content-Length", str(len(data) if data is not None else 0))
        if data is not None:
            self.send_header("ETag", '"%s"' % hashlib.sha256(data).hexdigest()[:16])
        self.end_headers()
        return data

    def do_HEAD(self):
        self._head()

    def do_GET(self):
        data = self._head()
        step = RATE // 20
        try:
            for offset in range(0, len(data or b""), step):
                self.wfile.write(data[offset:offset + step])
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def megabytes(text):
    value, unit = text.split()
    return float(value) * {"B": 1e-6, "kB": 1e-3, "MB": 1, "GB": 1e3}[unit]


def test_a_slow_store_shows_growing_progress_with_an_eta_then_a_summary(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowStore)
    server.daemon_threads = True
    server.blobs = {}
    sums = []
    for index in range(8):
        data = bytes([index]) * SHARD_BYTES
        server.blobs["/p-%02d.tar" % index] = data
        sums.append("%s  p-%02d.tar\n" % (hashlib.sha256(data).hexdigest(), index))
    (tmp_path / "SHA256SUMS").write_text("".join(sums))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    base = "http://127.0.0.1:%d" % server.server_address[1]
    (tmp_path / "play.yml").write_text(PLAYBOOK % {"base": base, "index": tmp_path / "SHA256SUMS"})
    hosts = "".join("    n%d: {ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}', "
                    "shard_staging_root: %s/n%d, shard_staging_concurrency: 1, shard_staging_poll_interval: 1, "
                    "shard_staging_progress_interval: %d}\n" % (i, tmp_path, i, INTERVAL) for i in range(2))
    (tmp_path / "hosts.yml").write_text("stage_targets:\n  hosts:\n" + hosts)
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path / "tmp"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"))
    command = [sys.executable, "-m", "ansible", "playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")]
    lines = []
    try:
        with subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as play:
            for line in play.stdout:
                lines.append((time.monotonic(), line.rstrip("\n")))
        returncode = play.returncode
    finally:
        server.shutdown()
        server.server_close()
    output = "\n".join(line for _at, line in lines)
    assert returncode == 0, output

    for node in ("n0", "n1"):
        shown = [(at, PROGRESS.match(line).groups()) for at, line in lines if line.startswith(node + " ds: ") and PROGRESS.match(line)]
        assert len(shown) >= 2, output
        done = [(int(groups[1]), megabytes(groups[3])) for _at, groups in shown]
        assert all(groups[2] == "4" and groups[4] == "2.1 MB" for _at, groups in shown), output
        assert done == sorted(done) and done[-1] > done[0], output
        etas = [groups[6] for _at, groups in shown if groups[6] != "unknown"]
        assert len(etas) >= 2 and all(re.match(r"^\d+s$", eta) for eta in etas), output
        assert any(megabytes(groups[5]) > 0 for _at, groups in shown), output
        # At the promised interval: a line every INTERVAL seconds (give or take a look at the node on a busy machine), not one
        # per poll (every second).
        gaps = [later - earlier for (earlier, _g), (later, _h) in zip(shown, shown[1:])]
        assert all(gap <= INTERVAL + 2.5 for gap in gaps), (gaps, output)
        assert len(shown) <= (shown[-1][0] - shown[0][0]) / INTERVAL + 2, (gaps, output)
        summary = [SUMMARY.match(line).groups() for _at, line in lines if SUMMARY.match(line) and line.startswith(node + " ")]
        assert len(summary) == 1, output
        assert summary[0][2:7] == ("4", "0", "0", "0", "0") and summary[0][7] == "2.1 MB", output
    # The cluster total, once per interval; once both nodes have reported, it counts both.
    totals = [line for _at, line in lines if line.startswith("all ds: ")]
    complete = [line for line in totals if line.endswith("(2 nodes reporting, 0 done)")]
    assert complete and all(re.search(r": \d/8 shards, [\d.]+ [kM]?B/4\.2 MB, [\d.]+ [kM]?B/s, ETA ", line) for line in complete), output
    assert len(totals) <= max(len([line for _at, line in lines if PROGRESS.match(line) and line.startswith(node)]) for node in ("n0", "n1"))
    assert "retrying" not in output.lower()
    # The nodes' progress files and the controller's board are gone with the run.
    assert not list(tmp_path.glob("n*/ds/.shard_fetch.progress*"))
    assert not [path for path in (tmp_path / "tmp").rglob("*") if path.is_file()], list((tmp_path / "tmp").rglob("*"))
