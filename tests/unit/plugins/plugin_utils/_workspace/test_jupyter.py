# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The anaconda role's Jupyter decisions: each preflight problem word for word, the parsers on real output, and a
user's server configuration."""

import pathlib

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._workspace.jupyter import (
    is_loopback, jupyter_problems, listeners, main_pids, password_hash_ok, server_config)

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SHA1 = "sha1:0e112c3ddfce:364f57b7d83380b0f78c789eaa2f94e242b8620b"
ARGON2 = "argon2:$argon2id$v=19$m=10240,t=10,p=8$kXXCt5wrQGnlkwLeE24r0w$hX1Uc5L44BpvMDLUbLeKAE9gKE0yyhQ8/3BP6Mh9w8c"
TOKEN = "0123456789abcdef0123"
UNIT = "dlinfra-jupyter@%s.service"


def settings(**changes):
    base = {"users": [{"name": "alice", "port": 8888, "token": TOKEN}], "ip": "127.0.0.1", "certfile": "",
            "keyfile": "", "environments": ["torch", "train"], "unit": UNIT}
    return dict(base, **changes)


def found(**changes):
    base = {"passwd": ["alice", "bob"], "listeners": {}, "main_pids": {}, "cert_exists": False, "key_exists": False,
            "cert_pubkey": "", "key_pubkey": ""}
    return dict(base, **changes)


def test_ss_output_of_a_test_container():
    # As root in a container without CAP_SYS_PTRACE, ss names no process of another user; the cgroup names the unit.
    assert listeners((FIXTURES / "ss-ltnpeH-container.txt").read_text()) == {
        8765: [{"pids": [388], "unit": "fixture-conda-mirror.service"}],
        8889: [{"pids": [], "unit": "dlinfra-jupyter@bob.service"}]}


def test_ss_output_of_a_host_socket_outside_systemd():
    assert listeners((FIXTURES / "ss-ltnpeH-host.txt").read_text()) == {2024: [{"pids": [], "unit": ""}]}


def sockets(*holders):
    return [{"pids": pids, "unit": unit} for pids, unit in holders]


def test_systemctl_show_output():
    assert main_pids((FIXTURES / "systemctl-show.txt").read_text()) == {
        "dlinfra-jupyter@alice.service": 0, "dlinfra-jupyter@bob.service": 6612, "dlinfra-jupyter@carol.service": 0}


@pytest.mark.parametrize("ip, loopback", [("127.0.0.1", True), ("127.0.1.1", True), ("::1", True),
                                          ("localhost", True), ("0.0.0.0", False), ("10.0.0.5", False),
                                          ("node1", False)])
def test_is_loopback(ip, loopback):
    assert is_loopback(ip) is loopback


@pytest.mark.parametrize("value, ok", [
    (SHA1, True), (ARGON2, True),
    ("sha256:ab:" + "0" * 64, True), ("sha512:ab:" + "0" * 128, True),
    ("sha1:0e112c3ddfce:364f57b7", False), ("md5:ab:" + "0" * 32, False),
    ("fixture-password", False), ("argon2:notaphc", False), ("", False)])
def test_password_hash_ok(value, ok):
    assert password_hash_ok(value) is ok


def test_good_settings_have_no_problem():
    users = [{"name": "alice", "port": 8888, "token": TOKEN},
             {"name": "bob", "port": 8889, "password_hash": SHA1, "environments": ["torch"]}]
    # The ports are held by the users' own services (a re-run): by cgroup, and by main PID where ss shows no cgroup.
    assert jupyter_problems(settings(users=users), found(
        listeners={8888: sockets(([], UNIT % "alice")), 8889: sockets(([11], ""))},
        main_pids={UNIT % "alice": 0, UNIT % "bob": 11})) == []


