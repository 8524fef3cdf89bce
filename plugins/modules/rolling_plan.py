#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rolling_plan
short_description: Read what a node has installed and decide what a version change does to it
version_added: 0.2.0
description:
  - Reads the installed versions of the packages that carry the NVIDIA driver, the fabric manager, the NVIDIA Container
    Toolkit and NCCL (C(dpkg-query), or C(rpm) where there is no dpkg), the MicroK8s snap's channel (C(snap list)), the
    version and flavour (open or proprietary, C(/proc/driver/nvidia/version)) of the loaded nvidia kernel module, the
    flavour the nvidia_driver role installed (O(driver_plan_file)), the running and the newest installed kernel, and
    whether the system asks for a reboot (C(/run/reboot-required)).
  - Compares them with the pinned O(target) versions (a component the node does not have is left out, since installing it
    is the roles' work, not a change of version) and returns the plan for the node (which components change,
    whether it is drained, whether reloading the driver modules is enough or it must reboot), as
    C(dlinfra.gpu_cluster.rolling_change) decides it.
  - It only reads; nothing on the host changes.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes.read_only
options:
  target:
    description:
      - The pinned versions, keys V(driver), V(toolkit), V(nccl) and V(microk8s) (a snap channel). A pin is a version or
        its prefix (V(1.17.8) pins the package V(1.17.8-1), V(550) any 550 driver); an empty or missing key is not
        pinned and never changes.
      - V(driver_flavor), V(open) or V(proprietary), pins the driver's kernel module flavour; a node whose driver
        carries the other one changes its driver.
    type: dict
    required: true
  packages:
    description:
      - The package whose version stands for each component, keys V(driver), V(fabric_manager), V(toolkit), V(nccl).
        An empty name is not read.
    type: dict
    default: {driver: nvidia-smi, fabric_manager: "", toolkit: nvidia-container-toolkit, nccl: libnccl2}
  gpu_processes:
    description: Processes running on the node's GPUs (from M(dlinfra.gpu_cluster.nvidia_gpu_facts)); they hold the module.
    type: int
    default: 0
  sysfs_root:
    description: Where sysfs is mounted; the loaded module's version is C(<sysfs_root>/module/nvidia/version).
    type: path
    default: /sys
  procfs_root:
    description: Where procfs is mounted; the loaded module's flavour is read from C(<procfs_root>/driver/nvidia/version).
    type: path
    default: /proc
  driver_plan_file:
    description:
      - The nvidia_driver role's record of the node's driver (its C(flavor)). Where it is missing, the loaded module's
        flavour stands for the installed one. The roles pass the collection's C(gpu_cluster_driver_plan_file).
    type: path
    required: true
  boot_dir:
    description: Where the installed kernels are (C(vmlinuz-VERSION)).
    type: path
    default: /boot
  reboot_required_file:
    description: The file packages write when the system must reboot (Debian and Ubuntu); its C(.pkgs) companion names them.
    type: path
    default: /run/reboot-required
  state_file:
    description:
      - A JSON file a run left on the node when its change did not finish (the rolling_upgrade role's
        C(rolling_upgrade_state_file)); returned as RV(resume). Not read when unset.
    type: path
  gpu_facts:
    description:
      - Read the GPUs first, with M(dlinfra.gpu_cluster.nvidia_gpu_facts) under O(sysfs_root) and O(procfs_root) (returned
        as RV(gpu)), in the same task. Their processes count as O(gpu_processes), and V(driver_flavor) in O(target)
        (V(auto), V(open) or V(proprietary)) becomes the flavour these GPUs get, as the nvidia_driver role plans it, on
        the pinned branch, else the recorded one, else the loaded driver's. A flavour they cannot take fails the task,
        naming the host, the GPUs and the fix. Controller side (the action plugin).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Decide what moving the toolkit to 1.17.9 does to this node
  dlinfra.gpu_cluster.rolling_plan:
    target: {toolkit: "1.17.9"}
    driver_plan_file: /var/lib/dlinfra/nvidia_driver.json
  register: __plan

- name: Drain only where something changes
  ansible.builtin.debug:
    msg: "{{ __plan.plan.reasons }}"
  when: __plan.plan.drain
"""

RETURN = r"""
installed:
  description:
    - What the node has, as read (package versions; V(driver_loaded) null when no nvidia module is loaded; V(microk8s) the
      channel the snap tracks; V(driver_flavor) and V(driver_flavor_loaded) the installed and the loaded module's
      flavour, null where unknown; V(kernel_running), V(kernel_newest), V(reboot_required), V(gpu_processes),
      V(module_holders)). Null for a package that is not installed.
  returned: always
  type: dict
  sample: {driver: 550.163.01-1, toolkit: 1.17.8-1, nccl: 2.22.3-1, microk8s: 1.32/stable, driver_loaded: null}
target:
  description: The pins the plan was made for, V(driver_flavor) resolved where O(gpu_facts) is true.
  returned: always
  type: dict
  sample: {toolkit: 1.17.9, driver_flavor: open}
resume:
  description: What O(state_file) holds (the versions a node had before a change that did not finish); empty when unset or absent.
  returned: always
  type: dict
  sample: {}
recorded:
  description: The branch and flavour the nvidia_driver role recorded (O(driver_plan_file)); empty where there is no record.
  returned: always
  type: dict
  sample: {branch: "550", flavor: open}
gpu:
  description: What M(dlinfra.gpu_cluster.nvidia_gpu_facts) returned.
  returned: when O(gpu_facts) is true
  type: dict
not_installed:
  description: The components of O(target) the node does not have, which the plan leaves out.
  returned: always
  type: list
  elements: str
  sample: [nccl]
