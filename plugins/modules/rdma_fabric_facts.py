#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_fabric_facts
short_description: Report the RDMA fabric of a node (HCAs, ports, GPU-HCA PCIe paths, GPUDirect RDMA) from sysfs
version_added: 0.2.0
description:
  - Reads every RDMA device (HCA) in C(<sysfs_root>/class/infiniband) with its node GUID, firmware, board id, PCI
    address and NUMA node, and each port's state, physical state, link layer (InfiniBand, or Ethernet for RoCE), rate,
    LID (InfiniBand), GID table (RoCE) and error counters.
  - Classifies the PCIe path between each HCA and each NVIDIA GPU as C(nvidia-smi topo -m) does (V(PIX), V(PXB), V(PHB),
    V(NODE), V(SYS)), from where sysfs places the two devices.
  - Says which GPUDirect RDMA method the node can use, V(dmabuf) or V(peermem), or why neither.
  - Needs no RDMA tools (ibstat, rdma-core) and no NVIDIA tools; a node without HCAs returns an empty list, not an error.
  - Returns the result both at the top level and as the fact C(rdma_fabric).
  - It only reads; nothing on the host changes.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes.read_only
  - ansible.builtin.action_common_attributes.facts
options:
  sysfs_root:
    description:
      - Where sysfs is mounted. HCAs are read from C(<sysfs_root>/class/infiniband), PCI devices from
        C(<sysfs_root>/bus/pci/devices), loaded kernel modules from C(<sysfs_root>/module).
    type: path
    default: /sys
  procfs_root:
    description:
      - Where procfs is mounted. The kernel release is read from C(<procfs_root>/sys/kernel/osrelease), the NVIDIA kernel
        module's flavour from C(<procfs_root>/driver/nvidia/version).
    type: path
    default: /proc
  gpu_bus_ids:
    description:
      - The GPUs to pair with each HCA, as PCI bus ids (C(0000:07:00.0), or nvidia-smi's C(00000000:07:00.0)).
      - When not set, every NVIDIA GPU on PCI (vendor V(0x10de), class V(0x0300) or V(0x0302)).
    type: list
    elements: str
attributes:
  facts:
    support: full
  platform:
    platforms: linux
    details: Reads Linux sysfs and procfs.
notes:
  - The GID table is read for Ethernet (RoCE) ports only; an InfiniBand port's GIDs follow from its port GUID.
  - A NUMA node the kernel does not know (sysfs writes -1, common on single-socket hosts and VMs) is null, and two
    devices under different host bridges that both lack one count as the same node (V(NODE)).
  - DMA-BUF is counted possible with Linux 5.12 or later and NVIDIA's open kernel module loaded; it also needs an RDMA
    stack and NCCL recent enough to use it, which this module does not check.
"""

EXAMPLES = r"""
- name: Read the fabric
  dlinfra.gpu_cluster.rdma_fabric_facts:

- name: Every port is up
  ansible.builtin.assert:
    that: >-
      ansible_facts['rdma_fabric']['hcas'] | map(attribute='ports') | flatten
      | rejectattr('state', 'eq', 'ACTIVE') | list | length == 0

- name: Pair the HCAs with the GPUs nvidia_gpu_facts found
  dlinfra.gpu_cluster.rdma_fabric_facts:
    gpu_bus_ids: "{{ ansible_facts['nvidia_gpu']['gpus'] | map(attribute='pci_bus_id') | list }}"
  register: __fabric
"""

RETURN = r"""
ansible_facts:
  description: The same data as the top-level keys, under one fact.
  returned: always
  type: dict
  contains:
    rdma_fabric:
      description: Everything this module returns at the top level, except C(changed).
      returned: always
      type: dict
      sample: {hca_count: 0, hcas: [], gpu_pci_addresses: ["0000:00:06.0"], pcie_paths: [], gpudirect: {method: dmabuf}}
hca_count:
  description: Number of entries in RV(hcas).
  returned: always
  type: int
  sample: 2
hcas:
  description: The RDMA devices in C(/sys/class/infiniband), by name; empty on a node without any.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Device name.
      type: str
      sample: mlx5_0
    node_guid:
      description: Node GUID as sysfs writes it; null where not reported.
      type: str
      sample: "a088:c203:0042:9f10"
    fw_ver:
      description: Firmware version; null where not reported.
      type: str
      sample: "28.39.2048"
    board_id:
      description: Board id (for ConnectX, the PSID); null where the driver has no such file.
      type: str
      sample: MT_0000000838
    hca_type:
      description: Chip type; null where the driver has no such file.
      type: str
      sample: MT4129
    pci_address:
      description: The PCI function the device is; null for a software device (soft-RoCE, for example).
      type: str
      sample: "0000:19:00.0"
    numa_node:
      description: NUMA node of the PCI function; null where the kernel does not know it.
      type: int
      sample: 0
    ports:
      description: One entry per port, by number.
      type: list
      elements: dict
      contains:
        port:
          description: Port number.
          type: int
          sample: 1
        state:
          description: Logical state (V(DOWN), V(INIT), V(ARMED), V(ACTIVE), V(ACTIVE_DEFER)).
          type: str
          sample: ACTIVE
        phys_state:
          description: Physical state (V(Sleep), V(Polling), V(Disabled), V(PortConfigurationTraining), V(LinkUp),
            V(LinkErrorRecovery), V(Phy Test)).
          type: str
          sample: LinkUp
        link_layer:
          description: V(InfiniBand), or V(Ethernet) for RoCE.
          type: str
          sample: InfiniBand
        rate_gbps:
          description: Data rate in Gb/s (width times lane speed); null where not reported.
          type: float
          sample: 400
        rate:
          description: The rate as sysfs writes it, with width and speed name.
          type: str
          sample: 400 Gb/sec (4X NDR)
        lid:
          description: The port's LID (InfiniBand); null on Ethernet ports. 0 until a subnet manager assigns one.
          type: int
          sample: 26
        gids:
          description: The used entries of the GID table of an Ethernet (RoCE) port, by index; empty on InfiniBand.
          type: list
          elements: dict
          sample: [{index: 3, gid: "0000:0000:0000:0000:0000:ffff:0a00:000b", type: RoCE v2, ndev: eth1}]
        error_counters:
          description: The port's error counters that are present, of V(symbol_error), V(link_downed),
            V(port_rcv_errors), V(link_error_recovery) and V(port_xmit_discards).
          type: dict
          sample: {symbol_error: 0, link_downed: 1, port_rcv_errors: 0, link_error_recovery: 0, port_xmit_discards: 0}
gpu_pci_addresses:
  description: The GPUs paired with the HCAs (O(gpu_bus_ids) or those found on PCI), as sysfs writes a PCI address.
  returned: always
  type: list
  elements: str
  sample: ["0000:18:00.0"]
pcie_paths:
  description: One entry per HCA and GPU pair; empty without HCAs or GPUs.
  returned: always
  type: list
  elements: dict
  contains:
    hca:
      description: HCA name.
      type: str
      sample: mlx5_0
    hca_pci_address:
      description: The HCA's PCI address; null for a software device.
      type: str
      sample: "0000:19:00.0"
    gpu_pci_address:
      description: The GPU's PCI address.
      type: str
      sample: "0000:18:00.0"
    relation:
      description:
        - V(PIX) at most one PCIe switch between them, V(PXB) several without the host bridge, V(PHB) through their
          host bridge, V(NODE) across host bridges of one NUMA node, V(SYS) across NUMA nodes.
        - Null where either device has no place on PCI in sysfs.
      type: str
      sample: PIX
gpudirect:
  description: Which GPUDirect RDMA method this node can use.
  returned: always
  type: dict
  contains:
    method:
      description: V(dmabuf) where DMA-BUF is possible, else V(peermem) where nvidia_peermem is loaded, else null.
      type: str
      sample: dmabuf
    reason:
      description: Why RV(gpudirect.method) is null, and what to do; null when there is a method.
      type: str
      sample: null
    dmabuf_possible:
      description: Whether Linux is 5.12 or later and NVIDIA's open kernel module is loaded.
      type: bool
      sample: true
    peermem_loaded:
      description: Whether the nvidia_peermem kernel module is loaded.
      type: bool
      sample: false
    nvidia_loaded:
      description: Whether the nvidia kernel module is loaded.
      type: bool
      sample: true
    kernel_module_flavor:
      description: V(open) or V(proprietary); null when the nvidia module is not loaded.
      type: str
      sample: open
    kernel_release:
      description: The running kernel's release.
      type: str
      sample: 6.8.0-90-generic
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_smi import scan_pci_devices
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.gpudirect import gpudirect_state
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.hcas import read_hcas
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.pcie_paths import gpu_hca_paths, normalize_bus_id

_MOUNTS = {"sysfs_root": ("sysfs", "/sys"), "procfs_root": ("procfs", "/proc")}


def gather(sysfs_root, procfs_root, gpu_bus_ids=None):
    """The module's result for the trees at sysfs_root and procfs_root; gpu_bus_ids already normalised, or None."""
    hcas = read_hcas(sysfs_root)
    if gpu_bus_ids is None:
        gpu_bus_ids = [gpu["address"] for gpu in scan_pci_devices(sysfs_root)[0]]
    return {
        "hca_count": len(hcas),
        "hcas": hcas,
        "gpu_pci_addresses": gpu_bus_ids,
        "pcie_paths": gpu_hca_paths(sysfs_root, hcas, gpu_bus_ids),
        "gpudirect": gpudirect_state(sysfs_root, procfs_root),
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            procfs_root=dict(type="path", default="/proc"),
            gpu_bus_ids=dict(type="list", elements="str"),
        ),
        supports_check_mode=True,
    )
    for option, (filesystem, usual) in _MOUNTS.items():
        if not os.path.isdir(module.params[option]):
            module.fail_json(msg="%s=%s is not a directory; set it to where %s is mounted (normally %s)"
                                 % (option, module.params[option], filesystem, usual))
    gpu_bus_ids = module.params["gpu_bus_ids"]
    if gpu_bus_ids is not None:
        try:
            gpu_bus_ids = [normalize_bus_id(bus_id) for bus_id in gpu_bus_ids]
        except ValueError as error:
            module.fail_json(msg="gpu_bus_ids: %s; give the GPUs' bus ids as nvidia-smi or lspci -D prints them, or leave "
                                 "the option unset to pair every NVIDIA GPU on PCI" % error)

    facts = gather(module.params["sysfs_root"], module.params["procfs_root"], gpu_bus_ids)
    module.exit_json(changed=False, ansible_facts={"rdma_fabric": facts}, **facts)


if __name__ == "__main__":
    main()
