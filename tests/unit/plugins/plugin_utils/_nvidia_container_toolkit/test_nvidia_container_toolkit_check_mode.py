# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the nvidia_container_toolkit role reports rather than simulates in check mode, and the containerd that checks
MicroK8s' template."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.nvidia_container_toolkit import (
    nvidia_container_toolkit_containerd_checker, nvidia_container_toolkit_engines_simulated,
    nvidia_container_toolkit_toolkit_simulated)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_container_toolkit.check_mode import (
    containerd_checker, engines_simulated, toolkit_simulated)

DOCKER_SET = {"docker": ["docker-ce", "docker-ce-cli"], "containerd": ["containerd.io"]}
DISTRIBUTION_SET = {"docker": ["docker.io"], "containerd": ["containerd"]}


@pytest.mark.parametrize("wanted, versions, engine_set, resolved, source, added, expected", [
    pytest.param([], {"docker": "", "containerd": ""}, DISTRIBUTION_SET, {}, "distribution", False, False, id="none"),
    pytest.param(["docker"], {"docker": "", "containerd": ""}, DISTRIBUTION_SET, {}, "distribution", False, False,
                 id="no-version-asked"),
    pytest.param(["docker"], {"docker": "27.1", "containerd": ""}, DOCKER_SET, {}, "docker", False, True,
                 id="version-unresolved"),
    pytest.param(["docker"], {"docker": "27.1", "containerd": ""}, DOCKER_SET, {"docker-ce": ""}, "docker", False, True,
                 id="version-resolved-empty"),
    pytest.param(["docker"], {"docker": "27.1", "containerd": ""}, DOCKER_SET, {"docker-ce": "5:27.1.2-1"}, "docker",
                 False, False, id="version-resolved"),
    pytest.param(["containerd"], {"docker": "27.1", "containerd": ""}, DOCKER_SET, {}, "docker", False, False,
                 id="version-of-an-engine-not-wanted"),
    pytest.param(["docker", "containerd"], {"docker": "27.1", "containerd": "1.7"}, DOCKER_SET,
                 {"docker-ce": "5:27.1.2-1"}, "docker", False, True, id="one-of-two-unresolved"),
    pytest.param([], {"docker": "", "containerd": ""}, DOCKER_SET, {}, "docker", True, True, id="docker-repo-added"),
    pytest.param([], {"docker": "", "containerd": ""}, DISTRIBUTION_SET, {}, "distribution", True, False,
                 id="added-counts-for-docker-only"),
])
def test_engines_simulated(wanted, versions, engine_set, resolved, source, added, expected):
    assert engines_simulated(wanted, versions, engine_set, resolved, source, added) is expected


@pytest.mark.parametrize("source, version, copied, expected", [
    pytest.param("repository", "", False, True, id="repository-unresolved"),
    pytest.param("repository", "1.17.8-1", True, False, id="repository-resolved"),
    pytest.param("local", "", True, True, id="local-copied-now"),
    pytest.param("local", "", False, False, id="local-there-already"),
])
def test_toolkit_simulated(source, version, copied, expected):
    assert toolkit_simulated(source, version, copied) is expected


@pytest.mark.parametrize("microk8s_paths, found_paths, expected", [
    pytest.param(["/etc/systemd/system/snap.microk8s.daemon-containerd.service", "/snap/microk8s/current/bin/containerd"],
                 ["/usr/bin/containerd"], "/snap/microk8s/current/bin/containerd", id="microk8s-own-first"),
    pytest.param(["/snap/microk8s/current/bin/containerd-shim"], ["/usr/bin/containerd"], "/usr/bin/containerd",
                 id="the-hosts"),
    pytest.param([], ["/usr/local/bin/containerd"], "", id="none"),
])
def test_containerd_checker(microk8s_paths, found_paths, expected):
    assert containerd_checker(microk8s_paths, found_paths) == expected


def test_the_filters_take_what_ansible_gives():
    assert nvidia_container_toolkit_engines_simulated(("docker",), {"docker": "27.1"}, DOCKER_SET, None, "docker", 0)
    assert nvidia_container_toolkit_toolkit_simulated("repository", None, False) is True
    assert nvidia_container_toolkit_containerd_checker(None, ("/usr/bin/containerd",)) == "/usr/bin/containerd"
