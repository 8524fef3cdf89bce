# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the anaconda role does with each conda environment."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.anaconda import anaconda_env_step
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._anaconda.environments import env_action, env_step

KNOWN = ["/opt/conda", "/opt/conda/envs/torch"]


@pytest.mark.parametrize("path, recorded, wanted, expected", [
    pytest.param("/opt/conda/envs/tf", "", "ab12", "create", id="missing"),
    pytest.param("/opt/conda/envs/tf", "ab12", "ab12", "create", id="missing-though-recorded"),
    pytest.param("/opt/conda/envs/torch", "", "ab12", "update", id="never-recorded"),
    pytest.param("/opt/conda/envs/torch", "cd34", "ab12", "update", id="file-changed"),
    pytest.param("/opt/conda/envs/torch", "ab12", "ab12", "none", id="unchanged"),
    pytest.param("/opt/conda/envs/to", "ab12", "ab12", "create", id="a-prefix-is-not-an-environment"),
])
def test_env_action(path, recorded, wanted, expected):
    assert env_action(path, KNOWN, recorded, wanted) == expected


@pytest.mark.parametrize("environment, prune", [
    pytest.param({"name": "torch", "file": "envs/torch.yml"}, True, id="prune-by-default"),
    pytest.param({"name": "torch", "file": "envs/torch.yml", "prune": False}, False, id="prune-off"),
])
def test_env_step(environment, prune):
    assert env_step(environment, "/srv/envs/torch.yml", "/opt/conda/envs/torch", KNOWN, "ab12", "ab12") == {
        "name": "torch", "src": "/srv/envs/torch.yml", "prune": prune, "path": "/opt/conda/envs/torch", "action": "none"}


def test_the_filter_takes_what_ansible_gives():
    assert anaconda_env_step({"name": "tf"}, "tf.yml", "/opt/conda/envs/tf", None, "", "ab12")["action"] == "create"
