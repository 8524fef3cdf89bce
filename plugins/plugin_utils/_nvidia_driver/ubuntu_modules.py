# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Canonical's precompiled NVIDIA kernel modules on Ubuntu: which of them follow a node's kernel. Pure Python.

Ubuntu's archive carries the -server driver's modules built for each of Canonical's kernels (source
linux-restricted-modules), so a node needs neither a compiler nor headers:

- ``linux-modules-nvidia-FLAVOUR-KERNEL``: the modules for one kernel release (``KERNEL`` as ``uname -r`` prints it,
  ``6.8.0-31-generic``);
- ``linux-modules-nvidia-FLAVOUR-META``: a meta package that follows the kernel meta package ``linux-image-META``
  (``generic``, ``generic-hwe-24.04``, ``aws``, ``azure``, ``gcp``, ``lowlatency``...) from kernel to kernel.

``FLAVOUR`` is the driver's: ``580-server`` or ``580-server-open``. ubuntu-drivers installs the meta package of the kernel
meta package that the kernel belongs to, where the archive has one, and the DKMS package otherwise; the role does the
same for the running kernel, adding that kernel's own package so that the module loads before any reboot.
"""

import re

PREFIX = "linux-modules-nvidia-"
# A kernel release: 6.8.0-31-generic is version 6.8.0, ABI 31, kernel flavour generic.
_RELEASE = re.compile(r"^(?P<abi>[0-9]+\.[0-9]+\.[0-9]+-[0-9]+)-(?P<flavour>[a-z][a-z0-9.+-]*)$")
_IMAGE = "linux-image-"
_UNSIGNED = "linux-image-unsigned-"


def installed_packages(lines):
    """{package: [the names it depends on]} of the installed packages in ``lines``, dpkg-query's
    ``${Package};${db:Status-Abbrev};${Depends}`` (alternatives, versions and architectures dropped)."""
    installed = {}
    for line in lines:
        fields = line.split(";")
        if len(fields) < 2 or fields[1][1:2] != "i":
            continue
        depends = fields[2] if len(fields) > 2 else ""
        names = [re.split(r"[\s(:]", alternative.strip(), maxsplit=1)[0]
                 for alternative in re.split(r"[,|]", depends) if alternative.strip()]
        installed[fields[0].strip()] = names
    return installed


def _kernel_meta_packages(installed):
    """{META: the kernel images linux-image-META depends on} for the installed kernel meta packages."""
    metas = {}
    for package, depends in installed.items():
        if not package.startswith(_IMAGE) or package.startswith(_UNSIGNED):
            continue
        meta = package[len(_IMAGE):]
        if meta[:1].isalpha() and not re.search(r"[0-9]+\.[0-9]+\.[0-9]+-[0-9]+", meta):
            metas[meta] = [name for name in depends if name.startswith(_IMAGE)]
    return metas


def _release_of(image):
    """The kernel release of image package ``image`` (signed or unsigned), '' where it names none."""
    release = image[len(_UNSIGNED):] if image.startswith(_UNSIGNED) else image[len(_IMAGE):]
    return release if _RELEASE.match(release) else ""


def _following(metas, kernel):
    """The kernel meta packages that follow running ``kernel``: those that depend on its image, else those of its
    kernel flavour whose kernel has moved on (a newer kernel installed, the reboot still to come)."""
    exact = sorted(meta for meta, images in metas.items() if kernel in [_release_of(image) for image in images])
    if exact:
        return exact
    running = _RELEASE.match(kernel or "")
    if not running:
        return []
    return sorted(meta for meta, images in metas.items()
                  if any(_RELEASE.match(release).group("flavour") == running.group("flavour")
                         for release in map(_release_of, images) if release))


def _module_flavour_of(package):
    """The driver flavour of installed modules package ``package``: '580-server', '580-server-open', '580-open'..."""
    match = re.match(r"^%s(?P<flavour>[0-9]+(?:-server)?(?:-open)?)-" % re.escape(PREFIX), package)
    return match.group("flavour") if match else ""


def precompiled_modules(installed_lines, available, kernel, module_flavour, pinned_version=""):
    """What the node's kernel side is: Canonical's precompiled modules, or DKMS.

    installed_lines: dpkg-query's ``${Package};${db:Status-Abbrev};${Depends}`` lines for ``linux-image-*`` and
    ``linux-modules-nvidia-*``; available: the package names apt has (``apt-cache pkgnames linux-modules-nvidia-``);
    kernel: the running kernel's release (``uname -r``); module_flavour: the driver's, ``580-server`` or
    ``580-server-open``; pinned_version: ``nvidia_driver_version`` where it pins an exact driver version, else ''.
    Canonical builds each kernel's modules from the branch's current driver in the archive, not from older versions,
    so an exact pin gets DKMS, which builds the pinned version.

    Returns packages (the modules packages to install, empty for DKMS: the meta packages of the kernel meta packages
    that follow the running kernel, where the archive has them, then the running kernel's own where it has that),
    hold (of those, the running kernel's own: the meta packages must move with the kernel), kernel_metas (those kernel
    meta packages), remove (installed modules packages of another driver flavour or branch, all of them for DKMS) and
    reason (a sentence that says which and why).
    """
    installed = installed_packages(installed_lines)
    available = set(available or [])
    metas = _kernel_meta_packages(installed)
    following = _following(metas, kernel)
    chosen = [meta for meta in following if PREFIX + module_flavour + "-" + meta in available]
    own = PREFIX + module_flavour + "-" + kernel
    installed_modules = sorted(package for package in installed if package.startswith(PREFIX))

    if pinned_version:
        chosen = []
    if not chosen:
        if pinned_version:
            why = ("nvidia_driver_version pins %s, and Canonical builds its precompiled modules from the branch's "
                   "current driver only (pin nvidia_driver_branch alone to use them)" % pinned_version)
        elif not metas:
            why = "no kernel meta package (linux-image-generic, -aws, ...) is installed"
        elif not following:
            why = "no installed kernel meta package (%s) follows the running kernel %s" % (
                ", ".join(_IMAGE + meta for meta in sorted(metas)), kernel)
        else:
            why = "Ubuntu's sources have no %s for %s" % (
                " or ".join(PREFIX + module_flavour + "-" + meta for meta in following),
                ", ".join(_IMAGE + meta for meta in following))
        return {"packages": [], "hold": [], "kernel_metas": [], "remove": installed_modules,
                "reason": "DKMS builds the modules: %s" % why}

    packages = [PREFIX + module_flavour + "-" + meta for meta in chosen]
    hold = [own] if own in available else []
    reason = "Canonical's precompiled modules, following %s" % ", ".join(_IMAGE + meta for meta in chosen)
    if not hold:
        reason += ("; the sources have none for the running kernel %s, so the driver loads after a reboot into the "
                   "kernel %s follows" % (kernel, "they" if len(chosen) > 1 else "it"))
    return {"packages": packages + hold, "hold": hold, "kernel_metas": chosen, "reason": reason,
            "remove": [package for package in installed_modules if _module_flavour_of(package) != module_flavour]}
