# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node-side staging engine of shard_fetch (private: its modules may change without notice); see transfer.stage()."""
