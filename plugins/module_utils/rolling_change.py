# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a version change does to a running GPU node: whether it must be drained, and whether its kernel module can be
reloaded or the node must reboot (issue 18, day-2 changes).

``decide(installed, target)`` compares what a node has with what the inventory pins and returns the plan for that node.
It is pure (no I/O), so every combination is unit-tested; the upgrade playbook gathers ``installed`` from the node
(package versions, the loaded module's version from /sys/module/nvidia/version, the running and newest installed
kernels, GPU processes from nvidia_gpu_facts) and carries the plan out.

Components: ``driver`` (the NVIDIA driver package, its kernel module built by DKMS; the fabric manager, where used,
always moves with it), ``toolkit`` (nvidia-container-toolkit: the container runtime restarts), ``nccl`` (the library:
ranks of one job must not mix versions, so the node leaves the scheduler while it changes), ``microk8s`` (the snap
channel: kubelet and containerd restart) and ``kernel`` (a newer kernel is installed than the one running). The driver's
kernel module flavour (``driver_flavor``: open or proprietary) is part of the driver: a new flavour swaps its kernel
packages and the loaded module, as a new version does.
"""

import re

COMPONENTS = ("driver", "toolkit", "nccl", "microk8s")


def matches_pin(version, pin):
    """Whether an installed package version satisfies a pin as the roles read pins: the pin itself, or a longer
    version that starts with it at a boundary ('1.17.8' pins '1.17.8-1', '550' pins '550.163.01-1'; '1.17.8' does not
    pin '1.17.80'); an epoch ('5:') on either side is ignored."""
    if not version or not pin:
        return False
    version, pin = (re.sub(r"^[0-9]+:", "", str(v)) for v in (version, pin))
    return version == pin or (version.startswith(pin) and version[len(pin)] in "-.~+:")


def as_pinned(installed, target):
    """``installed`` with each component that satisfies its pin written as the pin, so that decide() compares like
    with like (the package '1.17.8-1' against the pin '1.17.8'); the loaded driver module follows the driver."""
    result = dict(installed)
    for component in COMPONENTS:
        if target.get(component) and matches_pin(installed.get(component), target[component]):
            result[component] = target[component]
    driver = installed.get("driver")
    for key in ("driver_loaded", "fabric_manager"):  # the module '550.163.01' and the package '550.163.01-1' agree
        value = installed.get(key)
        if value and driver and (value == driver or matches_pin(driver, value)):
            result[key] = result["driver"]
    return result


def _differs(installed, target, key):
    wanted = target.get(key)
    return bool(wanted) and installed.get(key) != wanted


def decide(installed, target):
    """The plan for one node: a dict with

    - ``change``: the components to change, in the order to change them (``fabric_manager`` right after ``driver``);
    - ``drain``: whether the node must be cordoned and drained first (any change, or a pending reboot or reload);
    - ``reboot``: whether it must reboot to finish (a new kernel, or a driver module that cannot be reloaded);
    - ``reload``: whether unloading and loading the NVIDIA modules finishes the driver change instead of a reboot;
    - ``reasons``: one sentence per decision, for the run's summary.

    Call it again after the drain: ``gpu_processes`` then tells whether the module can be reloaded.

    ``installed``: driver, driver_loaded (the running module's version; None when none is loaded), fabric_manager
    (None when not installed), toolkit, nccl, microk8s (channel), kernel_running, kernel_newest, gpu_processes (count),
    module_holders (count of users of the nvidia modules other than GPU processes, e.g. nvidia-persistenced),
    reboot_required (what the packages that ask for a reboot wrote to /run/reboot-required.pkgs, or a true value; a
    kernel or library update on Debian and Ubuntu: a reboot, as for a newer kernel).
    driver_flavor (the kernel module flavour the driver packages carry: open or proprietary; None when unknown),
    driver_flavor_loaded (the running module's flavour; None when none is loaded).
    ``target``: driver, driver_flavor, toolkit, nccl, microk8s (a falsy value: not pinned, never changed).
    """
    change, reasons = [], []
    for component in COMPONENTS:
        if _differs(installed, target, component):
            change.append(component)
            reasons.append("%s %s -> %s" % (component, installed.get(component) or "absent", target[component]))
            if component == "driver" and installed.get("fabric_manager") is not None:
                change.append("fabric_manager")
                reasons.append("fabric_manager moves with the driver to %s" % target["driver"])
    flavor, wanted_flavor = installed.get("driver_flavor"), target.get("driver_flavor")
    new_flavor = bool(wanted_flavor) and bool(flavor) and flavor != wanted_flavor
    if new_flavor:
        if "driver" not in change:
            change.insert(0, "driver")
        reasons.append("driver kernel modules %s -> %s" % (flavor, wanted_flavor))
    if "driver" not in change and installed.get("fabric_manager") not in (None, installed.get("driver")):
        change.append("fabric_manager")
        reasons.append("fabric_manager %s does not match the driver %s" % (installed["fabric_manager"], installed.get("driver")))

    driver_after = target.get("driver") or installed.get("driver")
    loaded = installed.get("driver_loaded")
    module_stale = loaded is not None and loaded != driver_after
    if module_stale:
        reasons.append("the loaded driver module is %s, the package %s" % (loaded, driver_after))
    flavor_after = wanted_flavor or flavor
    loaded_flavor = installed.get("driver_flavor_loaded")
    if loaded is not None and not module_stale and (new_flavor or (loaded_flavor and flavor_after and loaded_flavor != flavor_after)):
        module_stale = True
        reasons.append("the loaded driver module is the %s one, the packages the %s one" % (loaded_flavor or flavor, flavor_after))
    new_kernel = bool(installed.get("kernel_newest")) and installed.get("kernel_newest") != installed.get("kernel_running")
    if new_kernel:
        reasons.append("kernel %s is installed, %s is running" % (installed["kernel_newest"], installed.get("kernel_running")))
    if installed.get("reboot_required"):
        new_kernel = True
        reasons.append("the system asks for a reboot (/run/reboot-required: %s)" % installed["reboot_required"])

    reload = reboot = False
    if new_kernel:
        reboot = True
    elif module_stale:
        if installed.get("gpu_processes") or installed.get("module_holders"):
            reboot = True
            reasons.append("the driver module is in use, so it cannot be reloaded: reboot")
        else:
            reload = True
            reasons.append("nothing holds the GPUs: reload the driver modules instead of rebooting")
    return {"change": change, "drain": bool(change) or reboot or reload, "reboot": reboot, "reload": reload, "reasons": reasons}


def plan_for(installed, target):
    """(plan, not_installed): decide() for what a node has and the pins ``target`` (falsy values: not pinned). A
    component the node does not have is left out of the plan and named in not_installed: installing it is site.yml's
    work (day 1), not a change of version."""
    target = {key: str(value) for key, value in (target or {}).items() if value not in (None, "")}
    absent = sorted(key for key in target if installed.get(key) is None and key != "driver_flavor")
    target = {key: value for key, value in target.items() if key not in absent}
    return decide(as_pinned(installed, target), target), absent
