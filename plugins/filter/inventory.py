# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the inventory as a whole (plugin_utils/_common/inventory_slices.py)."""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.inventory_slices import limit_problems, staging_slice_problems


class FilterModule(object):

    def filters(self):
        return {"inventory_limit_problems": limit_problems, "shard_staging_slice_problems": staging_slice_problems}
