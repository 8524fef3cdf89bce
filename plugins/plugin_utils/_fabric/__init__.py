# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: what the fabric checks decide from rdma_fabric_facts' result (ports up at the expected rate and link layer,
GPUDirect RDMA where it is expected). May change without notice; the modules, filters, actions and role arguments are
the interface (docs/maintaining.md)."""
