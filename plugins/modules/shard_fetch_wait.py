#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: shard_fetch_wait
short_description: Wait for a node's async shard_fetch job and return what it reported
version_added: 0.1.0
description:
  - An action plugin; this file only documents it.
  - Asks the node every O(poll) seconds whether its async job (see P(dlinfra.gpu_cluster.shard_fetch#module), started
    with C(async) and a C(poll) of 0) has finished, then removes the job's status file and returns the job's result as the
    task's own (failed when the fetch failed). Unlike a C(until) loop over C(async_status) it prints nothing while it
    waits.
  - Meant to be used through the P(dlinfra.gpu_cluster.shard_staging#role) role.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: none
    details: There is no job to wait for in check mode; the role does not start one.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  jid:
    description: The job's id, C(ansible_job_id) of the task that started it.
    type: str
    required: true
  poll:
    description: Seconds between looks.
    type: float
    default: 10
  timeout:
    description: Seconds to wait at most; the job itself goes on after that.
    type: float
    default: 604800
"""

EXAMPLES = r"""
- name: Start fetching
  dlinfra.gpu_cluster.shard_fetch:
    dest: /srv/datasets/yt8m
    shards_file: /tmp/shards.json
  async: 86400
  poll: 0
  register: job

- name: Wait for it
  dlinfra.gpu_cluster.shard_fetch_wait:
    jid: "{{ job.ansible_job_id }}"
    poll: 10
"""

RETURN = r"""
fetched:
  description: What P(dlinfra.gpu_cluster.shard_fetch#module) returned, key by key (see its return values).
  returned: when the fetch ran
  type: int
  sample: 120
"""
