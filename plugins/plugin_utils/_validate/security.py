# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's security.listeners: every TCP socket a node listens on beyond loopback belongs to a service that
authenticates whoever connects.

The node's raw data hold what ``ss -Hltnpe`` printed (``security.ss``, with ``security.ss_error`` where it failed) and
the user names of ``getent passwd``; ``expected.security_accepted`` lists the listeners that authenticate: the ones the
collection starts (SSH, MicroK8s, node exporter and Prometheus unless gpu_monitoring_web_open, Jupyter Lab, VNC) and
the site's own (validate_security_accepted_listeners). An entry matches a socket on every field it gives: ``unit`` (a
glob of the systemd unit, which ss reads from the socket's cgroup even where it may not name the process),
``process`` (the name ss shows) and ``port``; ``why`` says how it authenticates.
"""

import fnmatch

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.sockets import is_loopback, listening
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.result import check

NAME = "security.listeners"
FIX = ("stop it, bind it to 127.0.0.1, or, where it does authenticate, accept it in "
       "validate_security_accepted_listeners ({unit, process or port, why})")


def accepting(socket, entries):
    """The first of ``entries`` that matches ``socket`` on every field it gives; None where none does."""
    for entry in entries or []:
        if not any(entry.get(field) not in (None, "") for field in ("unit", "process", "port")):
            continue  # an entry that names nothing accepts nothing
        if entry.get("port") not in (None, "") and int(entry["port"]) != socket["port"]:
            continue
        if entry.get("unit") and not fnmatch.fnmatchcase(socket["unit"], str(entry["unit"])):
            continue
        if entry.get("process") and entry["process"] not in [name for name, _pid in socket["processes"]]:
            continue
        return entry
    return None


def _users(passwd_lines):
    users = {}
    for line in passwd_lines or []:
        fields = line.split(":")
        if len(fields) > 2 and fields[2].isdigit():
            users.setdefault(int(fields[2]), fields[0])
    return users


def _describe(socket, users):
    who = (", ".join("%s pid %d" % process for process in socket["processes"]) or socket["unit"]
           or "a process ss cannot name")
    if socket["unit"] and socket["processes"]:
        who += ", " + socket["unit"]
    user = users.get(socket["uid"], "uid %d" % socket["uid"])
    return "%s:%d (%s; user %s)" % (socket["address"], socket["port"], who, user)


def listeners_check(raw):
    """security.listeners for one node, from its raw data."""
    security = raw.get("security") or {}
    if security.get("ss_error"):
        return check(NAME, "fail", "could not list the listening sockets (ss -Hltnpe: %s); install iproute2"
                     % security["ss_error"], "every listener authenticates", "unread")
    users, entries = _users(security.get("passwd")), (raw.get("expected") or {}).get("security_accepted") or []
    beyond = [socket for socket in listening(security.get("ss") or []) if not is_loopback(socket["address"])]
    open_ = [socket for socket in beyond if accepting(socket, entries) is None]
    if open_:
        return check(NAME, "fail", "%d socket(s) answer beyond this host without an authentication validate knows of: "
                                   "%s; fix: %s" % (len(open_), "; ".join(_describe(s, users) for s in open_), FIX),
                     "every listener authenticates", "%d open" % len(open_))
    kept = sorted({(socket["port"], accepting(socket, entries).get("why") or "") for socket in beyond})
    if not kept:
        return check(NAME, "pass", "nothing listens beyond loopback", "every listener authenticates", "none")
    ports = len({port for port, _why in kept})
    return check(NAME, "pass", "%d port(s) beyond loopback, each authenticating: %s"
                 % (ports, "; ".join("%d (%s)" % pair for pair in kept)),
                 "every listener authenticates", "all %d" % ports)
