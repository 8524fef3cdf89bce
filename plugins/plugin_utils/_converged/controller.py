# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's half of a converged_state record: files a role writes on the controller (MicroK8s' kubeconfig),
read where the action plugin runs and handed to the module as observed items, so a deleted or edited one makes the
role run in full like a drift on the node."""

import hashlib
import os
import stat


def controller_path_state(path):
    """'file MODE SHA256', 'dir MODE', 'other' or 'absent' for a path on the controller."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as error:
        return "unreadable: %s" % error
    mode = "%o" % stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        return "dir %s" % mode
    if not stat.S_ISREG(info.st_mode):
        return "other %s" % mode
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as error:
        return "unreadable: %s" % error
    return "file %s %s" % (mode, digest.hexdigest())


def controller_path_items(paths):
    """{'controller path PATH': state} for each path (~ expanded), as converged_state's observed items."""
    return {"controller path " + path: controller_path_state(os.path.expanduser(path)) for path in paths}
