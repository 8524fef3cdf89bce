# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small RFB 3.8 client for the remote_desktop scenario: log in with VNC authentication, take one full frame in Raw
encoding and judge whether it shows a desktop. Runs on the test node (molecule/remote_desktop/verify.yml copies it
there), with Debian's python3-pycryptodome for DES.

  python3 rfb_snapshot.py --port 5901 --password-file FILE [--ppm OUT] [--timeout S]

Prints one JSON object. Exit status: 0 a desktop, 1 a frame that is not one (black or nearly one colour),
2 authentication refused (the server's reason in the JSON), 3 anything else (connection, protocol).
"""

import argparse
import json
import socket
import struct
import sys
import time

VERSION = b"RFB 003.008\n"
VNC_AUTH = 2
# 32 bits per pixel, depth 24, little-endian, true colour, 8 bits per channel: red << 16 | green << 8 | blue.
PIXEL_FORMAT = struct.pack("!BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)
RAW = 0

EXIT_DESKTOP, EXIT_NOT_A_DESKTOP, EXIT_AUTH_REFUSED, EXIT_ERROR = 0, 1, 2, 3


class AuthRefused(Exception):
    """The server answered the VNC authentication with a failure."""


def vnc_key(password):
    """The DES key VNC authentication derives from a password: its first 8 bytes, zero-padded, each byte's bits
    reversed (RFB's DES key convention)."""
    raw = password.encode("latin-1")[:8].ljust(8, b"\0")
    return bytes(int("{:08b}".format(byte)[::-1], 2) for byte in raw)


def auth_response(password, challenge):
    """The 16-byte answer to the server's challenge: the challenge DES-encrypted (ECB) with vnc_key(password)."""
    from Cryptodome.Cipher import DES  # Debian's python3-pycryptodome; only where a server is asked
    return DES.new(vnc_key(password), DES.MODE_ECB).encrypt(challenge)


def judge(pixels, width, height, min_colours=8, min_lit=0.05):
    """Whether a frame (4 bytes a pixel, blue green red x) shows a desktop rather than a black or blank screen:
    at least ``min_colours`` distinct colours and at least ``min_lit`` of its pixels not black."""
    total = width * height
    colours = {}
    for offset in range(0, total * 4, 4):
        colour = pixels[offset:offset + 3]
        colours[colour] = colours.get(colour, 0) + 1
    black = colours.get(b"\0\0\0", 0)
    lit = (total - black) / total if total else 0.0
    desktop = len(colours) >= min_colours and lit >= min_lit
    return {"desktop": desktop, "colours": len(colours), "lit_fraction": round(lit, 4), "width": width,
            "height": height}


def recv_exactly(sock, size):
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection after %d of %d bytes" % (len(data), size))
        data += chunk
    return bytes(data)


def handshake(sock, password):
    """Version, VNC authentication and initialisation; returns (width, height, desktop name)."""
    server_version = recv_exactly(sock, 12)
    if not server_version.startswith(b"RFB 003."):
        raise ConnectionError("not an RFB server: %r" % server_version)
    sock.sendall(VERSION)
    count = recv_exactly(sock, 1)[0]
    if count == 0:
        length = struct.unpack("!I", recv_exactly(sock, 4))[0]
        raise ConnectionError("the server refused the connection: %s" % recv_exactly(sock, length).decode("utf-8", "replace"))
    types = recv_exactly(sock, count)
    if VNC_AUTH not in types:
        raise ConnectionError("the server offers security types %s, not VNC authentication (2)" % list(types))
    sock.sendall(bytes([VNC_AUTH]))
    sock.sendall(auth_response(password, recv_exactly(sock, 16)))
    result = struct.unpack("!I", recv_exactly(sock, 4))[0]
    if result != 0:
        length = struct.unpack("!I", recv_exactly(sock, 4))[0]
        raise AuthRefused(recv_exactly(sock, length).decode("utf-8", "replace"))
    sock.sendall(b"\x01")  # ClientInit: share the desktop
    width, height = struct.unpack("!HH", recv_exactly(sock, 4))
    recv_exactly(sock, 16)  # the server's pixel format: replaced below
    name = recv_exactly(sock, struct.unpack("!I", recv_exactly(sock, 4))[0]).decode("utf-8", "replace")
    sock.sendall(struct.pack("!B3x", 0) + PIXEL_FORMAT)
    sock.sendall(struct.pack("!BxHi", 2, 1, RAW))
    return width, height, name


def frame(sock, width, height):
    """One full frame in Raw encoding, 4 bytes a pixel, row by row."""
    pixels = bytearray(width * height * 4)
    covered = 0
    sock.sendall(struct.pack("!BBHHHH", 3, 0, 0, 0, width, height))
    while covered < width * height:
        kind = recv_exactly(sock, 1)[0]
        if kind == 0:  # FramebufferUpdate
            rects = struct.unpack("!xH", recv_exactly(sock, 3))[0]
            for dummy in range(rects):
                x, y, w, h, encoding = struct.unpack("!HHHHi", recv_exactly(sock, 12))
                if encoding != RAW:
                    raise ConnectionError("the server sent encoding %d, asked for Raw only" % encoding)
                data = recv_exactly(sock, w * h * 4)
                for row in range(h):
                    start = ((y + row) * width + x) * 4
                    pixels[start:start + w * 4] = data[row * w * 4:(row + 1) * w * 4]
                covered += w * h
        elif kind == 1:  # SetColourMapEntries: not used in true colour
            count = struct.unpack("!xHH", recv_exactly(sock, 5))[1]
            recv_exactly(sock, count * 6)
        elif kind == 2:  # Bell
            continue
        elif kind == 3:  # ServerCutText
            recv_exactly(sock, struct.unpack("!3xI", recv_exactly(sock, 7))[0])
        else:
            raise ConnectionError("unknown server message type %d" % kind)
    return bytes(pixels)


def write_ppm(path, pixels, width, height):
    rgb = bytearray(width * height * 3)
    rgb[0::3], rgb[1::3], rgb[2::3] = pixels[2::4], pixels[1::4], pixels[0::4]
    with open(path, "wb") as out:
        out.write(b"P6\n%d %d\n255\n" % (width, height) + bytes(rgb))


def snapshot(host, port, password, timeout):
    with socket.create_connection((host, port), timeout=timeout) as sock:
        width, height, name = handshake(sock, password)
        return width, height, name, frame(sock, width, height)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--password-file", required=True, help="a file holding the password (plain text, one line)")
    parser.add_argument("--ppm", help="write the frame there (PPM)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds for each connection")
    parser.add_argument("--wait", type=float, default=0.0,
                        help="seconds to keep taking frames while they show no desktop yet (the session still starting)")
    args = parser.parse_args(argv)
    with open(args.password_file, encoding="utf-8") as handle:
        password = handle.read().rstrip("\n")
    deadline = time.monotonic() + args.wait
    try:
        while True:
            width, height, name, pixels = snapshot(args.host, args.port, password, args.timeout)
            verdict = dict(judge(pixels, width, height), name=name)
            if verdict["desktop"] or time.monotonic() >= deadline:
                break
            time.sleep(1)
    except AuthRefused as error:
        print(json.dumps({"auth": "refused", "reason": str(error)}))
        return EXIT_AUTH_REFUSED
    except (OSError, ConnectionError) as error:
        print(json.dumps({"error": str(error)}))
        return EXIT_ERROR
    if args.ppm:
        write_ppm(args.ppm, pixels, width, height)
    print(json.dumps(dict(verdict, auth="accepted")))
    return EXIT_DESKTOP if verdict["desktop"] else EXIT_NOT_A_DESKTOP


if __name__ == "__main__":
    sys.exit(main())
