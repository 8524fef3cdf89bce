#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: converged_state
short_description: Tell in one call whether a node still holds what a role's last full run left there
version_added: 0.2.0
description:
  - After a role's full run succeeds, O(record=true) writes the role's record on the node
    (C(<record_dir>/<role>.json)), with the digest of the role's inputs and a snapshot of what the role manages, that is
    each of O(packages) with its version and hold, each of O(paths) with its content digest, mode and owner (a
    directory with its entry names, a missing path as missing), each of O(services) with its enablement and
    activity, each of O(snaps) with its version, revision, tracked channel and notes (C(held), C(classic)) as
    C(snap list) shows them, each user of O(group_members) with whether it is in the group, and the O(observed)
    items as given.
  - Without O(record), it only reads. The node is converged when the record exists, was made with the same inputs
    digest and every item in it reads the same now. A role then skips its install and configure phases; anything
    else (no record, other inputs, a package moved, a hold lifted, a file edited, a service stopped) is returned in
    RV(reason) and RV(drift), and the role runs in full, which repairs it.
  - The action plugin of the same name computes O(inputs_digest) on the controller from the role's public variables,
    the role's own files, the collection's version and O(inputs).
  - With O(record=true) the action plugin writes nothing where C(--tags) or C(--skip-tags) limit the run to some of
    the role's phases (C(--tags) takes neither C(all) nor the role; C(--skip-tags) takes the role, C(always) or a
    tag that starts with either and C(_), such as C(nccl_verify)). The task is then skipped and its C(msg) says why.
    Other skip tags, such as molecule's C(notest), leave the role whole and record.
  - Package versions and holds are read from dpkg; on a host without C(dpkg-query) a node is never converged.
  - An item recorded as C(unreadable...) never reads the same, since a record that could not read something vouches
    for nothing about it.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes
attributes:
  check_mode:
    support: full
    details: Without O(record) it only reads; with it, it reports whether the record would change and writes it
      only outside check mode.
options:
  role:
    description: The role the record belongs to; its file name.
    type: str
    required: true
  inputs:
    description:
      - Values the role's state depends on besides its public variables (for example the GPUs a node holds). The
        action plugin folds them into O(inputs_digest).
    type: raw
  inputs_digest:
    description: Set by the action plugin; a record made with another digest does not count.
    type: str
  record:
    description: Write the record (after a full run succeeded) instead of only reading it.
    type: bool
    default: false
  packages:
    description: Packages whose version and hold the role manages.
    type: list
    elements: str
    default: []
  installed_packages:
    description:
      - Packages the role only keeps installed, at whatever version the node's updates bring; their removal is a drift,
        a new version is not.
    type: list
    elements: str
    default: []
  paths:
    description: Files and directories whose content the role manages, or whose absence it ensures.
    type: list
    elements: path
    default: []
  services:
    description: systemd units whose enablement and activity the role manages.
    type: list
    elements: str
    default: []
  snaps:
    description: Snaps whose revision, channel and hold the role manages (read with C(snap list)).
    type: list
    elements: str
    default: []
  group_members:
    description: Groups (keys) and the users (values, a list) the role keeps in each of them.
    type: dict
    default: {}
  observed:
    description:
      - Items the role read elsewhere (for example on another host, or on the controller), each a name and its state as
        a string. They are recorded as given and compared as given, so the read and the record must name the same items.
      - The action plugin adds C(controller path PATH) items for O(controller_paths).
    type: dict
    default: {}
  controller_paths:
    description:
      - Files on the controller the role writes (the action plugin reads each one's content digest and mode and adds
        them to O(observed)).
    type: list
    elements: path
    default: []
  record_dir:
    description: Where the records are kept.
    type: path
    default: /var/lib/dlinfra/converged
  gather_facts:
    description:
      - Gather the node's C(min) facts first, as C(ansible.builtin.setup) with C(gather_subset=min) does, in the same
        task; they are returned as the task's facts and the inputs digest is made with them. Only for a read (not with
        O(record)). A role then needs no setup task of its own before the read. Controller side (the action plugin).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Read whether the node still holds what the role's last run left
  dlinfra.gpu_cluster.converged_state:
    role: nccl
    packages: [libnccl2, libnccl-dev]
    paths: [/etc/nccl.conf]
  register: __nccl_converged

