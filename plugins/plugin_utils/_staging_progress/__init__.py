# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: what the shard_fetch_wait action shows while it waits for a node's fetch (lines, the cluster board, the wait).
May change without notice; the modules, filters, actions and role arguments are the interface (docs/maintaining.md)."""
