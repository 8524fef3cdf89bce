# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remote_desktop role's platform data and files, rendered by Ansible's own templating, for both Debian releases
(molecule runs Debian 13 only): pinned packages, the user directory, the display map, the server policy for
localhost and for an address, each user's settings, and the users as every task but the password file's sees them."""

from __future__ import annotations

import pathlib

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from role_vars import defaults, load, platform_file, trust

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "remote_desktop"
USERS = [{"name": "bob", "display": 2, "password": "fixture2", "geometry": "1280x800"},
         {"name": "alice", "display": 1, "password": "fixture1"}]


def role_templar(major, **overrides):
    variables = {}
    variables.update(defaults(ROLE))
    variables.update(trust(dict({"remote_desktop_users": USERS}, **overrides)))  # inventory, below role vars
    variables.update(load(ROLE / "vars" / "main.yml"))
    variables.update(load(platform_file(ROLE, "Debian", major, "Debian")))
    variables.update({"ansible_facts": {"distribution": "Debian", "distribution_major_version": major,
                                        "os_family": "Debian"},
                      "ansible_managed": "Ansible managed: do not edit", "ansible_check_mode": False})
    return Templar(loader=DataLoader(), variables=variables)


def resolve(templar, name):
    return templar.template(trust("{{ %s }}" % name))


def render(templar, template, **local):
    templar = templar.copy_with_new_env(available_variables=dict(templar.available_variables, **trust(local)))
    return templar.template(trust((ROLE / "templates" / template).read_text()))


@pytest.mark.parametrize("major, packages, user_dir", [
    ("12", {"tigervnc-standalone-server": "1.12.0+dfsg-8", "tigervnc-tools": "1.12.0+dfsg-8", "icewm": "3.3.1-1"},
     ".vnc"),
    ("13", {"tigervnc-standalone-server": "1.15.0+dfsg-2.1~deb13u1", "tigervnc-tools": "1.15.0+dfsg-2.1~deb13u1",
            "icewm": "3.7.4-1"}, ".config/tigervnc"),
])
def test_each_release_pins_its_packages_and_names_its_user_directory(major, packages, user_dir):
    templar = role_templar(major)
    assert resolve(templar, "__remote_desktop_packages") == packages
    assert resolve(templar, "__remote_desktop_release.user_dirs | last") == user_dir
    assert resolve(templar, "__remote_desktop_packages.items() | map('join', '=') | list") == [
        "%s=%s" % item for item in packages.items()]


def test_an_unknown_release_has_nothing_to_install():
    assert resolve(role_templar("11"), "__remote_desktop_packages") == {}


def test_no_task_but_the_password_file_sees_a_password():
    templar = role_templar("13")
    assert resolve(templar, "__remote_desktop_desktops") == [
        {"name": "bob", "display": 2, "geometry": "1280x800"}, {"name": "alice", "display": 1}]
    assert resolve(templar, "__remote_desktop_units") == ["tigervncserver@:2.service", "tigervncserver@:1.service"]


def test_the_display_map_lists_each_user_by_display():
    lines = render(role_templar("13"), "vncserver.users.j2").splitlines()
    assert lines[2:] == [":1=alice", ":2=bob"]
    assert "fixture" not in "\n".join(lines)


@pytest.mark.parametrize("listen, policy", [
    ("localhost", ['$SecurityTypes = "VncAuth";', '$localhost = "yes";', "1;"]),
    ("127.0.0.1", ['$SecurityTypes = "VncAuth";', '$localhost = "yes";', "1;"]),
    # $interface before $localhost: tigervncserver clears localhost when interface is set (seen on Debian 13's 1.15).
    ("10.0.0.5", ['$SecurityTypes = "VncAuth";', '$interface = "10.0.0.5";', '$localhost = "no";', "1;"]),
])
def test_the_server_policy(listen, policy):
    text = render(role_templar("13", remote_desktop_listen=listen, remote_desktop_listen_beyond_localhost=True),
                  "vncserver-config-mandatory.j2")
    assert [line for line in text.splitlines() if not line.startswith("#")] == policy


@pytest.mark.parametrize("user, geometry", [(USERS[0], "1280x800"), (USERS[1], "1024x768")])
def test_each_users_settings_take_the_default_geometry_where_none_is_given(user, geometry):
    text = render(role_templar("13", remote_desktop_geometry="1024x768"), "tigervnc-config.j2", item=user)
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "session=icewm-session", "geometry=" + geometry]