plan:
  description: The plan, with keys V(change) (components, in order), V(drain), V(reboot), V(reload) and V(reasons).
  returned: always
  type: dict
  sample: {change: [toolkit], drain: true, reboot: false, reload: false, reasons: ["toolkit 1.17.8 -> 1.17.9"]}
"""

import glob
import json
import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import kernel_module_flavor
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.rolling_change import plan_for


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _package_version(module, name):
    if not name:
        return None
    if shutil.which("dpkg-query"):
        rc, out, dummy = module.run_command(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Version}", name])
        fields = out.split()
        # Status-Abbrev: the wanted state then the current one ("ii", "hi" when held); the package is there when "i".
        return fields[1] if rc == 0 and len(fields) == 2 and fields[0][1:2] == "i" else None
    rc, out, dummy = module.run_command(["rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}", name])
    return out.strip() if rc == 0 else None


def _snap_channel(module, name):
    """The channel `snap list NAME` shows in its Tracking column; None when the snap or snap is missing."""
    if not shutil.which("snap"):
        return None
    rc, out, dummy = module.run_command(["snap", "list", name])
    lines = out.splitlines()
    if rc != 0 or len(lines) < 2:
        return None
    header = lines[0].split()
    row = lines[1].split()
    return row[header.index("Tracking")] if "Tracking" in header and len(row) > header.index("Tracking") else None


def _version_key(text):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _newest_kernel(boot_dir):
    kernels = [os.path.basename(path)[len("vmlinuz-"):] for path in glob.glob(os.path.join(boot_dir, "vmlinuz-*"))]
    return max(kernels, key=_version_key) if kernels else None


def _module_holders(sysfs_root, gpu_processes):
    """Users of the nvidia module other than the modules stacked on it and the GPU processes (nvidia-persistenced)."""
    refcnt = _read(os.path.join(sysfs_root, "module", "nvidia", "refcnt"))
    if refcnt is None or not refcnt.isdigit():
        return 0
    stacked = len(os.listdir(os.path.join(sysfs_root, "module", "nvidia", "holders"))) \
        if os.path.isdir(os.path.join(sysfs_root, "module", "nvidia", "holders")) else 0
    return max(0, int(refcnt) - stacked - gpu_processes)


def _read_json(path):
    """The JSON object in ``path``; {} where it is missing or is not one."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _recorded(path):
    """The branch and flavour the nvidia_driver role recorded ({} where none)."""
    record = _read_json(path)
    flavor = record.get("flavor")
    return {key: value for key, value in (("branch", str(record.get("branch") or "")),
                                          ("flavor", flavor if flavor in ("open", "proprietary") else "")) if value}


def gather(module):
    params = module.params
    packages = params["packages"] or {}
    reboot_file = params["reboot_required_file"]
    reboot_required = False
    if os.path.exists(reboot_file):
        reboot_required = (_read(reboot_file + ".pkgs") or "").replace("\n", ", ") or True
    installed = {key: _package_version(module, packages.get(key)) for key in ("driver", "fabric_manager", "toolkit", "nccl")}
    loaded_flavor = kernel_module_flavor(_read(os.path.join(params["procfs_root"], "driver", "nvidia", "version")) or "")
    installed.update({
        "driver_flavor": _recorded(params["driver_plan_file"]).get("flavor") or loaded_flavor,
        "driver_flavor_loaded": loaded_flavor,
        "microk8s": _snap_channel(module, "microk8s") if (params["target"] or {}).get("microk8s") else None,
        "driver_loaded": _read(os.path.join(params["sysfs_root"], "module", "nvidia", "version")),
        "kernel_running": os.uname().release,
        "kernel_newest": _newest_kernel(params["boot_dir"]),
        "reboot_required": reboot_required,
        "gpu_processes": params["gpu_processes"],
        "module_holders": _module_holders(params["sysfs_root"], params["gpu_processes"]),
    })
    return installed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            target=dict(type="dict", required=True),
            packages=dict(type="dict", default={"driver": "nvidia-smi", "fabric_manager": "", "toolkit": "nvidia-container-toolkit",
                                                "nccl": "libnccl2"}),
            gpu_processes=dict(type="int", default=0),
            sysfs_root=dict(type="path", default="/sys"),
            procfs_root=dict(type="path", default="/proc"),
            driver_plan_file=dict(type="path", required=True),
            boot_dir=dict(type="path", default="/boot"),
            reboot_required_file=dict(type="path", default="/run/reboot-required"),
            state_file=dict(type="path"),
            gpu_facts=dict(type="bool", default=False),  # the action plugin's: it reads the GPUs, then calls this
        ),
        supports_check_mode=True,
    )
    target = {key: str(value) for key, value in (module.params["target"] or {}).items() if value not in (None, "")}
    unknown = sorted(set(target) - {"driver", "driver_flavor", "toolkit", "nccl", "microk8s"})
    if unknown:
        module.fail_json(msg="target: unknown component(s) %s; use driver, driver_flavor, toolkit, nccl, microk8s" % ", ".join(unknown))
    if target.get("driver_flavor", "open") not in ("open", "proprietary"):
        module.fail_json(msg="target: driver_flavor is %r; use open or proprietary" % target["driver_flavor"])
    installed = gather(module)
    plan, absent = plan_for(installed, target)
    state_file = module.params["state_file"]
    module.exit_json(changed=False, installed=installed, plan=plan, not_installed=absent, target=target,
                     recorded=_recorded(module.params["driver_plan_file"]),
                     resume=_read_json(state_file) if state_file else {})


if __name__ == "__main__":
    main()
