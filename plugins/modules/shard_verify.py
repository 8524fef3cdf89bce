#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: shard_verify
short_description: Check a node's staged shards against its plan, re-hash a sample and check the rank lists
version_added: 0.1.0
description:
  - Compares the shards in O(dest) with the ones the plan puts on this node (O(shards)) by name and size.
  - Re-computes the sha256 of a random sample of the shards that are present with the planned size, a fraction
    O(sample_fraction) of them (at least one).
  - Reads the per-rank lists a training job reads (C(ranks/rank-NNNN.txt), written by M(dlinfra.gpu_cluster.shard_fetch))
    and checks that together they name every planned shard exactly once and nothing else.
  - It only reads; nothing on the host changes.
  - The action plugin of the same name reads the plan file on the controller (O(plan)) and passes this host's shards.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes.read_only
options:
  dest:
    description: The dataset's directory on the node.
    type: path
    required: true
  shards:
    description:
      - The shards the plan puts on this node, each with C(name), C(size) in bytes and C(sha256).
      - The action plugin fills it from O(plan); give one of the two.
    type: list
    elements: dict
  streamed:
    description:
      - The shards this node reads from their source (stream mode), each with C(name) and C(url); the rank lists name
        their URLs. The action plugin fills it from O(plan).
    type: list
    elements: dict
    default: []
  plan:
    description:
      - Path on the controller of the plan M(dlinfra.gpu_cluster.shard_plan) wrote (C(NAME.plan.json) in
        C(shard_staging_plan_dir)). This host's shards are taken from its C(assignment).
      - When the file does not exist the result says so (RV(plan_missing)) and nothing runs on the node.
    type: path
  sample_fraction:
    description: Fraction of the present shards whose sha256 is computed again, at least one shard when any is present.
    type: float
    default: 0.05
"""

EXAMPLES = r"""
- name: Check the staged yt8m shards against their plan
  dlinfra.gpu_cluster.shard_verify:
    dest: /srv/datasets/yt8m
    plan: "{{ inventory_dir }}/.shard_staging/yt8m.plan.json"
    sample_fraction: 0.01
  register: __shards
"""

RETURN = r"""
plan_missing:
  description: Whether the plan file was missing on the controller (then no other key is returned).
  returned: always
  type: bool
planned:
  description: Shards and bytes the plan puts on this node.
  returned: unless plan_missing
  type: dict
  sample: {shards: 16, bytes: 1802240}
present:
  description: Planned shards present with the planned size, and their bytes.
  returned: unless plan_missing
  type: dict
  sample: {shards: 16, bytes: 1802240}
missing:
  description: Planned shards that are absent (sorted).
  returned: unless plan_missing
  type: list
  elements: str
wrong_size:
  description: Planned shards present with another size.
  returned: unless plan_missing
  type: list
  elements: dict
  sample: [{name: chunks-000003.tar, expected: 112640, actual: 4096}]
unplanned:
  description: Files in O(dest) that are not planned here (not counting the hand-off lists and the engine's own dot files).
  returned: unless plan_missing
  type: list
  elements: str
sampled:
  description: Names of the shards whose sha256 was computed again.
  returned: unless plan_missing
  type: list
  elements: str
checksum_mismatch:
  description: Sampled shards whose sha256 differs from the plan's.
  returned: unless plan_missing
  type: list
  elements: str
ranks:
  description: >-
    The rank lists: C(files) read, C(missing) planned shards no rank names, C(unplanned) entries that are not planned
    shards of this node, C(duplicates) entries named more than once.
  returned: unless plan_missing
  type: dict
"""

import hashlib
import math
import os
import random

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.handoff import (
    HANDOFF_FILES, HANDOFF_RANKS, RANK_FILE_RE)


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_ranks(dest):
    ranks_dir = os.path.join(dest, HANDOFF_RANKS)
    files = sorted(entry for entry in (os.listdir(ranks_dir) if os.path.isdir(ranks_dir) else []) if RANK_FILE_RE.match(entry))
    entries = []
    for entry in files:
        with open(os.path.join(ranks_dir, entry)) as handle:
            entries.extend(line.strip() for line in handle if line.strip())
    return files, entries


def verify(dest, shards, sample_fraction, rng=random, streamed=()):
    """What differs between dest and the planned shards (and the rank lists and the streamed shards); see RETURN."""
    planned = {shard["name"]: shard for shard in shards}
    on_disk = {}
    if os.path.isdir(dest):
        for entry in os.scandir(dest):
            if entry.name.startswith(".") or entry.name in HANDOFF_FILES or not entry.is_file(follow_symlinks=False):
                continue
            on_disk[entry.name] = entry.stat(follow_symlinks=False).st_size
    missing = sorted(name for name in planned if name not in on_disk)
    wrong_size = [{"name": name, "expected": int(planned[name]["size"]), "actual": on_disk[name]}
                  for name in sorted(planned) if name in on_disk and on_disk[name] != int(planned[name]["size"])]
    good = sorted(name for name in planned if on_disk.get(name) == int(planned[name]["size"]))
    count = min(len(good), max(1, int(math.ceil(sample_fraction * len(good))))) if good else 0
    sampled = sorted(rng.sample(good, count))
    mismatch = [name for name in sampled if _sha256(os.path.join(dest, name)) != planned[name]["sha256"]]

    files, entries = _read_ranks(dest)
    wanted = {os.path.join(os.path.abspath(dest), name) for name in planned} | {shard["url"] for shard in streamed}
    seen, duplicates = set(), set()
    for entry in entries:
        (duplicates if entry in seen else seen).add(entry)
    return {
        "plan_missing": False,
        "planned": {"shards": len(planned), "bytes": sum(int(s["size"]) for s in planned.values())},
        "present": {"shards": len(good), "bytes": sum(on_disk[name] for name in good)},
        "missing": missing,
        "wrong_size": wrong_size,
        "unplanned": sorted(name for name in on_disk if name not in planned),
        "sampled": sampled,
        "checksum_mismatch": mismatch,
        "ranks": {"files": files, "missing": sorted(os.path.basename(p) for p in wanted - seen),
                  "unplanned": sorted(seen - wanted), "duplicates": sorted(duplicates)},
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            shards=dict(type="list", elements="dict"),
            streamed=dict(type="list", elements="dict", default=[]),
            plan=dict(type="path"),
            sample_fraction=dict(type="float", default=0.05),
        ),
        required_one_of=[("shards", "plan")],
        supports_check_mode=True,
    )
    fraction = module.params["sample_fraction"]
    if not 0 <= fraction <= 1:
        module.fail_json(msg="sample_fraction=%s must be between 0 and 1" % fraction)
    if module.params["shards"] is None:
        module.fail_json(msg="shard_verify: the plan is read by the action plugin on the controller; call the module as "
                             "dlinfra.gpu_cluster.shard_verify so it runs, or give shards")
    for shard in module.params["shards"]:
        if not {"name", "size", "sha256"} <= set(shard):
            module.fail_json(msg="shards: every entry needs name, size and sha256; got %s" % sorted(shard))
    try:
        result = verify(module.params["dest"], module.params["shards"], fraction, streamed=module.params["streamed"])
    except OSError as error:
        module.fail_json(msg="could not read %s: %s" % (module.params["dest"], error))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
