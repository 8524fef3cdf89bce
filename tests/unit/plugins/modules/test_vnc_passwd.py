# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vnc_passwd writes what vncpasswd -f prints, owned and moded as asked, only where it differs; check mode reports
without writing; a link at the path is replaced, not followed. vncpasswd is a stand-in that prints 8 bytes per
password (not VNC's DES: the module only carries the bytes); the molecule scenario runs the real one."""

import grp
import os
import pwd
import stat

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.modules import vnc_passwd

# Reads the password line as vncpasswd -f does and prints 8 bytes, some above 0x7f (the real file is binary).
STAND_IN = """#!/bin/sh
read -r password
[ ${#password} -ge 6 ] || { echo "Password must be at least 6 characters" >&2; exit 1; }
printf '\\377\\200%s' "$(printf '%s' "$password" | cut -c1-6)"
"""


@pytest.fixture
def vncpasswd(tmp_path):
    path = tmp_path / "bin" / "vncpasswd"
    path.parent.mkdir()
    path.write_text(STAND_IN)
    path.chmod(0o755)
    return str(path)


def args(path, vncpasswd, password="fixture1"):
    return {"path": str(path), "password": password, "owner": pwd.getpwuid(os.getuid()).pw_name,
            "group": grp.getgrgid(os.getgid()).gr_name, "vncpasswd": vncpasswd}


def test_writes_the_bytes_then_changes_nothing(tmp_path, vncpasswd, module_result):
    path = tmp_path / "passwd"
    first = module_result(vnc_passwd.main, args(path, vncpasswd))
    assert (first["changed"], first["content_changed"], first["_exit_code"]) == (True, True, 0)
    assert path.read_bytes() == b"\xff\x80fixtur"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = module_result(vnc_passwd.main, args(path, vncpasswd))
    assert (again["changed"], again["content_changed"]) == (False, False)
    assert "fixture1" not in str(first) + str(again)


def test_a_new_password_and_a_wrong_mode_are_changed(tmp_path, vncpasswd, module_result):
    path = tmp_path / "passwd"
    module_result(vnc_passwd.main, args(path, vncpasswd))
    path.chmod(0o644)
    result = module_result(vnc_passwd.main, args(path, vncpasswd))
    assert (result["changed"], result["content_changed"]) == (True, False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    result = module_result(vnc_passwd.main, args(path, vncpasswd, password="other99"))
    assert result["content_changed"] and path.read_bytes() == b"\xff\x80other9"


def test_check_mode_reports_and_writes_nothing(tmp_path, vncpasswd, module_result):
    path = tmp_path / "passwd"
    result = module_result(vnc_passwd.main, args(path, vncpasswd), check_mode=True)
    assert (result["changed"], result["content_changed"]) == (True, True)
    assert not path.exists()


def test_without_vncpasswd_check_mode_reports_a_change_and_a_run_fails(tmp_path, module_result):
    missing = str(tmp_path / "no" / "vncpasswd")
    result = module_result(vnc_passwd.main, args(tmp_path / "passwd", missing), check_mode=True)
    assert result["changed"] and "not installed yet" in result["msg"]
    result = module_result(vnc_passwd.main, args(tmp_path / "passwd", missing))
    assert result["failed"] and "tigervnc-tools" in result["msg"]


def test_a_link_at_the_path_is_replaced_not_followed(tmp_path, vncpasswd, module_result):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    path = tmp_path / "passwd"
    path.symlink_to(target)
    module_result(vnc_passwd.main, args(path, vncpasswd))
    assert not path.is_symlink() and path.read_bytes() == b"\xff\x80fixtur"
    assert target.read_bytes() == b"keep"


def test_a_password_vncpasswd_refuses_fails_without_showing_it(tmp_path, vncpasswd, module_result):
    result = module_result(vnc_passwd.main, args(tmp_path / "passwd", vncpasswd, password="abc"))
    assert result["failed"] and "at least 6 characters" in result["msg"]
    assert not (tmp_path / "passwd").exists()
