# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: what rdma_fabric_facts reads from sysfs and procfs (HCAs and their ports, the PCIe path between each HCA
and each GPU, GPUDirect RDMA). Stdlib only; may change without notice. The module is the interface."""
