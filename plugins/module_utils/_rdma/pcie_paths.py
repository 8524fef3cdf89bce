# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The PCIe path between two devices, from where sysfs places them, in the terms of `nvidia-smi topo -m`.

sysfs names every PCI function by the chain it hangs from: /sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/
0000:17:01.0/0000:19:00.0 is the function 19:00.0 below the host bridge (root complex) pci0000:15, its root port
15:01.0 and a PCIe switch (upstream port 16:00.0, downstream port 17:01.0). Comparing two such chains gives the
relation nvidia-smi prints and NVML's topology levels mean:

- PIX: at most one PCIe switch (or bridge) between them;
- PXB: several switches or bridges, without going through the host bridge;
- PHB: through the host bridge they share (the CPU's root complex);
- NODE: through different host bridges of one NUMA node;
- SYS: across NUMA nodes, over the link between the sockets.

NCCL_NET_GDR_LEVEL takes the same names for the furthest relation at which NCCL still uses GPUDirect RDMA.
"""

import os
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.sysfs_files import read_int

RELATIONS = ("PIX", "PXB", "PHB", "NODE", "SYS")

_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")
# 00000000:07:00.0 (nvidia-smi), 0000:07:00.0 (sysfs, lspci -D) or 07:00.0 (lspci): domain optional.
_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def normalize_bus_id(text):
    """A PCI bus id as sysfs writes it ('00000000:07:00.0' -> '0000:07:00.0'); ValueError for anything else."""
    match = _BUS_ID.match(str(text).strip())
    if not match:
        raise ValueError("%r is not a PCI bus id (DOMAIN:BUS:DEVICE.FUNCTION, for example 0000:07:00.0)" % (text,))
    domain, bus, device, function = match.groups()
    return "%04x:%s:%s.%s" % (int(domain or "0", 16), bus.lower(), device.lower(), function)


def numa_node(device_dir):
    """The device's NUMA node; None where the kernel does not know it (it writes -1)."""
    node = read_int(os.path.join(device_dir, "numa_node"))
    return None if node is None or node < 0 else node


def locate(device_dir, sysfs_root):
    """Where a PCI function sits: {address, host_bridge, bridges, numa_node}, bridges the PCI functions between the
    host bridge and it (root port first). None when device_dir is not a PCI function under a host bridge (a virtual
    device, or a link that does not resolve)."""
    real = os.path.realpath(device_dir)
    parts = os.path.relpath(real, os.path.realpath(sysfs_root)).split(os.sep)
    host = next((index for index, part in enumerate(parts) if _HOST_BRIDGE.match(part)), None)
    if host is None or not _PCI_ADDRESS.match(parts[-1]):
        return None
    below = parts[host + 1:]
    if not all(_PCI_ADDRESS.match(part) for part in below):
        return None
    return {"address": below[-1], "host_bridge": parts[host], "bridges": below[:-1], "numa_node": numa_node(real)}


def classify(first, second):
    """The relation (RELATIONS) between two located devices (see locate)."""
    if first["host_bridge"] != second["host_bridge"]:
        # A node the kernel does not know (a single-socket host often says -1 everywhere) counts as the same node.
        return "NODE" if first["numa_node"] == second["numa_node"] else "SYS"
    shared = 0
    for mine, theirs in zip(first["bridges"], second["bridges"]):
        if mine != theirs:
            break
        shared += 1
    if shared == 0:
        return "PHB"
    # Below the last shared bridge (a switch's upstream port, or a root port), one more bridge on each side at most is
    # still the one switch: its downstream ports.
    if len(first["bridges"]) - shared <= 1 and len(second["bridges"]) - shared <= 1:
        return "PIX"
    return "PXB"


def pci_device_dir(sysfs_root, address):
    return os.path.join(sysfs_root, "bus", "pci", "devices", address)


def gpu_hca_paths(sysfs_root, hcas, gpu_addresses):
    """One entry per (HCA, GPU) pair: {hca, hca_pci_address, gpu_pci_address, relation}. An HCA without a PCI address
    (a software device) or a GPU sysfs does not place gets relation None."""
    gpus = [(address, locate(pci_device_dir(sysfs_root, address), sysfs_root)) for address in gpu_addresses]
    paths = []
    for hca in hcas:
        placed = locate(pci_device_dir(sysfs_root, hca["pci_address"]), sysfs_root) if hca["pci_address"] else None
        for address, gpu in gpus:
            paths.append({"hca": hca["name"], "hca_pci_address": hca["pci_address"], "gpu_pci_address": address,
                          "relation": classify(placed, gpu) if placed and gpu else None})
    return paths
