# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each problem the remote_desktop role's preflight reports, word for word where it matters, the settings that raise
none, and that no line ever holds a password."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._workspace.remote_desktop import (
    FOUND, SETTINGS, listening_ports, preflight_problems)

ALICE = {"name": "alice", "display": 1, "password": "secret12"}
BOB = {"name": "bob", "display": 2, "password": "s3cret", "geometry": "1280x800"}
DEBIAN13 = {"distribution": "Debian", "major_version": "13", "releases": ["12", "13"], "users": [ALICE, BOB],
            "listen": "localhost", "listen_beyond_localhost": False}
# `ss -Hltn` on a node with sshd and alice's desktop running.
SS = ["LISTEN 0      128          0.0.0.0:22        0.0.0.0:*",
      "LISTEN 0      5          127.0.0.1:5901      0.0.0.0:*",
      "LISTEN 0      5              [::1]:5901         [::]:*",
      "LISTEN 0      128             [::]:22           [::]:*"]
HOST = {"accounts": ["root", "alice", "bob"], "listening": [], "active_displays": [], "fqdn": "node1.example"}


def problems(found=None, **settings):
    return preflight_problems(dict(DEBIAN13, **settings), dict(HOST, **(found or {})))


def test_the_keys_are_those_the_docs_name():
    assert set(DEBIAN13) == set(SETTINGS)
    assert set(HOST) == set(FOUND)


def test_ss_output_gives_each_port_its_addresses():
    assert listening_ports(SS + ["", "garbage"]) == {22: ["0.0.0.0", "[::]"], 5901: ["127.0.0.1", "[::1]"]}


@pytest.mark.parametrize("settings, found", [
    pytest.param({}, {}, id="two-users-on-localhost"),
    pytest.param({"users": []}, {}, id="no-users"),
    pytest.param({}, {"listening": SS, "active_displays": [1]}, id="own-server-on-its-port"),
    pytest.param({"listen": "127.0.0.1"}, {}, id="loopback-address"),
    pytest.param({"listen": "::1"}, {}, id="ipv6-loopback"),
    pytest.param({"listen": "10.0.0.5", "listen_beyond_localhost": True}, {}, id="beyond-localhost-opted-in"),
    pytest.param({"users": [dict(ALICE, password="abcdef"), dict(BOB, password="abcdefgh", display=99)]}, {},
                 id="six-and-eight-characters-display-99"),
    pytest.param({"major_version": "12"}, {}, id="debian12"),
])
def test_good_settings_are_no_problem(settings, found):
    assert problems(found, **settings) == []


def test_a_user_that_does_not_exist():
    assert problems({"accounts": ["root", "alice"]}) == [
        "remote_desktop_users[1] (bob): user bob does not exist on this host; create it first (the users role or your "
        "directory service) or take it out of remote_desktop_users"]


@pytest.mark.parametrize("password", [None, ""], ids=["missing", "empty"])
def test_a_missing_or_empty_password(password):
    user = {"name": "alice", "display": 1}
    if password is not None:
        user["password"] = password
    assert problems(users=[user]) == [
        "remote_desktop_users[0] (alice) has no password; set password to a vaulted string of 6 to 8 characters "
        "(ansible-vault encrypt_string)"]


def test_a_short_password():
    assert problems(users=[dict(ALICE, password="abc12")]) == [
        "remote_desktop_users[0] (alice): the password has 5 characters, VNC requires at least 6; set a longer one"]


def test_a_password_longer_than_vnc_reads_is_refused_not_cut():
    assert problems(users=[dict(ALICE, password="abcdefghi")]) == [
        "remote_desktop_users[0] (alice): the password has 9 characters, but VNC authentication uses only the first 8 "
        "and ignores the rest; set one of 6 to 8 characters (the SSH tunnel is the strong lock)"]


def test_a_port_another_process_holds():
    assert problems({"listening": SS}) == [
        "remote_desktop_users[0] (alice): port 5901 (display :1) is already in use by another process (listening on "
        "127.0.0.1, [::1]); choose a free display, or stop what listens there"]


def test_an_active_unit_of_another_display_does_not_excuse_the_port():
    assert len(problems({"listening": SS, "active_displays": [2]})) == 1


def test_the_same_display_twice():
    assert problems(users=[ALICE, dict(BOB, display=1)]) == [
        "remote_desktop_users gives the same display more than once: :1; each user gets one display of their own"]


def test_the_same_user_twice():
    assert problems(users=[ALICE, dict(ALICE, display=2)]) == [
        "remote_desktop_users gives the same user more than once: alice; each user gets one display of their own"]


@pytest.mark.parametrize("display", [0, 100, "1", ":1", None, True])
def test_a_display_that_is_not_1_to_99(display):
    assert problems(users=[dict(ALICE, display=display)]) == [
        "remote_desktop_users[0] (alice): display %r is not a number from 1 to 99; set display: N, the server then "
        "listens on port 590N" % display]


def test_a_geometry_that_is_not_width_x_height():
    assert problems(users=[dict(ALICE, geometry="big")]) == [
        "remote_desktop_users[0] (alice): geometry 'big' is not WIDTHxHEIGHT (for example 1920x1080)"]


@pytest.mark.parametrize("listen", ["0.0.0.0", "10.0.0.5", "::"])
def test_listening_beyond_localhost_needs_the_opt_in(listen):
    assert problems(listen=listen) == [
        "remote_desktop_listen=%s opens the desktops beyond this host, where VNC's 8-character password and "
        "unencrypted screen are all that protect them; keep localhost and use the SSH tunnel (ssh -L "
        "5901:localhost:5901 user@node), or set remote_desktop_listen_beyond_localhost: true to accept that" % listen]


def test_a_listen_value_that_is_no_address():
    assert problems(listen="node1.example", listen_beyond_localhost=True) == [
        "remote_desktop_listen='node1.example' is not localhost or an IP address of this host; the VNC server listens "
        "on one address"]


def test_a_host_name_that_does_not_resolve():
    assert problems({"fqdn": ""}) == [
        "the host's name does not resolve (hostname -f fails), and tigervncserver stops without its fully qualified "
        "name; add the name to /etc/hosts or the DNS"]


def test_an_unsupported_release():
    assert problems(major_version="11") == [
        "Debian 11 is not supported by remote_desktop; supported Debian releases: 12, 13"]


def test_entries_that_are_not_mappings_and_a_list_that_is_not_one():
    assert problems(users=["alice"]) == [
        "remote_desktop_users[0] is not a mapping; give {name, display, password}"]
    assert problems(users={"alice": 1}) == [
        "remote_desktop_users is not a list; give one entry {name, display, password} per user"]


def test_every_problem_at_once_and_never_a_password():
    users = [{"name": "nobody", "display": 3, "password": "Vault-Pw-1"}, {"name": "carol", "display": 1, "password": ""},
             {"name": "carol", "display": 3, "password": "tiny"}, {"name": "", "display": 4, "password": "p4ssw0rd"}]
    found = {"accounts": ["carol"], "listening": SS}
    lines = problems(found, users=users, listen="0.0.0.0")
    assert len(lines) == 9, lines
    text = "\n".join(lines)
    for user in users:
        if user["password"]:
            assert user["password"] not in text


def test_unknown_keys_are_refused():
    with pytest.raises(ValueError):
        preflight_problems(dict(DEBIAN13, extra=1), HOST)
