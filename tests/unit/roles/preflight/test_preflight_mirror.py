# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""preflight's rewrite of a node's own sources for preflight_apt_mirror (tasks/mirror.yml), rendered by Ansible's
templating from the task file as the role has it, on the source files Debian and Ubuntu images ship."""

from __future__ import annotations

import base64
import pathlib

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from role_vars import load, trust

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "preflight"

DEBIAN_LIST = "deb http://deb.debian.org/debian trixie main\ndeb http://deb.debian.org/debian-security trixie-security main\n"
DEBIAN_SOURCES = """Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
UBUNTU_SOURCES = """Types: deb
URIs: http://archive.ubuntu.com/ubuntu/
Suites: noble noble-updates noble-backports
Components: main restricted universe multiverse

Types: deb
URIs: http://security.ubuntu.com/ubuntu/
Suites: noble-security
Components: main restricted universe multiverse
"""
LOCAL = "deb [signed-by=/etc/apt/keyrings/site.asc] http://repo.site.example/debian trixie main\n"


def mirrored(distribution, text, archive="", security=""):
    task = [t for t in yaml.safe_load((ROLE / "tasks" / "mirror.yml").read_text()) if t["name"].startswith("Point")][0]
    variables = dict(load(ROLE / "vars" / ("%s.yml" % distribution)))
    variables.update({"preflight_apt_mirror": archive, "preflight_apt_security_mirror": security,
                      "item": {"content": base64.b64encode(text.encode()).decode()}})
    variables.update(trust(task["vars"]))
    return Templar(loader=DataLoader(), variables=variables).template(trust("{{ __preflight_mirrored }}"))


def test_debian_one_line_sources_go_to_the_mirrors():
    assert mirrored("Debian", DEBIAN_LIST, "http://store:3142/debian/", "http://store:3142/debian-security") == (
        "deb http://store:3142/debian trixie main\ndeb http://store:3142/debian-security trixie-security main\n")


def test_debian_deb822_sources_go_to_the_mirrors_and_keep_the_rest():
    result = mirrored("Debian", DEBIAN_SOURCES, "http://m/debian", "http://m/debian-security")
    assert result == DEBIAN_SOURCES.replace("http://deb.debian.org/debian-security", "http://m/debian-security").replace(
        "URIs: http://deb.debian.org/debian\n", "URIs: http://m/debian\n")


def test_ubuntu_sources_go_to_the_mirrors():
    result = mirrored("Ubuntu", UBUNTU_SOURCES, "http://m/ubuntu", "http://m/ubuntu-security")
    assert "URIs: http://m/ubuntu\n" in result and "URIs: http://m/ubuntu-security\n" in result
    assert "ubuntu.com" not in result


@pytest.mark.parametrize("archive, security, expected", [
    ("", "", DEBIAN_LIST),  # no mirror: as the distribution wrote it (the copy is put back)
    ("http://m/debian", "", "deb http://m/debian trixie main\ndeb http://deb.debian.org/debian-security trixie-security main\n"),
    ("", "http://m/sec", "deb http://deb.debian.org/debian trixie main\ndeb http://m/sec trixie-security main\n"),
])
def test_each_mirror_replaces_only_its_archive(archive, security, expected):
    assert mirrored("Debian", DEBIAN_LIST, archive, security) == expected


def test_sources_of_other_hosts_are_left_alone():
    assert mirrored("Debian", LOCAL, "http://m/debian", "http://m/sec") == LOCAL
