# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard_staging role run for real by ansible-playbook (one target on a local connection): a play killed while its
fetch runs leaves that fetch running on the node, and the next play waits for it, showing its progress, then completes
dest from where it left it, instead of stopping on the lock.

Nothing here depends on timing: the store holds back the last byte of every shard until this test opens its gate, and
it opens it only once the second play has shown the earlier fetch's progress (a safety net opens it after GATE_LIMIT_S,
and the assertions then say what was missing)."""
import hashlib
import os
import pathlib
import signal
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer

from shard_stores import StoreHandler, role_play

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
GATE_LIMIT_S = 120
PLAY_TIMEOUT_S = 300
SHARDS = 4
WAITING = "n0 ds: waiting for an earlier run's fetch, still at work here: "


class _GatedStore(StoreHandler):
    def do_GET(self):
        data = self._head() or b""
        try:
            self.wfile.write(data[:-1])
            self.wfile.flush()
            self.server.gate.wait(GATE_LIMIT_S)
            self.wfile.write(data[-1:])
        except (BrokenPipeError, ConnectionResetError):
            pass


def _store(tmp_path):
    blobs = {"/g-%d.tar" % i: bytes([i]) * (64 * 1024 + i) for i in range(SHARDS)}
    index = tmp_path / "SHA256SUMS"
    index.write_text("".join("%s  %s\n" % (hashlib.sha256(data).hexdigest(), path[1:]) for path, data in sorted(blobs.items())))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GatedStore)
    server.daemon_threads = True
    server.blobs, server.gate = blobs, threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, index


def _play(tmp_path):
    command = [sys.executable, "-m", "ansible", "playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")]
    return subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=dict(os.environ, ANSIBLE_FORCE_COLOR="0"))


def _read_until(process, wanted, seen):
    """Lines of process into seen until one starts with wanted (True) or the output ends (False)."""
    for line in process.stdout:
        seen.append(line.rstrip("\n"))
        if line.startswith(wanted):
            return True
    return False


def test_a_killed_play_leaves_its_fetch_running_and_the_next_play_waits_for_it_then_completes(tmp_path):
    server, index = _store(tmp_path)
    dest = tmp_path / "n0" / "ds"
    (tmp_path / "hosts.yml").write_text(
        "stage_targets:\n  hosts:\n    n0: {ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}', "
        "shard_staging_root: %s/n0, "
        "shard_staging_index: '{{ shard_staging_root }}/datasets.json', shard_staging_poll_interval: 1, shard_staging_progress_interval: 1}\n" % tmp_path)
    dataset = {"name": "ds", "source": "http://127.0.0.1:%d/g-{0..3}.tar" % server.server_address[1], "index": index,
               "mode": "replicate"}
    (tmp_path / "play.yml").write_text(role_play(dataset))
    first = second = None
    try:
        first = _play(tmp_path)
        first_lines = []
        assert _read_until(first, "TASK [shard_staging : Wait for every node's fetch", first_lines), "\n".join(first_lines)
        # The controller is lost: the play and its workers end, the fetch started as an async job goes on.
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)

        second = _play(tmp_path)
        second_lines = []
        attached = _read_until(second, WAITING, second_lines)
        server.gate.set()
        rest, _unused = second.communicate(timeout=PLAY_TIMEOUT_S)
        output = "\n".join(second_lines) + "\n" + rest
        assert attached, output
        assert second.returncode == 0, output
        assert "is locked by another shard_fetch run" not in output
        assert "an earlier run's fetch (pid " in output and "waited for it" in output, output
        assert sorted(p.name for p in dest.glob("*.tar")) == ["g-%d.tar" % i for i in range(SHARDS)]
        assert all((dest / name[1:]).read_bytes() == data for name, data in server.blobs.items())
    finally:
        server.gate.set()
        for process in (first, second):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)
        server.shutdown()