@pytest.mark.parametrize("user, extra, problem", [
    pytest.param({"name": "carol", "port": 8888, "token": TOKEN}, {},
                 "anaconda_jupyter_users[0] (carol): no user carol on this host (getent passwd); create the user "
                 "first, or drop the entry", id="unknown-user"),
    pytest.param({"name": "alice", "port": 8888, "token": ""}, {},
                 "anaconda_jupyter_users[0] (alice) has neither password_hash nor token (or they are empty): Jupyter "
                 "never runs without authentication. Set password_hash (from a vaulted variable; python -c \"from "
                 "jupyter_server.auth import passwd; print(passwd())\") or token (a vaulted random string: openssl "
                 "rand -hex 24)", id="empty-token"),
    pytest.param({"name": "alice", "port": 8888, "token": TOKEN, "password_hash": SHA1}, {},
                 "anaconda_jupyter_users[0] (alice) has both password_hash and token; keep one", id="both"),
    pytest.param({"name": "alice", "port": 8888, "password_hash": "fixture-password"}, {},
                 "anaconda_jupyter_users[0] (alice): password_hash is not a hash jupyter_server accepts "
                 "(argon2:$argon2id$... or sha1:SALT:HEX, as jupyter_server.auth.passwd() prints); hash the password, "
                 "never give it in clear", id="clear-password"),
    pytest.param({"name": "alice", "port": 8888, "token": "short"}, {},
                 "anaconda_jupyter_users[0] (alice): token must be at least 16 characters without spaces; make one "
                 "with openssl rand -hex 24", id="short-token"),
    pytest.param({"name": "alice", "port": 70000, "token": TOKEN}, {},
                 "anaconda_jupyter_users[0] (alice): port 70000 is not a TCP port (1-65535)", id="bad-port"),
    pytest.param({"name": "alice", "port": 8765, "token": TOKEN},
                 {"listeners": {8765: sockets(([388], "fixture-conda-mirror.service"))}},
                 "anaconda_jupyter_users[0] (alice): port 8765 is in use on this host (ss -ltnpe: "
                 "fixture-conda-mirror.service), not by dlinfra-jupyter@alice.service; choose another port, or stop "
                 "what listens there", id="port-held-by-another-unit"),
    pytest.param({"name": "alice", "port": 8889, "token": TOKEN},
                 {"listeners": {8889: sockets(([], UNIT % "bob"))}, "main_pids": {UNIT % "alice": 0}},
                 "anaconda_jupyter_users[0] (alice): port 8889 is in use on this host (ss -ltnpe: "
                 "dlinfra-jupyter@bob.service), not by dlinfra-jupyter@alice.service; choose another port, or stop "
                 "what listens there", id="port-of-another-users-server"),
    pytest.param({"name": "alice", "port": 8888, "token": TOKEN},
                 {"listeners": {8888: sockets(([395], ""))}, "main_pids": {UNIT % "alice": 10}},
                 "anaconda_jupyter_users[0] (alice): port 8888 is in use on this host (ss -ltnpe: pid 395), not by "
                 "dlinfra-jupyter@alice.service; choose another port, or stop what listens there",
                 id="port-held-by-another-pid"),
    pytest.param({"name": "alice", "port": 2024, "token": TOKEN}, {"listeners": {2024: sockets(([], ""))}},
                 "anaconda_jupyter_users[0] (alice): port 2024 is in use on this host (ss -ltnpe: a process ss does "
                 "not name), not by dlinfra-jupyter@alice.service; choose another port, or stop what listens there",
                 id="port-in-use-nothing-named"),
    pytest.param({"name": "alice", "port": 8888, "token": TOKEN, "environments": ["torch", "nosuch"]}, {},
                 "anaconda_jupyter_users[0] (alice): environments lists nosuch, not in anaconda_environments "
                 "(torch, train); add them there or drop them", id="unknown-environment"),
    pytest.param({"name": "alice", "port": 8888, "token": TOKEN, "shell": "bash"}, {},
                 "anaconda_jupyter_users[0] has unknown key(s) shell; known: name, port, password_hash, token, "
                 "environments", id="unknown-key"),
    pytest.param({"port": 8888, "token": TOKEN}, {},
                 "anaconda_jupyter_users[0] has no name; set name to the login of the user the server runs as",
                 id="no-name"),
])
def test_each_user_problem(user, extra, problem):
    assert jupyter_problems(settings(users=[user]), found(**extra)) == [problem]


def test_duplicates():
    users = [{"name": "alice", "port": 8888, "token": TOKEN}, {"name": "alice", "port": 8888, "token": TOKEN}]
    assert jupyter_problems(settings(users=users), found()) == [
        "anaconda_jupyter_users names a user twice (alice, alice); one server per user",
        "anaconda_jupyter_users gives a port twice (8888, 8888); give each user a port of their own"]


