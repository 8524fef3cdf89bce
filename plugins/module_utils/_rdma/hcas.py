# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RDMA devices (HCAs) in <sysfs>/class/infiniband and their ports, as the kernel's
Documentation/ABI/stable/sysfs-class-infiniband describes the files.

Value formats the kernel writes: state '4: ACTIVE' (DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER), phys_state '5: LinkUp'
(Sleep, Polling, Disabled, PortConfigurationTraining, LinkUp, LinkErrorRecovery, Phy Test), link_layer 'InfiniBand' or
'Ethernet', rate '400 Gb/sec (4X NDR)' (or '2.5 Gb/sec (1X SDR)'), lid '0x1a', a GID as eight groups of four hex digits,
gid_attrs/types/N 'IB/RoCE v1' or 'RoCE v2', gid_attrs/ndevs/N a network interface name, counters decimal.
"""

import os
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.pcie_paths import numa_node
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.sysfs_files import (
    entries,
    numbered_entries,
    read_int,
    read_text,
)

ERROR_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "link_error_recovery", "port_xmit_discards")
UNUSED_GID = "0000:0000:0000:0000:0000:0000:0000:0000"

_CODED = re.compile(r"^(\d+)\s*:\s*(.*)$")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*Gb/sec\b")
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def state_name(text):
    """'4: ACTIVE' -> 'ACTIVE', '5: LinkUp' -> 'LinkUp'; text without a code as it is; None stays None."""
    if text is None:
        return None
    match = _CODED.match(text)
    return match.group(2).strip() if match else text


def rate_gbps(text):
    """'400 Gb/sec (4X NDR)' -> 400, '2.5 Gb/sec (1X SDR)' -> 2.5; None when the text is not a rate."""
    match = _RATE.match(text or "")
    if not match:
        return None
    value = float(match.group(1))
    return int(value) if value.is_integer() else value


def read_gids(port_dir):
    """The port's GID table without its unused (all-zero) entries: [{index, gid, type, ndev}] by index."""
    gids = []
    for index in numbered_entries(os.path.join(port_dir, "gids")):
        gid = read_text(os.path.join(port_dir, "gids", str(index)))
        if gid is None or gid == UNUSED_GID:
            continue
        gids.append({"index": index, "gid": gid,
                     "type": read_text(os.path.join(port_dir, "gid_attrs", "types", str(index))),
                     "ndev": read_text(os.path.join(port_dir, "gid_attrs", "ndevs", str(index)))})
    return gids


def read_port(port_dir, number):
    """One port: its states, link layer, rate, LID (InfiniBand), GIDs (Ethernet, that is RoCE) and error counters."""
    link_layer = read_text(os.path.join(port_dir, "link_layer"))
    rate_text = read_text(os.path.join(port_dir, "rate"))
    counters = {}
    for name in ERROR_COUNTERS:
        value = read_int(os.path.join(port_dir, "counters", name))
        if value is not None:
            counters[name] = value
    return {
        "port": number,
        "state": state_name(read_text(os.path.join(port_dir, "state"))),
        "phys_state": state_name(read_text(os.path.join(port_dir, "phys_state"))),
        "link_layer": link_layer,
        "rate_gbps": rate_gbps(rate_text),
        "rate": rate_text,
        # A RoCE port has no LID (the file reads 0x0); an InfiniBand port's is assigned by the subnet manager.
        "lid": read_int(os.path.join(port_dir, "lid"), 16) if link_layer == "InfiniBand" else None,
        "gids": read_gids(port_dir) if link_layer == "Ethernet" else [],
        "error_counters": counters,
    }


def pci_address(device_link):
    """The PCI address the HCA's `device` link points at; None for a device that is not a PCI function."""
    if not os.path.exists(device_link):
        return None
    name = os.path.basename(os.path.realpath(device_link))
    return name if _PCI_ADDRESS.match(name) else None


def read_hca(hca_dir, name):
    device_link = os.path.join(hca_dir, "device")
    address = pci_address(device_link)
    ports_dir = os.path.join(hca_dir, "ports")
    return {
        "name": name,
        "node_guid": read_text(os.path.join(hca_dir, "node_guid")),
        "fw_ver": read_text(os.path.join(hca_dir, "fw_ver")),
        "board_id": read_text(os.path.join(hca_dir, "board_id")),
        "hca_type": read_text(os.path.join(hca_dir, "hca_type")),
        "pci_address": address,
        "numa_node": numa_node(os.path.realpath(device_link)) if address else None,
        "ports": [read_port(os.path.join(ports_dir, str(number)), number) for number in numbered_entries(ports_dir)],
    }


def read_hcas(sysfs_root):
    """Every device in <sysfs_root>/class/infiniband, by name; [] on a host without any (or without the class)."""
    class_dir = os.path.join(sysfs_root, "class", "infiniband")
    return [read_hca(os.path.join(class_dir, name), name) for name in entries(class_dir)]
