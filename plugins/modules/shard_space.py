#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: shard_space
short_description: The room a node has for a staged dataset
version_added: 0.1.0
description:
  - Reports the free and total bytes of the filesystem that holds (or will hold) a dataset directory, the bytes of the
    dataset already staged there according to the staging journal, and the bytes the dataset's directory takes up
    whatever a run left there (RV(ours_bytes)).
  - The shard_staging role reads it on every target before planning where shards go.
  - Only reads; the directory does not need to exist yet (the nearest existing parent is measured).
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes.read_only
options:
  dest:
    description: The dataset directory (absolute path).
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Measure the room for yt8m
  dlinfra.gpu_cluster.shard_space:
    dest: /raid/datasets/yt8m
  register: yt8m_space
"""

RETURN = r"""
dest:
  description: The directory asked about.
  returned: always
  type: str
exists:
  description: Whether O(dest) exists.
  returned: always
  type: bool
measured_path:
  description: The existing directory whose filesystem was measured (O(dest) or its nearest existing parent).
  returned: always
  type: str
writable:
  description: Whether the measured directory is writable by the module's user.
  returned: always
  type: bool
free_bytes:
  description: Bytes available to unprivileged users on that filesystem.
  returned: always
  type: int
total_bytes:
  description: Size of that filesystem.
  returned: always
  type: int
held_bytes:
  description: Bytes of shards the staging journal in O(dest) records as staged (0 without a journal).
  returned: always
  type: int
held_shards:
  description: Number of shards the journal records.
  returned: always
  type: int
ours_bytes:
  description:
    - Bytes the filesystem has given to O(dest) and everything under it (0 where it does not exist yet) - journaled
      shards, whole shards an interrupted run renamed into place before its journal listed them, partial files, the
      journal, the lock and the hand-off lists alike, as the allocated blocks (C(st_blocks) x 512) of each file and
      directory, each inode once, not crossing into other filesystems and not following links.
    - O(dest) is the dataset's own directory, so all of it counts as the dataset's; a file someone else put there
      counts too.
    - Free space is counted in the same blocks, so RV(free_bytes) + RV(ours_bytes) stays the same however far a
      staging run got; the planner weighs nodes by that sum, so a killed and re-run staging plans what an
      uninterrupted one plans.
  returned: always
  type: int
route_address:
  description:
    - The address this node sends from on its default route (IPv4, else IPv6), found without sending anything; null without
      a default route. The role serves peers on it unless C(shard_staging_peer_address) says otherwise.
  returned: always
  type: str
  sample: 10.0.0.11
"""

import os
import socket
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import JOURNAL_NAME, Journal, nearest_existing


def route_address():
    """The local address of the default route: connecting a UDP socket picks it and sends nothing (documentation addresses)."""
    for family, probe in ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect(probe)
                return sock.getsockname()[0]
        except OSError:
            continue
    return None


def ours_bytes(dest):
    """The bytes the filesystem has allocated to dest and everything under it: st_blocks x 512 of each entry (lstat),
    each inode once, without following links or crossing into another filesystem; 0 where dest is not a directory.

    Everything counts, not only what the journal lists: shards renamed into place before their journal entry, partial
    files and their states, the journal and its temporaries, the lock, the hand-off lists. Allocated blocks, not file
    sizes, because f_bavail counts blocks: as a partial file grows, free space falls by what this rises by.
    An entry that vanishes while it is walked (a run is going on) is skipped."""
    try:
        top = os.lstat(dest)
    except OSError:
        return 0
    if not stat.S_ISDIR(top.st_mode):
        return 0
    seen = {(top.st_dev, top.st_ino)}
    total = top.st_blocks * 512
    pending = [dest]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_dev != top.st_dev or (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
    return total


def measure(dest, statvfs=os.statvfs):
    """What the module reports about dest (but route_address), or raises StagingError naming the problem.

    ``statvfs`` measures the filesystem (tests give a fake one: a real filesystem's free space moves with every other
    process writing to it)."""
    measured = nearest_existing(dest)
    try:
        stats = statvfs(measured)
    except OSError as exc:
        raise StagingError("dest %s: cannot measure the filesystem at %s (%s); check the mount" % (dest, measured, exc))
    exists = os.path.isdir(dest)
    held = Journal.load(os.path.join(dest, JOURNAL_NAME), dest).entries if exists else {}
    return dict(
        dest=dest,
        exists=exists,
        measured_path=measured,
        writable=os.access(measured, os.W_OK),
        free_bytes=stats.f_bavail * stats.f_frsize,
        total_bytes=stats.f_blocks * stats.f_frsize,
        held_bytes=sum(int(entry[0]) for entry in held.values()),
        held_shards=len(held),
        ours_bytes=ours_bytes(dest) if exists else 0,
    )


def main():
    module = AnsibleModule(argument_spec={"dest": {"type": "path", "required": True}}, supports_check_mode=True)
    try:
        result = measure(os.path.abspath(module.params["dest"]))
    except StagingError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, route_address=route_address(), **result)


if __name__ == "__main__":
    main()