@pytest.mark.parametrize("changes, seen, problems", [
    pytest.param({"ip": "0.0.0.0"}, {}, [
        "anaconda_jupyter_ip is 0.0.0.0, beyond localhost, without TLS: set anaconda_jupyter_certfile and "
        "anaconda_jupyter_keyfile (paths on the node), or keep 127.0.0.1 and reach Jupyter through an SSH tunnel"],
        id="no-tls-beyond-localhost"),
    pytest.param({"ip": "0.0.0.0", "certfile": "/etc/ssl/j.crt"}, {"cert_exists": True}, [
        "anaconda_jupyter_ip is 0.0.0.0, beyond localhost, without TLS: set anaconda_jupyter_certfile and "
        "anaconda_jupyter_keyfile (paths on the node), or keep 127.0.0.1 and reach Jupyter through an SSH tunnel",
        "anaconda_jupyter_certfile and anaconda_jupyter_keyfile go together; set both or neither"], id="cert-alone"),
    pytest.param({"ip": "0.0.0.0", "certfile": "/c", "keyfile": "/k"}, {}, [
        "anaconda_jupyter_certfile /c does not exist on this host; put the certificate there",
        "anaconda_jupyter_keyfile /k does not exist on this host; put the key there"], id="files-missing"),
    pytest.param({"ip": "0.0.0.0", "certfile": "/c", "keyfile": "/k"},
                 {"cert_exists": True, "key_exists": True, "cert_pubkey": "PUB-A\n", "key_pubkey": "PUB-B\n"}, [
        "anaconda_jupyter_certfile /c does not match anaconda_jupyter_keyfile /k (their public keys differ); give the "
        "key the certificate was issued for"], id="mismatch"),
    pytest.param({"ip": "0.0.0.0", "certfile": "/c", "keyfile": "/k"},
                 {"cert_exists": True, "key_exists": True, "cert_pubkey": "", "key_pubkey": "PUB-B\n"}, [
        "openssl could not read the public key of anaconda_jupyter_certfile /c or anaconda_jupyter_keyfile /k (PEM "
        "expected; is openssl installed?)"], id="unreadable"),
    pytest.param({"ip": "0.0.0.0", "certfile": "/c", "keyfile": "/k"},
                 {"cert_exists": True, "key_exists": True, "cert_pubkey": "PUB-A\n", "key_pubkey": "PUB-A"}, [],
                 id="match"),
    pytest.param({"users": [], "ip": "0.0.0.0"}, {}, [], id="no-users-nothing-checked"),
])
def test_tls_problems(changes, seen, problems):
    assert jupyter_problems(settings(**changes), found(**seen)) == problems


def test_unknown_settings_key():
    with pytest.raises(ValueError, match="settings has unknown key"):
        jupyter_problems(dict(settings(), extra=1), found())


KERNELS = {"torch": "conda-env-torch", "train": "conda-env-train"}


@pytest.mark.parametrize("user, tls, expected", [
    pytest.param({"name": "alice", "port": 8888, "token": TOKEN}, {}, {
        "ServerApp": {"ip": "127.0.0.1", "port": 8888, "port_retries": 0, "open_browser": False,
                      "root_dir": "/home/alice"},
        "PasswordIdentityProvider": {"allow_password_change": False}}, id="token"),
    pytest.param({"name": "alice", "port": "8890", "password_hash": SHA1, "environments": ["train", "torch"]},
                 {"certfile": "/etc/dlinfra-jupyter/alice/cert.pem", "keyfile": "/etc/dlinfra-jupyter/alice/key.pem"}, {
        "ServerApp": {"ip": "127.0.0.1", "port": 8890, "port_retries": 0, "open_browser": False,
                      "root_dir": "/home/alice", "certfile": "/etc/dlinfra-jupyter/alice/cert.pem",
                      "keyfile": "/etc/dlinfra-jupyter/alice/key.pem"},
        "PasswordIdentityProvider": {"allow_password_change": False, "hashed_password": SHA1},
        "KernelSpecManager": {"allowed_kernelspecs": ["conda-env-torch", "conda-env-train"]}},
        id="password-tls-environments"),
])
def test_server_config(user, tls, expected):
    assert server_config(user, "/home/alice", {"ip": "127.0.0.1", "tls": tls, "kernels": KERNELS}) == expected