- name: Install and configure where anything differs
  ansible.builtin.include_tasks: converge.yml
  when: not __nccl_converged.converged
"""

RETURN = r"""
converged:
  description: Whether the record exists, has the same inputs digest and every item in it reads the same now.
  returned: always
  type: bool
  sample: false
reason:
  description: Why the node is not converged, in words; empty when it is.
  returned: always
  type: str
  sample: "drift: /etc/nccl.conf content changed"
drift:
  description: Each item that reads differently from the record, with what was recorded and what is there now.
  returned: always
  type: list
  elements: str
  sample: ["package libnccl2: recorded hi 2.21.5-1, now ii 2.21.5-1", "snap microk8s: recorded v1.32.3 8148
    1.32/stable classic,held, now v1.32.3 8148 1.32/stable classic"]
"""

import grp
import hashlib
import json
import os
import pwd
import shutil
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

FORMAT = 1


def package_states(module, names):
    """name -> 'STATUS VERSION' (dpkg's wanted and current state, 'hi' when held, and the version) or 'absent'."""
    if not names:
        return {}
    states = dict.fromkeys(names, "absent")
    dummy, out, dummy = module.run_command(["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Version}\n"]
                                           + list(names))
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0] in states and fields[1].strip()[1:2] == "i":
            states[fields[0]] = "%s %s" % (fields[1].strip(), fields[2])
    return states


def path_state(path):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    owner = "%o %d:%d" % (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid)
    if stat.S_ISLNK(info.st_mode):
        return "link %s" % os.readlink(path)
    if stat.S_ISDIR(info.st_mode):
        return "dir %s %s" % (owner, hashlib.sha256("\n".join(sorted(os.listdir(path))).encode()).hexdigest())
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "file %s %s" % (owner, digest.hexdigest())


def service_states(module, units):
    """unit -> 'UnitFileState ActiveState' as systemctl shows them."""
    if not units:
        return {}
    dummy, out, dummy = module.run_command(["systemctl", "show", "--property=Id,UnitFileState,ActiveState"]
                                           + list(units))
    shown = []
    for block in out.strip().split("\n\n"):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        shown.append("%s %s" % (fields.get("UnitFileState") or "-", fields.get("ActiveState") or "-"))
    # systemctl shows the units in the order asked, one block each.
    return dict(zip(units, shown)) if len(shown) == len(units) else dict.fromkeys(units, "unreadable")


def snap_states(module, names):
    """name -> 'VERSION REV TRACKING NOTES' as `snap list` shows them (notes sorted), or 'absent'."""
    if not names:
        return {}
    states = dict.fromkeys(names, "absent")
    snap = module.get_bin_path("snap")
    if not snap:
        return states
    rc, out, err = module.run_command([snap, "list"])
    if rc != 0:
        return dict.fromkeys(names, "unreadable: snap list: %s" % (err.strip() or out.strip()))
    # Name  Version  Rev  Tracking  Publisher  Notes; none at all is "No snaps are installed yet" on stderr.
    for line in out.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 6 and fields[0] in states:
            states[fields[0]] = "%s %s %s %s" % (fields[1], fields[2], fields[3], ",".join(sorted(fields[5].split(","))))
    return states


def member_states(group_members):
    """'GROUP USER' -> 'member', 'not member', 'no user' or 'no group'."""
    states = {}
    for group, users in sorted(group_members.items()):
        try:
            members = set(grp.getgrnam(group).gr_mem)
        except KeyError:
            members = None
        for user in users:
            try:
                pwd.getpwnam(user)
            except KeyError:
                states["%s %s" % (group, user)] = "no user"
                continue
            states["%s %s" % (group, user)] = ("no group" if members is None
                                               else "member" if user in members else "not member")
    return states


def snapshot(module, packages, paths, services, installed_packages=(), snaps=(), group_members=None, observed=None):
    items = {}
    items.update(("package " + name, state) for name, state in package_states(module, packages).items())
    items.update(("installed " + name, "absent" if state == "absent" else "installed")
                 for name, state in package_states(module, installed_packages).items())
    items.update(("path " + path, path_state(path)) for path in paths)
    items.update(("service " + unit, state) for unit, state in service_states(module, services).items())
    items.update(("snap " + name, state) for name, state in snap_states(module, snaps).items())
    items.update(("member " + key, state) for key, state in member_states(group_members or {}).items())
    items.update(("observed " + str(key), str(state)) for key, state in (observed or {}).items())
    return items


def recorded_members(items):
    """The group_members a record's 'member GROUP USER' items name."""
    members = {}
    for item in items:
        if item.startswith("member ") and len(item.split(" ")) == 3:
            dummy, group, user = item.split(" ")
            members.setdefault(group, []).append(user)
    return members


def unreadable(state):
    return str(state).startswith("unreadable")


def read_record(path):
    try:
        with open(path) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("format") == FORMAT else None


def compare(record, digest, now):
    """(converged, reason, drift) of a record against the inputs digest and the items as they read now."""
    if record is None:
        return False, "no record of a full run of the role", []
    if record.get("inputs_digest") != digest:
        return False, "the role's inputs changed since its last full run (variables, role files or version)", []
    drift = ["%s: recorded %s, now %s" % (item, recorded, now.get(item))
             for item, recorded in sorted(record.get("items", {}).items())
             if now.get(item) != recorded or unreadable(recorded)]
    if drift:
        return False, "drift: " + "; ".join(drift), drift
    return True, "", []


def write_record(path, record):
    """Replace the record in one step: a run killed half-way leaves the old record or the new one, never a torn file."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".converged-")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(record, out, indent=1, sort_keys=True)
            out.write("\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def main():
    module = AnsibleModule(
        argument_spec=dict(
            role=dict(type="str", required=True),
            inputs=dict(type="raw"),
            inputs_digest=dict(type="str"),
            record=dict(type="bool", default=False),
            packages=dict(type="list", elements="str", default=[]),
            installed_packages=dict(type="list", elements="str", default=[]),
            paths=dict(type="list", elements="path", default=[]),
            services=dict(type="list", elements="str", default=[]),
            snaps=dict(type="list", elements="str", default=[]),
            group_members=dict(type="dict", default={}),
            observed=dict(type="dict", default={}),
            controller_paths=dict(type="list", elements="path", default=[]),
            record_dir=dict(type="path", default="/var/lib/dlinfra/converged"),
            gather_facts=dict(type="bool", default=False),  # the action plugin's: it gathers them, then calls this
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not params["inputs_digest"]:
        module.fail_json(msg="converged_state: inputs_digest is empty; call the module through its action plugin "
                             "(dlinfra.gpu_cluster.converged_state), which computes it")
    if "/" in params["role"] or params["role"].startswith("."):
        module.fail_json(msg="converged_state: role %r is not a role name" % params["role"])
    path = os.path.join(params["record_dir"], params["role"] + ".json")
    if not shutil.which("dpkg-query"):
        module.exit_json(changed=False, converged=False, drift=[],
                         reason="no dpkg-query on this host: the record covers apt systems only, so the role runs in full")
    if params["record"]:
        record = {"format": FORMAT, "role": params["role"], "inputs_digest": params["inputs_digest"],
                  "items": snapshot(module, params["packages"], params["paths"], params["services"],
                                    params["installed_packages"], params["snaps"], params["group_members"],
                                    params["observed"])}
        changed = read_record(path) != record
        if changed and not module.check_mode:
            write_record(path, record)
        module.exit_json(changed=changed, converged=True, reason="", drift=[])
    record = read_record(path)
    items = record.get("items", {}) if record else {}
    now = snapshot(module, [item[len("package "):] for item in items if item.startswith("package ")],
                   [item[len("path "):] for item in items if item.startswith("path ")],
                   [item[len("service "):] for item in items if item.startswith("service ")],
                   [item[len("installed "):] for item in items if item.startswith("installed ")],
                   [item[len("snap "):] for item in items if item.startswith("snap ")],
                   recorded_members(items), params["observed"])
    converged, reason, drift = compare(record, params["inputs_digest"], now)
    module.exit_json(changed=False, converged=converged, reason=reason, drift=drift)


if __name__ == "__main__":
    main()
