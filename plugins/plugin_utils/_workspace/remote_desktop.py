# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private. The problems the remote_desktop role's preflight reports: pure Python.

``preflight_problems`` turns the role's settings and what preflight found on the host into one line per problem, each
naming the variable and the fix; the role fails once, listing them all. A password never appears in a line: only its
user and its length do.
"""

import ipaddress
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.role_inputs import check_keys, joined

SETTINGS = ("distribution", "major_version", "releases", "users", "listen", "listen_beyond_localhost")
FOUND = ("accounts", "listening", "active_displays", "fqdn")

BASE_PORT = 5900
DISPLAYS = range(1, 100)
# vncpasswd refuses fewer than 6 characters; VNC authentication uses the first 8 (DES key) and ignores the rest.
PASSWORD_MIN, PASSWORD_MAX = 6, 8
LOCALHOST = ("localhost", "127.0.0.1")
_GEOMETRY = re.compile(r"^[1-9][0-9]{2,4}x[1-9][0-9]{2,4}$")
_USER_NAME = re.compile(r"^[a-z_][a-z0-9_.-]*[$]?$")


def listening_ports(lines):
    """{port: [local addresses]} of the TCP listeners in ``lines``, the output of ``ss -Hltn`` (State, Recv-Q, Send-Q,
    Local Address:Port, Peer Address:Port)."""
    ports = {}
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[3]:
            continue
        address, port = fields[3].rsplit(":", 1)
        if port.isdigit():
            ports.setdefault(int(port), []).append(address)
    return ports


def _display(user):
    display = user.get("display")
    return display if isinstance(display, int) and not isinstance(display, bool) else None


def _user_problems(index, user, accounts):
    name = user.get("name") or ""
    label = "remote_desktop_users[%d] (%s)" % (index, name or "no name")
    problems = []
    if not name:
        problems.append("%s has no name; set name to the login of an existing user" % label)
    elif not _USER_NAME.match(name):
        problems.append("%s: '%s' is not a user name" % (label, name))
    elif name not in accounts:
        problems.append("%s: user %s does not exist on this host; create it first (the users role or your directory "
                        "service) or take it out of remote_desktop_users" % (label, name))
    if _display(user) not in DISPLAYS:
        problems.append("%s: display %r is not a number from 1 to 99; set display: N, the server then listens on port "
                        "590N" % (label, user.get("display")))
    password = user.get("password")
    if password is None or password == "":
        problems.append("%s has no password; set password to a vaulted string of %d to %d characters (ansible-vault "
                        "encrypt_string)" % (label, PASSWORD_MIN, PASSWORD_MAX))
    elif not isinstance(password, str):
        problems.append("%s: the password is not a string; quote it" % label)
    elif len(password) < PASSWORD_MIN:
        problems.append("%s: the password has %d characters, VNC requires at least %d; set a longer one"
                        % (label, len(password), PASSWORD_MIN))
    elif len(password) > PASSWORD_MAX:
        problems.append("%s: the password has %d characters, but VNC authentication uses only the first %d and "
                        "ignores the rest; set one of %d to %d characters (the SSH tunnel is the strong lock)"
                        % (label, len(password), PASSWORD_MAX, PASSWORD_MIN, PASSWORD_MAX))
    geometry = user.get("geometry")
    if geometry is not None and not _GEOMETRY.match(str(geometry)):
        problems.append("%s: geometry '%s' is not WIDTHxHEIGHT (for example 1920x1080)" % (label, geometry))
    return problems


def _listen_problems(listen, beyond_localhost):
    if listen in LOCALHOST:
        return []
    try:
        address = ipaddress.ip_address(listen)
    except ValueError:
        return ["remote_desktop_listen='%s' is not localhost or an IP address of this host; the VNC server listens on "
                "one address" % listen]
    if address.is_loopback:
        return []
    if not beyond_localhost:
        return ["remote_desktop_listen=%s opens the desktops beyond this host, where VNC's 8-character password and "
                "unencrypted screen are all that protect them; keep localhost and use the SSH tunnel (ssh -L "
                "5901:localhost:5901 user@node), or set remote_desktop_listen_beyond_localhost: true to accept that"
                % listen]
    return []


def preflight_problems(settings, found):
    """One line per problem in ``settings`` (keys SETTINGS) and ``found`` (keys FOUND); empty when the role can go on.

    settings: distribution and major_version (the host's), releases (the releases the role supports there),
    users (remote_desktop_users), listen (remote_desktop_listen), listen_beyond_localhost (its opt-in).
    found: accounts (the host's user names), listening (``ss -Hltn`` lines), active_displays (the displays whose
    tigervncserver@:N unit is active: their port is in use by this role's own server), fqdn (``hostname -f``'s answer,
    empty where it failed).
    """
    check_keys("settings", settings, SETTINGS)
    check_keys("found", found, FOUND)
    problems = []
    if settings["major_version"] not in settings["releases"]:
        problems.append("%s %s is not supported by remote_desktop; supported %s releases: %s"
                        % (settings["distribution"], settings["major_version"], settings["distribution"],
                           joined(settings["releases"]) or "none"))
    if not found.get("fqdn"):
        problems.append("the host's name does not resolve (hostname -f fails), and tigervncserver stops without its fully "
                        "qualified name; add the name to /etc/hosts or the DNS")
    users = settings["users"] or []
    if not isinstance(users, list):
        return problems + ["remote_desktop_users is not a list; give one entry {name, display, password} per user"]
    accounts = set(found.get("accounts") or [])
    listening = listening_ports(found.get("listening") or [])
    active = set(found.get("active_displays") or [])
    for index, user in enumerate(users):
        if not isinstance(user, dict):
            problems.append("remote_desktop_users[%d] is not a mapping; give {name, display, password}" % index)
            continue
        problems.extend(_user_problems(index, user, accounts))
        display = _display(user)
        port = BASE_PORT + display if display in DISPLAYS else None
        if port in listening and display not in active:
            problems.append("remote_desktop_users[%d] (%s): port %d (display :%d) is already in use by another process "
                            "(listening on %s); choose a free display, or stop what listens there"
                            % (index, user.get("name"), port, display, joined(listening[port])))
    entries = [user for user in users if isinstance(user, dict)]
    for what, key in (("display", _display), ("user", lambda user: user.get("name"))):
        values = [key(user) for user in entries if key(user) is not None]
        twice = sorted({value for value in values if values.count(value) > 1}, key=str)
        if twice:
            problems.append("remote_desktop_users gives the same %s more than once: %s; each user gets one display of "
                            "their own" % (what, joined(":%s" % value if what == "display" else value
                                                        for value in twice)))
    problems.extend(_listen_problems(settings["listen"], settings["listen_beyond_localhost"]))
    return problems
