# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the nccl role's preflight, the nccl-tests output reader and the reader of
the transport NCCL chose (NCCL_DEBUG=INFO). May change without notice;
the modules, filters, actions and role arguments are the interface (docs/maintaining.md)."""
