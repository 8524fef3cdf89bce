# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/harness/lab/rfb_snapshot.py, the remote_desktop scenario's VNC client: its judgement fails a black or blank frame
and passes a desktop's, and its RFB 3.8 exchange (against a scripted server here; the scenario runs it against
TigerVNC) tells an accepted login from a refused one. DES itself is Debian's pycryptodome on the node: replaced here."""

import importlib.util
import pathlib
import socket
import struct
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("rfb_snapshot", ROOT / "tests" / "harness" / "lab" / "rfb_snapshot.py")
rfb = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rfb)

WIDTH, HEIGHT = 40, 30


def frame_of(colour_at):
    return b"".join(bytes(colour_at(x, y)) + b"\0" for y in range(HEIGHT) for x in range(WIDTH))


BLACK = frame_of(lambda x, y: (0, 0, 0))
GREY = frame_of(lambda x, y: (80, 80, 120))
# A background, a bar at the bottom with a few colours, some text-like dots.
DESKTOP = frame_of(lambda x, y: (200, 200, 200) if y > 25 else ((x * 6) % 256, y * 8, 90) if x < 8 else (80, 80, 120))


def test_the_vnc_key_reverses_each_byte_and_pads_or_cuts_to_8():
    assert rfb.vnc_key("a") == bytes([0x86, 0, 0, 0, 0, 0, 0, 0])
    assert rfb.vnc_key("abcdefghij") == rfb.vnc_key("abcdefgh")
    assert rfb.vnc_key("\x01\x80") == bytes([0x80, 0x01, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("pixels, desktop", [(BLACK, False), (GREY, False), (DESKTOP, True)],
                         ids=["black", "one-colour", "desktop"])
def test_the_judgement(pixels, desktop):
    verdict = rfb.judge(pixels, WIDTH, HEIGHT)
    assert verdict["desktop"] is desktop
    assert verdict["lit_fraction"] == (0.0 if pixels is BLACK else 1.0)


def serve(listener, accept, pixels):
    """One RFB 3.8 session: VNC authentication, accepted or refused, then the frame in two Raw rectangles."""
    conn, dummy = listener.accept()
    with conn:
        conn.sendall(b"RFB 003.008\n")
        assert rfb.recv_exactly(conn, 12) == b"RFB 003.008\n"
        conn.sendall(bytes([1, 2]))
        assert rfb.recv_exactly(conn, 1) == b"\x02"
        conn.sendall(b"C" * 16)
        assert rfb.recv_exactly(conn, 16) == b"R" * 16
        if not accept:
            reason = b"Authentication failed"
            conn.sendall(struct.pack("!II", 1, len(reason)) + reason)
            return
        conn.sendall(struct.pack("!I", 0))
        assert rfb.recv_exactly(conn, 1) == b"\x01"
        name = b"node:1 (alice)"
        conn.sendall(struct.pack("!HH", WIDTH, HEIGHT) + bytes(16) + struct.pack("!I", len(name)) + name)
        assert rfb.recv_exactly(conn, 20)[4:] == rfb.PIXEL_FORMAT
        assert rfb.recv_exactly(conn, 8) == struct.pack("!BxHi", 2, 1, 0)
        assert rfb.recv_exactly(conn, 10) == struct.pack("!BBHHHH", 3, 0, 0, 0, WIDTH, HEIGHT)
        conn.sendall(b"\x02")  # a bell first
        half = HEIGHT // 2
        rows = WIDTH * 4
        conn.sendall(struct.pack("!BxH", 0, 2))
        conn.sendall(struct.pack("!HHHHi", 0, half, WIDTH, HEIGHT - half, 0) + pixels[half * rows:])
        conn.sendall(struct.pack("!HHHHi", 0, 0, WIDTH, half, 0) + pixels[:half * rows])


@pytest.mark.parametrize("accept", [True, False], ids=["accepted", "refused"])
def test_a_session(monkeypatch, tmp_path, capsys, accept):
    monkeypatch.setattr(rfb, "auth_response", lambda password, challenge: b"R" * 16)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    server = threading.Thread(target=serve, args=(listener, accept, DESKTOP))
    server.start()
    (tmp_path / "pw").write_text("fixture1\n")
    ppm = tmp_path / "frame.ppm"
    code = rfb.main(["--port", str(listener.getsockname()[1]), "--password-file", str(tmp_path / "pw"),
                     "--ppm", str(ppm), "--timeout", "5"])
    server.join(5)
    listener.close()
    out = capsys.readouterr().out
    if accept:
        assert code == rfb.EXIT_DESKTOP, out
        assert '"name": "node:1 (alice)"' in out
        assert ppm.read_bytes()[:12] == b"P6\n40 30\n255"
        body = ppm.read_bytes()[len(b"P6\n40 30\n255\n"):]
        assert body[:3] == bytes(reversed(DESKTOP[:3]))
    else:
        assert code == rfb.EXIT_AUTH_REFUSED and '"reason": "Authentication failed"' in out
        assert not ppm.exists()
