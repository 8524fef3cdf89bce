# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which of the versions a package source offers the nvidia_driver role installs.

apt (``apt-cache madison``) lists the newest first, so the first that fits wins: the exact ``nvidia_driver_version``,
else the first of its Debian revisions (``VERSION-...``). dnf (``repoquery``) lists in no useful order, so the newest
that fits wins, sorted as community.general's version_sort sorts (loose versions): ``VERSION`` or ``VERSION-...``.
Without ``nvidia_driver_version``, the branch's versions fit (``BRANCH.``).
"""

import re

from ansible.module_utils.compat.version import LooseVersion

MANAGERS = ("apt", "dnf")


def package_version(available, version, branch, manager):
    """The version to install out of ``available`` (the source's, as listed), '' where none fits.

    version: nvidia_driver_version ('' for any of the branch). branch: the branch planned for the node.
    manager: 'apt' or 'dnf'.
    """
    if manager not in MANAGERS:
        raise ValueError("manager is %r; known: %s" % (manager, ", ".join(MANAGERS)))
    if version:
        escaped = re.escape(str(version))
        if manager == "apt":
            fits = [item for item in available if item == version]
            fits += [item for item in available if re.match(escaped + "-", item)]
        else:
            fits = [item for item in available if re.match(escaped + "($|-)", item)]
    else:
        fits = [item for item in available if re.match(re.escape(str(branch)) + r"\.", item)]
    if manager == "dnf":
        fits = sorted(fits, key=LooseVersion)[-1:]
    return fits[0] if fits else ""
