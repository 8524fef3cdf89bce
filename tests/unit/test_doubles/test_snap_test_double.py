# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The snap TEST DOUBLE asks its store over the network before anything that needs it, as snapd does
(tests/test_doubles/snapd/snap.py): the store named by snapd.service's SNAPPY_FORCE_API_URL drop-in, else
api.snapcraft.io. The air-gapped lab's proof that microk8s stops naming microk8s_offline_snaps rests on this."""

from __future__ import annotations

import http.server
import importlib.util
import pathlib
import socket
import threading

import pytest

SOURCE = pathlib.Path(__file__).resolve().parents[3] / "tests" / "test_doubles" / "snapd" / "snap.py"
SPEC = importlib.util.spec_from_file_location("test_double_snap", SOURCE)
snap = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(snap)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node's snapd state and drop-in directory under tmp_path; install places nothing outside it."""
    drop_ins = tmp_path / "snapd.service.d"
    drop_ins.mkdir()
    monkeypatch.setattr(snap, "STATE", str(tmp_path / "state.json"))
    monkeypatch.setattr(snap, "SNAPD_DROP_INS", str(drop_ins / "*.conf"))
    monkeypatch.setattr(snap, "STORE_TIMEOUT", 2)
    monkeypatch.setattr(snap, "place_payload", lambda *args: None)
    return drop_ins


@pytest.fixture
def store():
    """A stand-in store: an HTTP server that answers 404 to everything (any answer counts)."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d/" % server.server_port
    server.shutdown()


def closed_port_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return "http://127.0.0.1:%d/" % sock.getsockname()[1]


def point_at(drop_ins, url, name="store.conf"):
    (drop_ins / name).write_text("[Service]\nEnvironment=SNAPPY_FORCE_API_URL=%s\n" % url)


def test_without_a_drop_in_the_store_is_the_snap_store(node):
    assert snap.store_url() == "https://api.snapcraft.io/"
    (node / "other.conf").write_text("[Service]\nEnvironment=SNAPD_DEBUG=1\n")
    assert snap.store_url() == "https://api.snapcraft.io/"


def test_the_last_drop_in_that_sets_the_store_wins(node):
    point_at(node, "http://first/", "10-first.conf")
    point_at(node, "http://second/", "20-second.conf")
    (node / "30-quoted.conf").write_text('[Service]\nEnvironment="SNAPPY_FORCE_API_URL=http://third:8080/"\n')
    assert snap.store_url() == "http://third:8080/"


def test_connectivity_and_install_with_the_store_answering(node, store, capsys):
    point_at(node, store)
    snap.cmd_debug(["connectivity"])
    assert capsys.readouterr().out == "Connectivity status:\n * 127.0.0.1: reachable\n"
    snap.cmd_install(["--classic", "--channel", "1.32/stable", "microk8s"])
    assert "microk8s (1.32/stable) v1.32.3 from Canonical" in capsys.readouterr().out


def test_without_the_store_connectivity_install_refresh_and_download_fail_as_snap_does(node, store, tmp_path, capsys):
    point_at(node, store)
    snap.cmd_install(["--classic", "--channel", "1.32/stable", "microk8s"])
    url = closed_port_url()
    point_at(node, url)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        snap.cmd_debug(["connectivity"])
    captured = capsys.readouterr()
    assert exit_.value.code == 1
    assert captured.out == "Connectivity status:\n * 127.0.0.1: unreachable\n"
    assert captured.err == "error: 1 servers unreachable\n"
    for command, args, action in ((snap.cmd_refresh, ["--channel", "1.33/stable", "microk8s"], "refresh"),
                                  (snap.cmd_download, ["--target-directory", str(tmp_path), "microk8s"], "download")):
        with pytest.raises(SystemExit):
            command(list(args))
        assert capsys.readouterr().err.startswith('error: cannot %s "microk8s": Post "%sv2/snaps/refresh": dial tcp: ' % (action, url))
    assert snap.load()["snaps"]["microk8s"]["channel"] == "1.32/stable"
    assert not list(tmp_path.glob("microk8s_*"))
    # What is local goes on: holds, and a file install after snap ack.
    snap.cmd_refresh(["--hold", "microk8s"])
    assert snap.load()["snaps"]["microk8s"]["held"]


def test_a_fresh_node_without_the_store_installs_nothing_from_it(node, capsys):
    point_at(node, closed_port_url())
    with pytest.raises(SystemExit):
        snap.cmd_install(["--classic", "--channel", "1.32/stable", "microk8s"])
    assert 'error: cannot install "microk8s"' in capsys.readouterr().err
    assert snap.load()["snaps"] == {}
