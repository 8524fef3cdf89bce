#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: validate_report
short_description: Evaluate the validate role's readings and write report.json, junit.xml and report.html
version_added: 0.1.0
description:
  - Runs on the controller (an action plugin; this file only documents it), once for all nodes.
  - Turns what the P(dlinfra.gpu_cluster.validate#role) role read on every node into checks, each V(pass), V(fail) or
    V(skip) with the expected value, the measured value and a message, plus the measurements the report plots.
  - Writes O(dest)/report.json (schema C(docs/validate_report.schema.json) in the collection), O(dest)/junit.xml and a
    self-contained O(dest)/report.html, each through a temporary file and a rename.
  - Needs matplotlib on the controller for report.html.
  - Meant to be used through the P(dlinfra.gpu_cluster.validate#role) role.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes.controller
attributes:
  check_mode:
    support: none
    details: The nodes are only read; the report is written in check mode too.
  diff_mode:
    support: none
options:
  dest:
    description: Directory on the controller for the three files; created when missing.
    type: path
    required: true
  nodes:
    description:
      - Per host, what the role read (its C(__validate_raw)); null for a host that failed before it was read.
      - Its C(read) maps each phase tag (C(validate_gpu), C(validate_runtime), ...) to whether this run read it; the
        checks of a phase not read are skipped, with that reason. Without C(read), every phase counts as read.
    type: dict
    required: true
  gpu_models:
    description: The thresholds table by GPU model (the role's vars/gpu_models.yml).
    type: dict
  plan_dir:
    description: Where shard_staging's plans are, for the datasets' mode, replicas and size.
    type: path
  inventory:
    description: The inventory's path, shown in the report.
    type: str
"""

EXAMPLES = r"""
- name: Evaluate and write the report
  dlinfra.gpu_cluster.validate_report:
    dest: /tmp/acceptance
    nodes: "{{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars)
                    | map(attribute='__validate_raw', default=None))) }}"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
summary:
  description: Overall status, counts by status and the status of each node.
  returned: always
  type: dict
  sample: {status: fail, counts: {pass: 40, fail: 1, skip: 12}, nodes: {gpu1: fail, gpu2: pass}}
summary_line:
  description: The summary in one line.
  returned: always
  type: str
paths:
  description: The files written, by name.
  returned: always
  type: dict
failed_checks:
  description: Every failed check (node, check, expected, measured, message).
  returned: always
  type: list
  elements: dict
failure_lines:
  description: "The failed checks as lines: C(NODE CHECK: MESSAGE)."
  returned: always
  type: list
  elements: str
failed_gpu_checks:
  description: Per node with a failed GPU check, the failed GPU check ids.
  returned: always
  type: dict
"""
