# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the nvidia_container_toolkit role cannot install in check mode, and which containerd checks MicroK8s'
template: pure Python.

Check mode cannot install a package that has no candidate yet: Docker's repository was only just (not) added, no
version was resolved for a version asked for, or the local .deb files were only just (not) copied. The role then
reports the installation instead of simulating it.
"""

import re

_CONTAINERD = re.compile(r".*/containerd$")


def engines_simulated(wanted, versions, engine_set, resolved, engine_source, repo_added):
    """Whether the engines' installation is reported rather than simulated (in check mode).

    wanted: the engines the role installs (docker, containerd). versions: the version asked for each ('' for none).
    engine_set: each engine's packages, its anchor first. resolved: the version resolved for each anchor ('' for none).
    engine_source: nvidia_container_toolkit_engine_source (distribution, docker). repo_added: whether this run added
    Docker's repository.
    """
    asked = [engine for engine, version in versions.items() if version]
    found = [anchor for anchor, version in resolved.items() if version]
    unresolved = [engine_set[engine][0] for engine in wanted if engine in asked]
    return bool((engine_source == "docker" and repo_added) or [anchor for anchor in unresolved if anchor not in found])


def toolkit_simulated(source, version, local_copied):
    """Whether the toolkit's installation is reported rather than simulated (in check mode).

    source: nvidia_container_toolkit_source (repository, local). version: the toolkit's version resolved from the
    repository ('' for none). local_copied: whether this run copied the local .deb files.
    """
    return bool((source == "repository" and len(version) == 0) or (source == "local" and local_copied))


def containerd_checker(microk8s_paths, found_paths):
    """The containerd that checks MicroK8s' template: MicroK8s' own (the first of ``microk8s_paths`` that is a
    containerd), else the host's /usr/bin/containerd where ``found_paths`` holds it, else '' (no check)."""
    own = [path for path in microk8s_paths if _CONTAINERD.match(path)]
    host = ["/usr/bin/containerd"] if "/usr/bin/containerd" in found_paths else []
    return (own + host + [""])[0]
