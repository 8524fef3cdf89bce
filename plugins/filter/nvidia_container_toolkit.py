# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_container_toolkit role's preflight problems, what it cannot install in check mode and the containerd that
checks MicroK8s' template: a thin wrapper over plugin_utils/_nvidia_container_toolkit."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_container_toolkit.check_mode import (
    containerd_checker, engines_simulated, toolkit_simulated)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_container_toolkit.preflight import (
    preflight_problems)


def nvidia_container_toolkit_problems(settings):
    """One line per problem, empty when all is well (see plugin_utils/nvidia_container_toolkit_preflight)."""
    try:
        return preflight_problems(settings)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("nvidia_container_toolkit_problems: %s" % error) from error


def nvidia_container_toolkit_engines_simulated(wanted, versions, engine_set, resolved, engine_source, repo_added):
    """Whether check mode reports the engines' installation rather than simulate it (see
    plugin_utils/_nvidia_container_toolkit/check_mode)."""
    return engines_simulated(list(wanted or []), dict(versions or {}), dict(engine_set or {}), dict(resolved or {}),
                             engine_source, bool(repo_added))


def nvidia_container_toolkit_toolkit_simulated(source, version, local_copied):
    """Whether check mode reports the toolkit's installation rather than simulate it (see
    plugin_utils/_nvidia_container_toolkit/check_mode)."""
    return toolkit_simulated(source, str(version or ""), bool(local_copied))


def nvidia_container_toolkit_containerd_checker(microk8s_paths, found_paths):
    """The containerd binary that checks MicroK8s' template, '' for none (see
    plugin_utils/_nvidia_container_toolkit/check_mode)."""
    return containerd_checker([str(path) for path in microk8s_paths or []], [str(path) for path in found_paths or []])


class FilterModule:
    def filters(self):
        return {"nvidia_container_toolkit_problems": nvidia_container_toolkit_problems,
                "nvidia_container_toolkit_engines_simulated": nvidia_container_toolkit_engines_simulated,
                "nvidia_container_toolkit_toolkit_simulated": nvidia_container_toolkit_toolkit_simulated,
                "nvidia_container_toolkit_containerd_checker": nvidia_container_toolkit_containerd_checker}
