#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: shard_plan
short_description: Plan where the shards of sharded datasets go across staging nodes
version_added: 0.1.0
description:
  - Runs on the controller (an action plugin; this file only documents it), once for all targets.
  - Expands each dataset's source patterns, learns shard sizes and sha256 from its index or sizes from HEAD
    requests, takes each target's room from O(reports) (what the shard_staging role's probe found there),
    chooses replicate or partition mode, places partitioned shards by weighted rendezvous hashing, and compares
    the result with the previous plan.
  - Prints the plan's summary, one line per dataset (also returned as RV(msg)), on every run, as the fetch's progress
    is printed.
  - Plans each cluster's targets apart (see O(cluster_group_pattern)).
  - Writes C(PLAN_DIR/CLUSTER/NAME.plan.json) (not in check mode) and, for each node, its shard list under
    C(PLAN_DIR/CLUSTER/lists/) named by content hash, which M(dlinfra.gpu_cluster.shard_fetch) takes as O(dlinfra.gpu_cluster.shard_fetch#module:shards_src).
  - Meant to be used through the P(dlinfra.gpu_cluster.shard_staging#role) role.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes.controller
attributes:
  check_mode:
    support: full
    details: Plans and reports, but leaves the previous plan in place.
  diff_mode:
    support: full
    details: Shows the previous and the new plan summaries.
options:
  datasets:
    description: The datasets, as the role's C(shard_staging_datasets) describes them (name, source, index, mode, replicas, headroom).
    type: list
    elements: dict
    required: true
  targets:
    description: The hosts to plan for, in inventory order; each needs its report in O(reports).
    type: list
    elements: str
    required: true
  reports:
    description:
      - Per target (its name as the key), what the role's probe found on it, in three parts.
      - >-
        V(room), its room report: V(reserve_bytes), the bytes to leave free; V(results), its
        M(dlinfra.gpu_cluster.shard_space) results, one per dataset; V(plan_dir), the host's C(shard_staging_plan_dir).
      - >-
        V(peer_endpoint), where it serves its shards to the others in a peer-assisted plan: V(address) and V(port).
      - >-
        V(ranks), its training ranks as read: V(set), C(shard_staging_ranks_per_node); V(gpus), the GPU count of its
        M(dlinfra.gpu_cluster.nvidia_gpu_facts) or null; V(gpu_group), whether it is in C(shard_staging_gpu_group).
      - A target without a report (unreachable, or failed earlier) has no room, and planning a dataset on it fails naming it.
    type: dict
    default: {}
  plan_dir:
    description:
      - Controller directory for plans and node lists, where a cluster's first target's room report names none (the
        role's report names the host's C(shard_staging_plan_dir), whose default follows the inventory source that
        defines the host).
    type: path
    required: true
  cluster_group_pattern:
    description:
      - Regular expression of the inventory groups that are clusters. Each cluster's targets are planned together, in
        C(PLAN_DIR/CLUSTER); those in no such group as one more cluster, in O(plan_dir) itself.
      - Unset, all targets are one cluster, in O(plan_dir).
    type: str
  timeout:
    description: Seconds for each index download and HEAD request.
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: Plan where every shard goes
  dlinfra.gpu_cluster.shard_plan:
    datasets: "{{ shard_staging_datasets }}"
    targets: "{{ shard_staging_targets }}"
    # Each target's report, here a fact staging_report ({"room", "peer_endpoint", "ranks"}) an earlier task set on it.
    reports: >-
      {{ dict(shard_staging_targets | zip(shard_staging_targets | map('extract', hostvars)
      | map(attribute='staging_report', default={}))) }}
    cluster_group_pattern: "^cluster_"
    plan_dir: "{{ shard_staging_plan_dir }}"
  run_once: true
  register: plan
"""

RETURN = r"""
msg:
  description: One summary line per dataset (mode, size, spread, what moves).
  returned: always
  type: str
datasets:
  description: Per dataset, the plan's outcome.
  returned: always
  type: dict
  contains:
    summary:
      description: The dataset's summary line per cluster (C(cluster NAME:) first, for a cluster group).
      type: str
    changes:
      description: Copies and bytes to fetch and remove versus the previous plans, all clusters together.
      type: dict
    headroom:
      description: The fraction of each node's usable space the plans leave free (the dataset's, or the default).
      type: float
    clusters:
      description: Per cluster (C('') for the targets in no cluster group), its plan's C(mode) (replicate, partition or
        stream), C(summary), C(plan_file), C(changes), C(headroom), C(transfer), C(balance) and C(changed).
      type: dict
    nodes:
      description: Per node, capacity, shards, bytes and what it fetches and removes.
      type: dict
    lists:
      description: Per node, the controller path of its shard list.
      type: dict
"""
