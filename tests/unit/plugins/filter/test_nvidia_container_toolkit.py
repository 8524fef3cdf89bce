# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_container_toolkit_problems filter reaches plugin_utils and turns a missing or unknown key into a filter
error."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.nvidia_container_toolkit import (
    FilterModule, nvidia_container_toolkit_containerd_checker, nvidia_container_toolkit_engines_simulated,
    nvidia_container_toolkit_problems, nvidia_container_toolkit_toolkit_simulated)

SETTINGS = {
    "os_family": "Debian", "distribution": "Debian", "major_version": "12", "releases": ["12", "13"], "version": "1.17.8",
    "repo_key_fingerprint": "C95B321B61E88C1809C4F759DDCAE044F796ECB0", "engine_source": "distribution",
    "docker_repo_key_fingerprint": "", "source": "repository", "packages": ["nvidia-container-toolkit"],
    "local_packages": [],
}


def test_the_filter_is_exposed():
    assert FilterModule().filters() == {
        "nvidia_container_toolkit_problems": nvidia_container_toolkit_problems,
        "nvidia_container_toolkit_engines_simulated": nvidia_container_toolkit_engines_simulated,
        "nvidia_container_toolkit_toolkit_simulated": nvidia_container_toolkit_toolkit_simulated,
        "nvidia_container_toolkit_containerd_checker": nvidia_container_toolkit_containerd_checker}


def test_the_filter_returns_the_lines():
    assert nvidia_container_toolkit_problems(SETTINGS) == []
    assert nvidia_container_toolkit_problems(dict(SETTINGS, version="")) == [
        "nvidia_container_toolkit_version is empty; set the toolkit version to install (for example 1.17.8)"]


def test_a_missing_or_unknown_key_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="nvidia_container_toolkit_problems: 'version'"):
        nvidia_container_toolkit_problems({key: value for key, value in SETTINGS.items() if key != "version"})
    with pytest.raises(AnsibleFilterError, match="nvidia_container_toolkit_problems: settings has unknown key.s. arch"):
        nvidia_container_toolkit_problems(dict(SETTINGS, arch="x86_64"))
