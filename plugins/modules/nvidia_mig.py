#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_mig
short_description: Bring a node's GPUs to their declared MIG mode and instances with nvidia-smi
version_added: 0.2.0
description:
  - Reads each GPU's MIG mode (C(nvidia-smi -q -x)) and its GPU and compute instances (C(nvidia-smi mig -lgi),
    C(-lci)), compares them with O(layout) and runs the C(nvidia-smi) commands that reach it, and only those - the
    instances a GPU should not have destroyed (compute instances first), MIG mode switched on or off, the declared
    GPU instances created each at its placement with its default compute instance (C(mig -cgi ID:START,... -C)).
    A GPU already as declared gets no command.
  - A new MIG mode takes effect when the GPU is reset. Where C(-mig) leaves it pending (a client holds the GPU), the
    module resets the GPU with C(nvidia-smi -r) when O(reset) allows it; where the reset is refused or not allowed,
    it returns RV(reboot_required) with the GPUs in RV(pending), and creates their instances on its next run, after
    the reboot.
  - It changes GPUs that must be free of work. The caller (the rolling_upgrade role's path) has drained the node and
    waited until no GPU process runs; this module does not check it.
  - MIG instances do not survive a reboot. RV(create_commands) are the commands that create the layout on GPUs with
    MIG mode on and no instances, for a unit that applies the layout at boot.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes
attributes:
  check_mode:
    support: full
    details: Reads and returns the commands it would run in RV(commands), changing nothing.
  diff_mode:
    support: full
    details: Each GPU's MIG mode and instances (profile and placement start) before and after.
options:
  layout:
    description:
      - GPU index to the GPU instances to have on it, each a dict of C(profile) (its name), C(profile_id) and C(start)
        (the placement's first memory slice), as the C(dlinfra.gpu_cluster.gpu_sharing_resolved) filter resolves them
        (a GPU's C(instances)). A GPU not named, or named with none, has MIG mode off.
    type: dict
    required: true
  reset:
    description: Reset a GPU whose new MIG mode is pending (nothing may run on it) instead of leaving it to a reboot.
    type: bool
    default: true
  nvidia_smi_path:
    description: The C(nvidia-smi) binary; looked up on E(PATH) and in the sbin directories when not set.
    type: path
seealso:
  - name: NVIDIA Multi-Instance GPU User Guide
    description: MIG mode, GPU and compute instances, placements, and the nvidia-smi commands this module runs.
    link: https://docs.nvidia.com/datacenter/tesla/mig-user-guide/
"""

EXAMPLES = r"""
- name: Two 3g.40gb instances on GPU 0, the other GPUs whole
  dlinfra.gpu_cluster.nvidia_mig:
    layout:
      "0":
        - {profile: 3g.40gb, profile_id: 9, start: 0}
        - {profile: 3g.40gb, profile_id: 9, start: 4}
  register: mig

- name: Reboot where the new MIG mode waits for it
  ansible.builtin.reboot:
  when: mig.reboot_required
"""

RETURN = r"""
commands:
  description: The nvidia-smi commands run (in check mode, those a run would start with), each an argv list.
  returned: always
  type: list
  elements: list
reboot_required:
  description: Whether a GPU's new MIG mode waits for a reboot (its instances are created on the next run).
  returned: always
  type: bool
pending:
  description: The indexes of the GPUs whose new MIG mode waits for a reboot.
  returned: always
  type: list
  elements: int
gpus:
  description: Each GPU after the run (in check mode, as read) - C(index), C(mig) (the current mode), C(mig_pending)
    and C(instances) (C(profile) and C(start) of each GPU instance with a compute instance).
  returned: always
  type: list
  elements: dict
layout:
  description: The node's instances as read before the run, in the form of O(layout) (a GPU with MIG mode off, or on
    with no instance, is left out), which a rollback applies.
  returned: always
  type: dict
reasons:
  description: One line per GPU the run changes (or would change), as C(GPU 0 MIG off -> 3g.40gb@0, 3g.40gb@4).
  returned: always
  type: list
  elements: str
create_commands:
  description: The commands that create the declared instances on a GPU that has MIG mode on and none (after a boot),
    each an argv list.
  returned: always
  type: list
  elements: list
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.mig_state import (
    create_command, mig_apply_plan, parse_compute_instances, parse_gpu_instances)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_smi import (
    NvidiaSmiParseError, parse_nvidia_smi_xml)


class NvidiaSmi:
    """nvidia-smi on this node, and the commands that changed something."""

    def __init__(self, module, path):
        self.module, self.path, self.ran = module, path, []

    def run(self, argv, change=False):
        """Run nvidia-smi with argv[1:] (argv[0] is the plan's "nvidia-smi"); a change that fails stops the module."""
        argv = [self.path] + list(argv[1:])
        rc, out, err = self.module.run_command(argv)
        if change:
            self.ran.append(argv)
        if rc != 0 and change:
            self.module.fail_json(msg="%s failed (exit %d): %s" % (" ".join(argv), rc, (out + err).strip()[-2000:]),
                                  commands=self.ran)
        return rc, out + err

    def read(self):
        """(gpus as nvidia_smi parses them, what -lgi printed, what -lci printed)."""
        rc, report = self.run(["nvidia-smi", "-q", "-x"])
        try:
            gpus = parse_nvidia_smi_xml(report)["gpus"]
        except NvidiaSmiParseError as error:
            self.module.fail_json(msg="%s -q -x (exit %d) printed no report this module can read (%s)"
                                  % (self.path, rc, error))
        if not any(gpu["mig_mode_current"] for gpu in gpus):
            return gpus, "", ""
        # Where there are no instances both print a line of text and exit non-zero.
        return gpus, self.run(["nvidia-smi", "mig", "-lgi"])[1], self.run(["nvidia-smi", "mig", "-lci"])[1]


def pending(gpus):
    return [gpu["index"] for gpu in gpus if bool(gpu["mig_mode_current"]) != bool(gpu["mig_mode_pending"])]


def shown(gpus, lgi, lci):
    """Each GPU's mode and its instances that have a compute instance (profile@start), for the result and the diff."""
    layout = current_layout(lgi, lci)
    return [{"index": gpu["index"], "mig": bool(gpu["mig_mode_current"]), "mig_pending": bool(gpu["mig_mode_pending"]),
             "instances": sorted("%s@%d" % (item["profile"], item["start"]) for item in layout.get(str(gpu["index"]), []))}
            for gpu in gpus]


def declared(module, gpus):
    """{GPU index: instances} from the layout option, refusing an index the node does not have."""
    layout, indexes = {}, sorted(gpu["index"] for gpu in gpus)
    for key, instances in module.params["layout"].items():
        if not str(key).isdigit() or int(key) not in indexes:
            module.fail_json(msg="layout names GPU %s, and this node's GPUs are %s: use one of those indexes"
                             % (key, indexes))
        try:
            layout[int(key)] = [{"profile": str(item["profile"]), "profile_id": int(item["profile_id"]),
                                 "start": int(item["start"])} for item in instances or []]
        except (KeyError, TypeError, ValueError):
            module.fail_json(msg="layout's GPU %s: each instance needs profile, profile_id and start (%s); resolve the "
                                 "layout with the dlinfra.gpu_cluster.gpu_sharing_resolved filter" % (key, instances))
    return layout


def current_layout(lgi, lci):
    """The instances that have a compute instance, per GPU index, in the form of the layout option."""
    with_compute = {(ci["gpu"], ci["gpu_instance_id"]) for ci in parse_compute_instances(lci)}
    layout = {}
    for gi in parse_gpu_instances(lgi):
        if (gi["gpu"], gi["instance_id"]) in with_compute:
            layout.setdefault(str(gi["gpu"]), []).append(
                {"profile": gi["profile"], "profile_id": gi["profile_id"], "start": gi["start"]})
    return {index: sorted(instances, key=lambda item: item["start"]) for index, instances in sorted(layout.items())}


def reasons(before, after, changed):
    """'GPU 0 MIG off -> 3g.40gb@0, 3g.40gb@4' for each changed GPU."""
    def said(gpu):
        return ", ".join(gpu["instances"]) if gpu["mig"] and gpu["instances"] else "MIG on" if gpu["mig"] else "MIG off"
    return ["GPU %d %s -> %s" % (old["index"], said(old), said(new)) for old, new in zip(before, after)
            if old["index"] in changed]


def expected(gpus, layout):
    """What a run leaves: each GPU as ``shown`` gives it, from the layout."""
    return [{"index": gpu["index"], "mig": bool(layout.get(gpu["index"])), "mig_pending": bool(layout.get(gpu["index"])),
             "instances": sorted("%s@%d" % (item["profile"], item["start"]) for item in layout.get(gpu["index"], []))}
            for gpu in gpus]


def main():
    module = AnsibleModule(
        argument_spec=dict(layout=dict(type="dict", required=True), reset=dict(type="bool", default=True),
                           nvidia_smi_path=dict(type="path")),
        supports_check_mode=True,
    )
    smi = NvidiaSmi(module, module.params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi", required=True))
    gpus, lgi, lci = smi.read()
    layout = declared(module, gpus)
    before = shown(gpus, lgi, lci)
    plan = mig_apply_plan(gpus, layout, lgi, lci)
    result = dict(changed=bool(plan["changed"]), commands=[[smi.path] + argv[1:] for argv in plan["commands"]],
                  reboot_required=False, pending=pending(gpus), gpus=before, layout=current_layout(lgi, lci),
                  reasons=reasons(before, expected(gpus, layout), plan["changed"]),
                  create_commands=[[smi.path] + argv[1:] for argv in
                                   (create_command(index, layout[index]) for index in sorted(layout)) if argv])
    if plan["changed"] and module._diff:
        result["diff"] = {"before": {"gpus": before}, "after": {"gpus": expected(gpus, layout)}}
    if module.check_mode or not plan["changed"]:
        module.exit_json(**result)

    for argv in plan["commands"]:
        smi.run(argv, change=True)
    gpus, lgi, lci = smi.read()
    if pending(gpus) and module.params["reset"]:
        for index in pending(gpus):
            # Refused while a client holds the GPU: the mode then waits for the reboot.
            smi.run(["nvidia-smi", "-r", "-i", str(index)])
        gpus, lgi, lci = smi.read()
    # The instances of the GPUs whose mode has taken effect; the others' wait for the reboot.
    for argv in mig_apply_plan(gpus, layout, lgi, lci)["commands"]:
        smi.run(argv, change=True)
    gpus, lgi, lci = smi.read()
    result.update(commands=smi.ran, gpus=shown(gpus, lgi, lci), pending=pending(gpus))
    result["reboot_required"] = bool(result["pending"])
    if module._diff:
        result["diff"] = {"before": {"gpus": before}, "after": {"gpus": result["gpus"]}}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
