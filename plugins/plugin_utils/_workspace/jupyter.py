# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the anaconda role's Jupyter Lab decisions, pure Python.

``jupyter_problems`` turns anaconda_jupyter_* and what preflight found on the node into one line per problem, each
naming the variable and the fix. ``server_config`` is a user's jupyter_server_config.json. ``listeners`` and
``main_pids`` read ``ss -ltnpeH`` and ``systemctl show --property Id,MainPID`` output. ``restarts`` says whose server
restarts.
"""

import re

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.role_inputs import check_keys, joined
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.sockets import is_loopback, listening
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.tls import certificate_problems

SETTINGS = ("users", "ip", "certfile", "keyfile", "environments", "unit")
FOUND = ("passwd", "listeners", "main_pids", "cert_exists", "key_exists", "cert_pubkey", "key_pubkey")

_USER_KEYS = ("name", "port", "password_hash", "token", "environments")
_HASH_LENGTHS = {"sha1": 40, "sha256": 64, "sha512": 128}
_SALTED = re.compile(r"^(sha1|sha256|sha512):([0-9a-f]+):([0-9a-f]+)$")
_ARGON2 = re.compile(r"^argon2:\$argon2(id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+$")


def password_hash_ok(value):
    """A hash jupyter_server's passwd_check accepts: argon2:<PHC string>, or sha1/sha256/sha512:salt:hexdigest."""
    if _ARGON2.match(value):
        return True
    salted = _SALTED.match(value)
    return bool(salted) and len(salted.group(3)) == _HASH_LENGTHS[salted.group(1)]


def listeners(ss_output):
    """{port: [socket, ...]} of the listening TCP sockets in ``ss -ltnpeH`` output, each socket a dict of its ``pids``
    (empty where ss may not read them) and the systemd ``unit`` of its cgroup (empty where ss shows none)."""
    found = {}
    for socket in listening(ss_output.splitlines()):
        found.setdefault(socket["port"], []).append({"pids": sorted({pid for _name, pid in socket["processes"]}),
                                                     "unit": socket["unit"]})
    return found


def main_pids(show_output):
    """{unit: MainPID} from ``systemctl show --property Id,MainPID UNIT...`` (blocks separated by blank lines)."""
    pids = {}
    for block in show_output.strip().split("\n\n"):
        values = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if "Id" in values:
            pids[values["Id"]] = int(values.get("MainPID") or 0)
    return pids


def _ours(socket, unit, main_pid):
    """Whether a listening socket is the unit's: by its cgroup, or where ss shows none, by the unit's main PID."""
    if socket["unit"]:
        return socket["unit"] == unit
    return bool(main_pid) and socket["pids"] == [main_pid]


def _holder(socket):
    if socket["unit"]:
        return socket["unit"]
    return joined("pid %d" % pid for pid in socket["pids"]) or "a process ss does not name"


def _user_problems(index, user, settings, found):
    label = "anaconda_jupyter_users[%d]" % index
    name = str(user.get("name") or "")
    problems = []
    unknown = sorted(set(user) - set(_USER_KEYS))
    if unknown:
        problems.append("%s has unknown key(s) %s; known: %s" % (label, joined(unknown), joined(_USER_KEYS)))
    if not name:
        return problems + ["%s has no name; set name to the login of the user the server runs as" % label]
    label = "%s (%s)" % (label, name)
    if name not in found["passwd"]:
        problems.append("%s: no user %s on this host (getent passwd); create the user first, or drop the entry"
                        % (label, name))
    password_hash, token = str(user.get("password_hash") or ""), str(user.get("token") or "")
    if not password_hash and not token:
        problems.append("%s has neither password_hash nor token (or they are empty): Jupyter never runs without "
                        "authentication. Set password_hash (from a vaulted variable; python -c \"from jupyter_server.auth "
                        "import passwd; print(passwd())\") or token (a vaulted random string: openssl rand -hex 24)"
                        % label)
    elif password_hash and token:
        problems.append("%s has both password_hash and token; keep one" % label)
    elif password_hash and not password_hash_ok(password_hash):
        problems.append("%s: password_hash is not a hash jupyter_server accepts (argon2:$argon2id$... or sha1:SALT:HEX, "
                        "as jupyter_server.auth.passwd() prints); hash the password, never give it in clear" % label)
    elif token and (len(token) < 16 or re.search(r"\s", token)):
        problems.append("%s: token must be at least 16 characters without spaces; make one with openssl rand -hex 24"
                        % label)
    port = user.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        problems.append("%s: port %r is not a TCP port (1-65535)" % (label, port))
    else:
        unit = settings["unit"] % name
        others = [_holder(socket) for socket in found["listeners"].get(port, [])
                  if not _ours(socket, unit, found["main_pids"].get(unit, 0))]
        if others:
            problems.append("%s: port %d is in use on this host (ss -ltnpe: %s), not by %s; choose another port, or "
                            "stop what listens there" % (label, port, joined(sorted(set(others))), unit))
    missing = [env for env in user.get("environments") or [] if env not in settings["environments"]]
    if missing:
        problems.append("%s: environments lists %s, not in anaconda_environments (%s); add them there or drop them"
                        % (label, joined(missing), joined(settings["environments"]) or "none"))
    return problems


