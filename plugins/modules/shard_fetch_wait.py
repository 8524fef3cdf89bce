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
    task's own (failed when the fetch failed). Unlike a C(until) loop over C(async_status) it prints no line per look.
  - "With O(dest) and O(progress_id) it shows, every O(progress_interval) seconds and without C(-v), one line per node from
    the progress file the fetch keeps in O(dest) (shards and bytes done of the run's total, the current rate, an ETA), for
    example C(gpu1 yt8m: 1,234/10,000 shards, 1.1 TiB/8.9 TiB, 1.0 GiB/s, ETA 2h 10m), and one line for all of O(hosts);
    a file another run left (its id is not O(progress_id)) is never shown."
  - "When the job ends it prints one summary line per node, for example
    C(gpu1 yt8m: done in 2h 10m, 1,234 fetched (12 resumed), 8,766 confirmed, 0 removed, 0 failed, 8.9 TiB at 1.0 GiB/s)."
  - Meant to be used through the P(dlinfra.gpu_cluster.shard_staging#role) role.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes
attributes:
  check_mode:
    support: none
    details: There is no job to wait for in check mode; the role does not start one.
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
  dest:
    description: The fetch's O(dlinfra.gpu_cluster.shard_fetch#module:dest), where its progress file is; without it no progress is shown.
    type: path
  progress_id:
    description:
      - The O(dlinfra.gpu_cluster.shard_fetch#module:progress_id) the job was started with; only a progress file that carries
        it is shown. Without it no progress is shown.
      - It also names the place on the controller where every node's wait leaves its latest numbers for the cluster total.
    type: str
  progress_interval:
    description: Seconds between progress lines.
    type: float
    default: 30
  label:
    description: What the lines call the fetch after the node's name, for example the dataset's name.
    type: str
    default: ""
  hosts:
    description:
      - The hosts whose fetches of the same O(progress_id) make up the cluster total; the total is shown when there is more than one.
      - Defaults to C(ansible_play_hosts).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Start fetching
  dlinfra.gpu_cluster.shard_fetch:
    dest: /srv/datasets/yt8m
    shards_file: /tmp/shards.json
    progress_id: yt8m-20240501
  async: 86400
  poll: 0
  register: job

- name: Wait for it
  dlinfra.gpu_cluster.shard_fetch_wait:
    jid: "{{ job.ansible_job_id }}"
    poll: 10
    dest: /srv/datasets/yt8m
    progress_id: yt8m-20240501
    label: yt8m
"""

RETURN = r"""
fetched:
  description: What P(dlinfra.gpu_cluster.shard_fetch#module) returned, key by key (see its return values).
  returned: when the fetch ran
  type: int
  sample: 120
"""
