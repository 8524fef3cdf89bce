#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: shard_space
short_description: The room a node has for a staged dataset
version_added: 0.1.0
description:
  - Reports the free and total bytes of the filesystem that holds (or will hold) a dataset directory, and the
    bytes of the dataset already staged there according to the staging journal.
  - The shard_staging role reads it on every target before planning where shards go.
  - Only reads; the directory does not need to exist yet (the nearest existing parent is measured).
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads only.
  diff_mode:
    support: none
  platform:
    platforms: posix
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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_dest import JOURNAL_NAME, Journal, nearest_existing
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_errors import StagingError


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


def main():
    module = AnsibleModule(argument_spec={"dest": {"type": "path", "required": True}}, supports_check_mode=True)
    dest = os.path.abspath(module.params["dest"])
    measured = nearest_existing(dest)
    try:
        stats = os.statvfs(measured)
    except OSError as exc:
        module.fail_json(msg="dest %s: cannot measure the filesystem at %s (%s); check the mount" % (dest, measured, exc))
    held = {}
    if os.path.isdir(dest):
        try:
            held = Journal.load(os.path.join(dest, JOURNAL_NAME), dest).entries
        except StagingError as exc:
            module.fail_json(msg=str(exc))
    module.exit_json(
        changed=False,
        dest=dest,
        exists=os.path.isdir(dest),
        measured_path=measured,
        writable=os.access(measured, os.W_OK),
        free_bytes=stats.f_bavail * stats.f_frsize,
        total_bytes=stats.f_blocks * stats.f_frsize,
        held_bytes=sum(int(entry[0]) for entry in held.values()),
        held_shards=len(held),
        route_address=route_address(),
    )


if __name__ == "__main__":
    main()
