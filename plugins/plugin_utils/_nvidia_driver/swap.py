# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node keeps one NVIDIA driver: one kernel module flavour, one branch and, on Debian, one driver family. Pure Python.

A node moving to another driver swaps the old one's packages out in the transaction that installs the new one, so that
it never has both kernel modules, nor neither:
- the other flavour's kernel packages (Debian's two DKMS packages do not conflict; Ubuntu's precompiled modules and DKMS
  neither);
- the driver packages an earlier run held that this driver does not hold: another flavour's or branch's meta packages on
  Ubuntu (apt removes no held package on its own, so each is named);
- on Debian's archive, every installed package of the other driver families. The release's own driver (source package
  nvidia-graphics-drivers) and the nvidia-tesla-BRANCH families (nvidia-graphics-drivers-tesla-BRANCH) install side
  by side, and while an old family's alternative package stays, its higher priority keeps ``libcuda.so.1``,
  ``libnvidia-ml.so.1`` and the module's configuration on the old family's files.

Before that transaction, apt simulates it: where it would also remove a package that is not a driver's (``libnccl2``
on ``libcuda1``, say), the role stops and names it.
"""

import re

# The source packages of the drivers in Debian's archive (the release's own, nvidia-tesla-BRANCH) and Ubuntu's
# (one per branch, -server for the data-centre branches).
_DRIVER_SOURCE = re.compile(r"^nvidia-graphics-drivers(-tesla-[0-9]+|-[0-9]+(-server)?)?$")
_DEBIAN_FAMILY_SOURCE = re.compile(r"^nvidia-graphics-drivers(-tesla-[0-9]+)?$")
# Ubuntu's precompiled modules, their objects and signatures (built from the kernel's sources, not the driver's).
_PRECOMPILED = re.compile(r"^linux-(modules|objects|signatures)-nvidia-")


def _installed(lines):
    """(name, held, source) of each installed package in dpkg-query's ``${Package} ${db:Status-Abbrev}
    ${source:Package}`` lines (packages only known to dpkg, or removed with their configuration left, are not)."""
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[1][1:2] == "i":
            yield fields[0].split(":")[0], fields[1][:1] == "h", fields[-1]


def _flat(items):
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from _flat(item)
        else:
            yield item


def other_kernel_packages(kernel, flavor, precompiled, precompiled_remove):
    """The kernel packages a node moving to this flavour, or between DKMS and precompiled modules, swaps out.

    kernel: the package set's kernel packages by flavour. flavor: the flavour the node gets. precompiled: whether
    Ubuntu's precompiled modules replace DKMS (then every flavour's DKMS package goes). precompiled_remove: the
    precompiled modules of another flavour or branch (all of them where DKMS builds the modules), from
    nvidia_driver_ubuntu_modules. Each package once, in the set's order, then precompiled_remove as given.
    """
    own = [] if precompiled else list(_flat(kernel[flavor]))
    skipped = "" if precompiled else flavor
    others = [name for key, names in kernel.items() if key != skipped for name in _flat(names) if name not in own]
    return list(dict.fromkeys(others)) + list(precompiled_remove)


def swap_out(lines, own_packages, other_kernel_packages, own_family_source=""):
    """The installed packages a node moving to this driver removes, sorted.

    lines: dpkg-query's ``${Package} ${db:Status-Abbrev} ${source:Package}`` for every package; own_packages: the
    packages this driver installs and holds; other_kernel_packages: the other flavours' kernel packages;
    own_family_source: on Debian's archive, the source package of this driver's family, else ''."""
    own, other_kernel = set(own_packages), set(other_kernel_packages)
    found = set()
    for name, held, source in _installed(lines):
        if name in own:
            continue
        if (name in other_kernel or (held and _DRIVER_SOURCE.match(source))
                or (own_family_source and _DEBIAN_FAMILY_SOURCE.match(source) and source != own_family_source)):
            found.add(name)
    return sorted(found)


def swap_problem(host, source_lines, swapped_out, driver):
    """'' where every package the swap would remove is one it names or a driver's, else a message naming the others
    and the fix.

    source_lines: dpkg-query's ``${Package} ${source:Package}`` for the packages ``apt-get --simulate`` would remove
    (its ``Remv NAME [VERSION]`` lines); swapped_out: the packages the swap names; driver: the driver the node moves
    to, in words."""
    named = set(swapped_out)
    others = sorted({fields[0].split(":")[0] for fields in map(str.split, source_lines)
                     if fields and fields[0].split(":")[0] not in named and not _PRECOMPILED.match(fields[0])
                     and not (len(fields) >= 2 and _DRIVER_SOURCE.match(fields[1]))})
    if not others:
        return ""
    return ("%s: moving the NVIDIA driver to %s would also remove %s, which %s not part of a driver but depend%s on the "
            "one installed; remove %s first, or keep the node on its installed driver with nvidia_driver_branch and "
            "nvidia_driver_flavor"
            % (host, driver, ", ".join(others), "is" if len(others) == 1 else "are", "s" if len(others) == 1 else "",
               "it" if len(others) == 1 else "them"))