def jupyter_problems(settings, found):
    """One line per problem; empty when Jupyter Lab can be set up.

    settings: users (anaconda_jupyter_users), ip (anaconda_jupyter_ip), certfile, keyfile (anaconda_jupyter_certfile,
    anaconda_jupyter_keyfile), environments (the names of anaconda_environments), unit (the unit's name with %s for the
    user). found: passwd (the users getent knows), listeners (``listeners``), main_pids (``main_pids``), cert_exists,
    key_exists, cert_pubkey, key_pubkey (the public keys openssl read from the certificate and the key).
    """
    check_keys("settings", settings, SETTINGS)
    check_keys("found", found, FOUND)
    users = settings["users"] or []
    problems = []
    for index, user in enumerate(users):
        problems.extend(_user_problems(index, user, settings, found))
    names = [str(user.get("name")) for user in users]
    ports = [user.get("port") for user in users]
    if len(set(names)) != len(names):
        problems.append("anaconda_jupyter_users names a user twice (%s); one server per user" % joined(names))
    if len(set(map(str, ports))) != len(ports):
        problems.append("anaconda_jupyter_users gives a port twice (%s); give each user a port of their own"
                        % joined(ports))
    if not users:
        return problems
    certfile, keyfile = settings["certfile"], settings["keyfile"]
    if not is_loopback(settings["ip"]) and not (certfile and keyfile):
        problems.append("anaconda_jupyter_ip is %s, beyond localhost, without TLS: set anaconda_jupyter_certfile and "
                        "anaconda_jupyter_keyfile (paths on the node), or keep 127.0.0.1 and reach Jupyter through an SSH "
                        "tunnel" % settings["ip"])
    if bool(certfile) != bool(keyfile):
        problems.append("anaconda_jupyter_certfile and anaconda_jupyter_keyfile go together; set both or neither")
    if certfile and keyfile:
        problems.extend(certificate_problems({"cert": "anaconda_jupyter_certfile", "key": "anaconda_jupyter_keyfile"},
                                             {"cert": certfile, "key": keyfile}, found))
    return problems


def server_config(user, home, settings):
    """The user's jupyter_server_config.json as a dict.

    settings: ip, port_retries (0: a taken port fails the service rather than moving it), tls (paths of the user's
    copies of certificate and key, or empty), kernels (the kernel names of anaconda_environments, by environment).
    """
    config = {
        "ServerApp": {"ip": settings["ip"], "port": int(user["port"]), "port_retries": 0, "open_browser": False,
                      "root_dir": home},
        "PasswordIdentityProvider": {"allow_password_change": False},
    }
    if user.get("password_hash"):
        config["PasswordIdentityProvider"]["hashed_password"] = user["password_hash"]
    if settings.get("tls"):
        config["ServerApp"].update(certfile=settings["tls"]["certfile"], keyfile=settings["tls"]["keyfile"])
    if user.get("environments"):
        config["KernelSpecManager"] = {
            "allowed_kernelspecs": sorted(settings["kernels"][env] for env in user["environments"])}
    return config


def restarts(users, everyone, registered):
    """The names of the users whose Jupyter server restarts: all of ``users`` where ``everyone`` (the unit file or the
    packages changed), else those an item of the ``registered`` loop results changed for. An item is a user, or a
    (user, file) pair."""
    if everyone:
        return [user["name"] for user in users]
    names = []
    for result in registered:
        for item_result in (result or {}).get("results") or []:
            if item_result.get("changed"):
                item = item_result["item"]
                names.append((item[0] if isinstance(item, (list, tuple)) else item)["name"])
    return names
