# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: how a node shares its GPUs (whole, MIG, time-slicing): the MIG profile table, the inventory's declaration
resolved per GPU, the device plugin's config and the node labels. May change without notice; the modules, filters,
actions and role arguments are the interface (docs/maintaining.md)."""
