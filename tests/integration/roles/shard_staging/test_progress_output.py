# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard_staging role run for real by ansible-playbook (two targets on local connections) against a slow HTTP store:
without -v, the play shows every node's progress at the promised interval, with numbers that grow and an ETA, a cluster
total, and a summary line per node at the end; no "retrying" lines.

Nothing here depends on how busy the machine is. The store paces the nodes by what this test has read: a node's next
shard ends (its last byte is held back) only once both nodes were shown with the shards before it, and its last shard
only once a total counted both nodes. So every node shows growing numbers with an ETA and a cluster total appears, however
slow the looks at the nodes are (on a busy machine, one node once showed a single line in its 8 s run), and the run takes
as long as the machine needs to show that, no longer. Counts are bounded by what the run reports itself (the engine's
elapsed time), never by when this process read a line. The exact schedule (a line every interval, a look at most every
poll, one cluster total per interval) is driven by explicit clocks in tests/unit/plugins/action/test_shard_fetch_wait_action.py."""
import hashlib
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer

from shard_stores import StoreHandler, role_play

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
SHARD_BYTES = 512 * 1024
RATE = 256 * 1024  # bytes per second per connection: 2 s a shard
PER_NODE = 4  # shards each of the two nodes fetches (8 partitioned over 2, one connection each at concurrency 1)
GATE_LIMIT_S = 120  # a safety net: after it the store holds nothing back, and the assertions say what was missing
INTERVAL = 3
POLL = 1
# Looks beyond elapsed / INTERVAL that a node may show: the async module's start before the engine's clock starts, the
# look that sees the end, and the rounding of the summary's seconds (9 s of those). A line per poll (every POLL s) would
# be about INTERVAL / POLL times as many.
SLACK_LOOKS = 3
PLAY_TIMEOUT_S = 600  # a safety net only: the play takes about 25 s
PREPARING = "preparing (reading dest and the journal, planning the transfers)"
PROGRESS = re.compile(r"^(n[01]) ds: (\d+)/(\d+) shards, ([\d.]+ (?:[KMG]i)?B)/([\d.]+ (?:[KMG]i)?B), ([\d.]+ (?:[KMG]i)?B)/s, ETA (.+)$")
SUMMARY = re.compile(r"^(n[01]) ds: done in \S+( \S+)?, (\d+) fetched \((\d+) resumed\), (\d+) confirmed, (\d+) removed, (\d+) failed, "
                     r"([\d.]+ (?:[KMG]i)?B) at ([\d.]+ (?:[KMG]i)?B)/s$")
DONE_IN = re.compile(r" done in (\d+[smhd])(?: (\d+[smhd]))?, ")
DURATION = re.compile(r"^(\d+s|\d+m \d\ds|\d+h \d\dm)$")  # human_duration's forms
COMPLETE_TOTAL = "(2 nodes reporting, 0 done)"


class _SlowStore(StoreHandler):
    def setup(self):
        super().setup()
        self.gets = 0  # on this connection: one node's (each keeps its connection; a new one only makes the pacing looser)

    def do_GET(self):
        data = self._head() or b""
        self.gets += 1
        try:
            for offset in range(0, max(0, len(data) - 1), RATE // 20):
                self.wfile.write(data[offset:min(offset + RATE // 20, len(data) - 1)])
                time.sleep(0.05)
            if self.gets > 1:
                self.server.seen.wait_until_shown(self.gets - 1, with_total=self.gets == PER_NODE)
            self.wfile.write(data[-1:])
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class _Seen(object):
    """What the play has shown so far, line by line, for the store to wait on."""

    def __init__(self, limit_s):
        self.progress = {"n0": [], "n1": []}
        self.complete_total = False
        self.changed = threading.Condition()
        self.deadline = time.monotonic() + limit_s

    def add(self, line):
        match = PROGRESS.match(line)
        with self.changed:
            if match:
                self.progress[match.group(1)].append(match.groups())
            elif line.startswith("all ds: ") and line.endswith(COMPLETE_TOTAL):
                self.complete_total = True
            self.changed.notify_all()

    def _shown(self, shards, with_total):
        done = min(max([int(groups[1]) for groups in shown] or [0]) for shown in self.progress.values())
        return done >= shards and (self.complete_total or not with_total)

    def wait_until_shown(self, shards, with_total):
        """Until every node was shown with at least `shards` done (and, with_total, a total counted both nodes)."""
        with self.changed:
            self.changed.wait_for(lambda: self._shown(shards, with_total), max(0.0, self.deadline - time.monotonic()))


def _grows_with_an_eta(shown):
    done = [(int(groups[1]), mebibytes(groups[3])) for groups in shown]
    etas = [groups[6] for groups in shown if groups[6] != "unknown"]
    return len(shown) >= 2 and done[-1] > done[0] and len(etas) >= 2 and any(mebibytes(groups[5]) > 0 for groups in shown)


def mebibytes(text):
    value, unit = text.split()
    return float(value) * {"B": 1 / 1024 ** 2, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]


def seconds(summary_line):
    """The summary's 'done in' figure in seconds: 'done in 9s' -> 9, 'done in 1m 05s' -> 65."""
    parts = DONE_IN.search(summary_line).groups()
    return sum(int(part[:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[part[-1]] for part in parts if part)


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
    dataset = {"name": "ds", "source": base + "/p-{00..07}.tar", "index": tmp_path / "SHA256SUMS",
               "mode": "partition", "replicas": 1}
    (tmp_path / "play.yml").write_text(role_play(dataset))
    hosts = "".join("    n%d: {ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}', "
                    "shard_staging_root: %s/n%d, "
                    "shard_staging_index: '{{ shard_staging_root }}/datasets.json', shard_staging_concurrency: 1, shard_staging_poll_interval: %d, "
                    "shard_staging_progress_interval: %d}\n" % (i, tmp_path, i, POLL, INTERVAL) for i in range(2))
    (tmp_path / "hosts.yml").write_text("stage_targets:\n  hosts:\n" + hosts)
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path / "tmp"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"))
    command = [sys.executable, "-m", "ansible", "playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")]
    lines = []
    server.seen = _Seen(GATE_LIMIT_S)
    try:
        with subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as play:
            killer = threading.Timer(PLAY_TIMEOUT_S, play.kill)
            killer.start()
            try:
                for line in play.stdout:
                    lines.append(line.rstrip("\n"))
                    server.seen.add(lines[-1])
            finally:
                killer.cancel()
    finally:
        server.seen.deadline = 0  # nothing held back any more
        server.seen.add("")
        server.shutdown()
        server.server_close()
    output = "\n".join(lines)
    assert play.returncode == 0, output

    for node in ("n0", "n1"):
        shown = [PROGRESS.match(line).groups() for line in lines if line.startswith(node + " ds: ") and PROGRESS.match(line)]
        assert _grows_with_an_eta(shown), output
        done = [(int(groups[1]), mebibytes(groups[3])) for groups in shown]
        assert all(groups[2] == str(PER_NODE) and groups[4] == "2.0 MiB" for groups in shown), output
        assert done == sorted(done), output
        assert all(DURATION.match(groups[6]) for groups in shown if groups[6] != "unknown"), output
        summary = [line for line in lines if SUMMARY.match(line) and line.startswith(node + " ")]
        assert len(summary) == 1, output
        assert SUMMARY.match(summary[0]).groups()[2:8] == ("4", "0", "0", "0", "0", "2.0 MiB"), output
        # At the promised interval, not once per poll: the wait shows something (a progress line, or a placeholder before
        # the engine's first progress file) at most every INTERVAL seconds, and it lasts the engine's run (the summary's
        # elapsed time) and a little more.
        reports = len(shown) + lines.count(node + " ds: " + PREPARING)
        elapsed = seconds(summary[0])
        assert reports <= elapsed / INTERVAL + SLACK_LOOKS, (reports, elapsed, output)
    # The cluster total: once both nodes have reported, it counts both. (That it comes once per interval for the whole
    # cluster, not once per node, is the board's rule, tested with explicit times beside the action's other tests.)
    totals = [line for line in lines if line.startswith("all ds: ")]
    complete = [line for line in totals if line.endswith(COMPLETE_TOTAL)]
    assert complete and all(re.search(r": \d/8 shards, [\d.]+ (?:[KM]i)?B/4\.0 MiB, [\d.]+ (?:[KM]i)?B/s, ETA ", line) for line in complete), output
    assert "retrying" not in output.lower()
    # The nodes' progress files and the controller's board are gone with the run.
    assert not list(tmp_path.glob("n*/ds/.shard_fetch.progress*"))
    assert not [path for path in (tmp_path / "tmp").rglob("*") if path.is_file()], list((tmp_path / "tmp").rglob("*"))
