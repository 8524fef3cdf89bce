# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the planner's tests share: a plan of shards whose URLs carry a signature."""
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.cluster_plans import plan_dataset


def signed_shards(signature):
    return [{"name": "s-%d.tar" % i, "url": "https://store/s-%d.tar?X-Amz-Expires=600&X-Amz-Signature=%s" % (i, signature),
             "size": 100, "sha256": "%064x" % i} for i in range(4)]


@pytest.fixture
def plan_signed():
    """plan(tmp_path, signature): four signed shards planned over two nodes in tmp_path."""
    def plan(tmp_path, signature):
        nodes = {"n%d" % i: {"free_bytes": 10 ** 6, "held_bytes": 0, "total_bytes": 10 ** 6} for i in range(2)}
        settings = {"name": "ds", "mode": "partition", "replicas": 1, "headroom": 0.0, "peer_assist": False}
        return plan_dataset(settings, signed_shards(signature), nodes, str(tmp_path), {}, check_mode=False)
    return plan
