# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the shard_plan action's planner: sources, discovery, placement, the plan, each node's world, its targets' reports,
peers, the list store and the per-cluster plans. May change without notice;
the modules, filters, actions and role arguments are the interface (docs/maintaining.md)."""
