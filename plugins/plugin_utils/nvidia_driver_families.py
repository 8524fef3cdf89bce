# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Debian's driver families: one node keeps one. Pure Python.

Debian's archive carries the release's own driver (source package nvidia-graphics-drivers) and older branches as the
nvidia-tesla-BRANCH families (source nvidia-graphics-drivers-tesla-BRANCH). The families install side by side: each
has its alternative package (``nvidia-alternative``, ``nvidia-tesla-470-alternative``), through which
update-alternatives points ``libcuda.so.1``, ``libnvidia-ml.so.1`` and the module's configuration at one family, and
while the old family's stays, its higher priority keeps those links on the old family's files. So a node moving to
another family removes every installed package of the others, in the transaction that installs the new family (apt
removes no held package on its own, and the role holds the old family's).
"""

import re

# The source packages of Debian's driver families.
_DRIVER_SOURCE = re.compile(r"^nvidia-graphics-drivers(-tesla-[0-9]+)?$")


def other_family_packages(lines, own_source):
    """The installed packages of Debian's driver families other than the one built from ``own_source``.

    lines: dpkg-query's ``${Package} ${db:Status-Abbrev} ${source:Package}`` for every package (only known to dpkg,
    or removed with their configuration left: not installed)."""
    found = set()
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[1][1:2] == "i" and _DRIVER_SOURCE.match(fields[-1]) and fields[-1] != own_source:
            found.add(fields[0].split(":")[0])
    return sorted(found)


def swap_problem(host, source_lines, own_source):
    """'' where every package a family switch would remove comes from one of Debian's driver families, else a message
    naming the others and the fix.

    source_lines: dpkg-query's ``${Package} ${source:Package}`` for the packages ``apt-get --simulate`` would remove
    (its ``Remv NAME [VERSION]`` lines); own_source: the source package of the family the node moves to."""
    others = sorted({fields[0].split(":")[0] for fields in map(str.split, source_lines)
                     if fields and not (len(fields) >= 2 and _DRIVER_SOURCE.match(fields[1]))})
    if not others:
        return ""
    return ("%s: moving the NVIDIA driver to %s would also remove %s, which %s not part of a driver family but "
            "depend%s on the one installed; remove %s first, or keep the node on the installed family's branch with "
            "nvidia_driver_branch"
            % (host, own_source, ", ".join(others), "is" if len(others) == 1 else "are", "s" if len(others) == 1 else "",
               "it" if len(others) == 1 else "them"))
