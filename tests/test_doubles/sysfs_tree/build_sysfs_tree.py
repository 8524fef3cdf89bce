# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST DOUBLE: builds a stand-in sysfs/procfs tree from listings, for code that reads /sys and /proc on hosts this
project has none of (HCAs, PCIe switches, two sockets).

    build_sysfs_tree.py DEST LISTING [LISTING ...]

A listing holds one entry a line, paths relative to DEST (so 'sys/...' and 'proc/...'); later listings and lines
overwrite earlier ones, so a small listing can change one attribute of a larger one:

    PATH = VALUE                              a file holding VALUE and a newline
    PATH -> TARGET                            a symbolic link (TARGET relative to the link, as sysfs's are)
    PATH/                                     an empty directory (a loaded module: sys/module/nvidia_peermem/)
    pci DEVPATH VENDOR DEVICE CLASS NUMA      a PCI function at sys/devices/DEVPATH with those attribute files
                                              (numa_node = NUMA) and its sys/bus/pci/devices/<address> link
    # a comment, and blank lines
"""

import os
import sys


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.islink(path):
        os.unlink(path)
    with open(path, "w") as handle:
        handle.write(text)


def _link(path, target):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)


def _pci(root, devpath, vendor, device, pci_class, numa):
    device_dir = os.path.join(root, "sys", "devices", devpath)
    for name, value in (("vendor", vendor), ("device", device), ("class", pci_class), ("numa_node", numa)):
        _write(os.path.join(device_dir, name), value + "\n")
    address = os.path.basename(devpath)
    _link(os.path.join(root, "sys", "bus", "pci", "devices", address), os.path.join("..", "..", "..", "devices", devpath))


def build(root, listings):
    """Lay the listings (paths of listing files) out under root, in order."""
    for listing in listings:
        with open(listing) as handle:
            for number, raw in enumerate(handle, 1):
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith("pci "):
                    fields = line.split()
                    if len(fields) != 6:
                        raise ValueError("%s:%d: pci DEVPATH VENDOR DEVICE CLASS NUMA, not %r" % (listing, number, line))
                    _pci(root, *fields[1:])
                elif " -> " in line:
                    path, target = line.split(" -> ", 1)
                    _link(os.path.join(root, path.strip()), target.strip())
                elif " = " in line:
                    path, value = line.split(" = ", 1)
                    _write(os.path.join(root, path.strip()), value + "\n")
                elif line.endswith("/"):
                    os.makedirs(os.path.join(root, line), exist_ok=True)
                else:
                    raise ValueError("%s:%d: not an entry of a listing: %r" % (listing, number, line))
    return root


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    build(sys.argv[1], sys.argv[2:])
