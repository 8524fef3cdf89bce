# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nccl_busbw filter: a thin wrapper over plugin_utils/_nccl/nccl_tests.py."""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.nccl_tests import nccl_busbw, parse_nccl_tests

__all__ = ["FilterModule", "nccl_busbw", "parse_nccl_tests"]


class FilterModule:
    def filters(self):
        return {"nccl_busbw": nccl_busbw}
