#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: vnc_passwd
short_description: A VNC password file, as vncpasswd writes it, owned by one user
version_added: 0.1.0
description:
  - Writes O(path) with the obfuscated password C(vncpasswd -f) makes from O(password) (the format VNC servers read
    with C(-rfbauth) / C(PasswordFile)), owned by O(owner) and O(group) with O(mode).
  - The file is replaced only where its content differs, through a temporary file in the same directory (a link at
    O(path) is replaced, never followed); owner and mode are set where they differ.
  - The remote_desktop role writes each user's TigerVNC password file with it.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes
attributes:
  check_mode:
    support: full
    details: Computes the file and reports whether it would change; where vncpasswd is not installed yet (a fresh host
      in check mode) it reports a change.
options:
  path:
    description: The password file (absolute path). Its directory must exist.
    type: path
    required: true
  password:
    description: The password, 6 to 8 characters (vncpasswd refuses fewer; VNC authentication reads 8 at most).
    type: str
    required: true
  owner:
    description: The file's owner, a name or a number.
    type: str
    required: true
  group:
    description: The file's group, a name or a number.
    type: str
    required: true
  mode:
    description: The file's mode, octal.
    type: str
    default: "0600"
  vncpasswd:
    description: The program that obfuscates the password (C(vncpasswd -f) reads it on stdin).
    type: str
    default: vncpasswd
"""

EXAMPLES = r"""
- name: Write alice's TigerVNC password
  dlinfra.gpu_cluster.vnc_passwd:
    path: /home/alice/.config/tigervnc/passwd
    password: "{{ vault_alice_vnc_password }}"
    owner: alice
    group: alice
  no_log: true
"""

RETURN = r"""
path:
  description: The password file.
  returned: always
  type: str
content_changed:
  description: Whether the file's content was (or in check mode would be) written.
  returned: always
  type: bool
"""

import grp
import os
import pwd
import tempfile

from ansible.module_utils.basic import AnsibleModule


def obfuscated(module, vncpasswd, password):
    """The bytes ``vncpasswd -f`` writes for ``password``."""
    rc, out, err = module.run_command([vncpasswd, "-f"], data=password, binary_data=False, encoding=None)
    if rc != 0 or not out:
        module.fail_json(msg="%s -f refused the password (exit %d): %s; give 6 to 8 characters"
                         % (vncpasswd, rc, err.decode("utf-8", "replace").strip()))
    return out


def current(path):
    """The file's bytes, or None where it is absent or not a regular file (a link counts as absent: it is replaced)."""
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        return handle.read()


def numeric_id(name, lookup):
    """A user or group given by name or number, as its number."""
    return int(name) if name.isdigit() else lookup(name)[2]


def replace(module, path, content, uid, gid, mode):
    """Write ``content`` to ``path`` through a temporary file in its directory, owner and mode set before the rename."""
    handle, temporary = tempfile.mkstemp(prefix=".vnc_passwd.", dir=os.path.dirname(path))
    try:
        os.fchown(handle, uid, gid)
        os.fchmod(handle, mode)
        os.write(handle, content)
        os.fsync(handle)
        os.close(handle)
        os.replace(temporary, path)
    except OSError as error:
        if os.path.exists(temporary):
            os.unlink(temporary)
        module.fail_json(msg="could not write %s: %s" % (path, error))


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "password": {"type": "str", "required": True, "no_log": True},
            "owner": {"type": "str", "required": True},
            "group": {"type": "str", "required": True},
            "mode": {"type": "str", "default": "0600"},
            "vncpasswd": {"type": "str", "default": "vncpasswd", "no_log": False},  # a program, not a secret
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    if not os.path.isdir(os.path.dirname(path)) and not module.check_mode:
        module.fail_json(msg="the directory of %s does not exist; create it first" % path)
    binary = module.get_bin_path(module.params["vncpasswd"])
    result = {"path": path, "changed": False, "content_changed": False}
    if binary is None:
        if module.check_mode:
            result.update(changed=True, content_changed=True,
                          msg="%s is not installed yet: the file would be written" % module.params["vncpasswd"])
            module.exit_json(**result)
        module.fail_json(msg="%s not found; install it first (Debian: tigervnc-tools)" % module.params["vncpasswd"])
    wanted = obfuscated(module, binary, module.params["password"])
    file_args = module.load_file_common_arguments({"path": path, "owner": module.params["owner"],
                                                   "group": module.params["group"], "mode": module.params["mode"]})
    if current(path) != wanted:
        result.update(changed=True, content_changed=True)
        if not module.check_mode:
            try:
                uid, gid = numeric_id(module.params["owner"], pwd.getpwnam), numeric_id(module.params["group"], grp.getgrnam)
            except KeyError as error:
                module.fail_json(msg="no such user or group: %s" % error)
            replace(module, path, wanted, uid, gid, int(module.params["mode"], 8))
    if os.path.exists(path):
        result["changed"] = module.set_fs_attributes_if_different(file_args, result["changed"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
