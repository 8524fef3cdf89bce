# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard_staging role's problems with its datasets and targets: a thin wrapper over plugin_utils/_staging_plan/inputs."""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.inputs import input_problems


def shard_staging_problems(targets, names, sliced=None):
    """One line per problem, empty when all is well (see plugin_utils/_staging_plan/inputs)."""
    return input_problems(list(targets or []), list(names or []), list(sliced or []))


class FilterModule:
    def filters(self):
        return {"shard_staging_problems": shard_staging_problems}
