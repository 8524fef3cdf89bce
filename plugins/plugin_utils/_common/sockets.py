# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the listening sockets a node's ``ss -Hltnpe`` printed, read once for every role and check that asks.

Each line is State, Recv-Q, Send-Q, Local-Address:Port, Peer-Address:Port, then the process column
(``users:(("name",pid=N,fd=M),...)``) where root may trace the listener (not always in a container), ``uid:N`` where
the owner is not root, and ``cgroup:PATH``, whose last ``*.service`` names the systemd unit.
"""

import ipaddress
import re

_PROCESS = re.compile(r'\("([^"]*)",pid=(\d+)')
_UID = re.compile(r"\buid:(\d+)\b")
_CGROUP = re.compile(r"cgroup:\S*/([^/\s]+\.service)(?:\s|$)")


def listening(ss_lines):
    """One dict per listening socket: address (as ss prints it, ``*``, ``0.0.0.0``, ``[::]``, ``127.0.0.53%lo``),
    port (int), processes ([(name, pid)]), uid (int; 0 where ss shows none) and unit (the systemd unit, or '')."""
    found = []
    for line in ss_lines:
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[3]:
            continue
        address, _sep, port = fields[3].rpartition(":")
        if not port.isdigit():
            continue
        uid, unit = _UID.search(line), _CGROUP.search(line)
        found.append({"address": address, "port": int(port),
                      "processes": [(name, int(pid)) for name, pid in _PROCESS.findall(line)],
                      "uid": int(uid.group(1)) if uid else 0, "unit": unit.group(1) if unit else ""})
    return found


def is_loopback(address):
    """Whether a listener on this address answers this host alone (127.0.0.0/8, ::1, an address scoped to lo)."""
    address = address.strip("[]")
    host, _sep, scope = address.partition("%")
    if scope == "lo" or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
