# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The train role's launch decision: a thin wrapper over plugin_utils/train_job."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._train.job import launch, outcome, rank_line


def train_launch(nodes, dataset, settings):
    """Every node's rank units, or every problem (see plugin_utils/train_job.launch)."""
    try:
        return launch(dataset, nodes, settings)
    except (KeyError, TypeError, ValueError) as error:
        raise AnsibleFilterError("train_launch: %s" % error) from error


def train_rank_line(progress):
    """One line of a rank's figures (see plugin_utils/train_job.rank_line)."""
    return rank_line(progress)


def train_outcome(status, timeout):
    """Why a node's part of the job failed, "" when it did not (see plugin_utils/train_job.outcome)."""
    try:
        return outcome(status, timeout)
    except ValueError as error:
        raise AnsibleFilterError("train_outcome: the status is not JSON: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"train_launch": train_launch, "train_rank_line": train_rank_line, "train_outcome": train_outcome}
