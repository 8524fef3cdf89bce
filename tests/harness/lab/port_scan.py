"""A TCP connect scan, run on a lab host against another: which ports of HOST accept a connection from here.

    python3 port_scan.py HOST [FIRST-LAST|P,P,...]     prints one open port a line (all 65535 by default)

Stdlib only, so that it runs on any lab node. A connection refused answers at once on a reachable host; the scan
opens many sockets side by side and waits at most a second on each (a firewall that drops makes each port cost that
second: scan such a host's listening ports only).
"""
import socket
import sys
from concurrent.futures import ThreadPoolExecutor


def accepts(host, port):
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    spec = argv[2] if len(argv) == 3 else "1-65535"
    if "," in spec:
        ports = [int(port) for port in spec.split(",")]
    else:
        first, _sep, last = spec.partition("-")
        ports = range(int(first), int(last or first) + 1)
    with ThreadPoolExecutor(max_workers=256) as pool:
        for port, is_open in zip(ports, pool.map(lambda p: accepts(argv[1], p), ports)):
            if is_open:
                print(port)


if __name__ == "__main__":
    main(sys.argv)
